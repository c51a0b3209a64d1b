package alloc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"

	"github.com/farmem/farmem/farmem"
)

// ErrBadHandover: a handover record is not one this package wrote, or describes blocks that
// cannot be the closed allocator's (outside a heap, past the bump word, misaligned,
// overlapping). New reports it in [Adoption].Err and adopts nothing from that record. It wraps
// farmem.ErrInvalid.
var ErrBadHandover = fmt.Errorf("alloc: bad handover record: %w", farmem.ErrInvalid)

// A handover record is what a closed allocator held, written into far memory at Close and
// named by its client id's word in the handover table. Its bytes are a prefix followed by a
// body; they are stored in segments (the first, the head, at the address the word names), each
// in a block the closing allocator held. The prefix:
//
//	0   magic "farmHOV1"
//	8   client id
//	16  body length L
//	24  checksum: FNV-1a of the prefix (checksum and next as zero) and the body
//	32  next: the packed word of an older record this one chains to (0: none); written last
//	40  number of further segments s (at most maxSegs)
//	48  s descriptors: address, length (16 bytes each)
//
// then as much of the body as the head read holds, the rest in the segments in order. The
// body is a list of arena states and retired blocks, in uvarints (see encodeBody). The blocks
// holding the record are listed in the body as free ranges of their arenas: the adopter frees
// them once it has read the record.
const (
	handoverMagic uint64 = 0x31564f486d726166 // "farmHOV1"
	prefixFixed          = 48
	descLen              = 16
	// maxSegs bounds the segments besides the head, so the prefix fits the least head read.
	maxSegs = 12
	// minHeadRead is the least head read: the packed word's low 4 bits k give 256 << k bytes.
	minHeadRead = 256
	maxHeadRead = minHeadRead << 15
	// maxBody bounds a record's body (a corrupt length must not make the adopter allocate).
	maxBody = 1 << 32
	// maxChain bounds the records adopted by one New (records chain when the word was taken).
	maxChain = 64
	offNext  = 32
)

// packWord packs the handover word: the head's address (16-aligned) and its read length.
func packWord(head farmem.Addr, read uint64) uint64 {
	k := uint64(0)
	for minHeadRead<<k < read {
		k++
	}
	return uint64(head) | k
}

// unpackWord returns the head's address and read length named by a handover word.
func unpackWord(w uint64) (farmem.Addr, uint64) {
	return farmem.Addr(w &^ 15), minHeadRead << (w & 15)
}

// blockRun is n consecutive units from off: blocks of a class, chunks, or bytes (free ranges).
type blockRun struct{ off, n uint64 }

// arenaState is what an allocator holds in one arena, in a form that can be written out and
// relayed: node 0 is the symmetric area.
type arenaState struct {
	node     farmem.NodeID
	cur, end uint64             // the chunk being carved (0, 0: none)
	spare    []uint64           // whole chunks, not yet carved
	large    []blockRun         // free runs of whole chunks: offset, chunks
	ranges   []blockRun         // free byte ranges: offset, bytes (the record's own blocks)
	small    map[int][]blockRun // by class: runs of consecutive free blocks of the class
}

// retiredState is a retired block in a record, with its epoch tag.
type retiredState struct {
	node           farmem.NodeID
	off, size, tag uint64
}

// handover is the decoded body of a record.
type handover struct {
	arenas  []arenaState
	retired []retiredState
}

func (h *handover) empty() bool {
	if len(h.retired) > 0 {
		return false
	}
	for i := range h.arenas {
		if !h.arenas[i].empty() {
			return false
		}
	}
	return true
}

func (s *arenaState) empty() bool {
	return s.end == 0 && len(s.spare) == 0 && len(s.large) == 0 && len(s.ranges) == 0 && len(s.small) == 0
}

// coalesce sorts offsets and turns them into runs of consecutive blocks of size bytes.
func coalesce(offs []uint64, size uint64) []blockRun {
	slices.Sort(offs)
	var runs []blockRun
	for _, o := range offs {
		if n := len(runs); n > 0 && runs[n-1].off+runs[n-1].n*size == o {
			runs[n-1].n++
			continue
		}
		runs = append(runs, blockRun{o, 1})
	}
	return runs
}

// encodeBody writes a handover body: uvarints throughout, offsets in 16-byte units as deltas
// from the previous entry of their list (lists sorted ascending):
//
//	arenas; per arena: node, cur, end, spares, large runs (delta, chunks), ranges (delta,
//	bytes), classes; per class: class, runs (gap from the previous run's end, count)
//	retired; per block: node, offset/16, size, tag
func encodeBody(h *handover) []byte {
	var b []byte
	u := func(v uint64) { b = binary.AppendUvarint(b, v) }
	u(uint64(len(h.arenas)))
	for i := range h.arenas {
		s := &h.arenas[i]
		u(uint64(s.node))
		u(s.cur)
		u(s.end)
		slices.Sort(s.spare)
		u(uint64(len(s.spare)))
		prev := uint64(0)
		for _, o := range s.spare {
			u((o - prev) / minBlock)
			prev = o
		}
		for _, l := range [][]blockRun{s.large, s.ranges} {
			slices.SortFunc(l, func(x, y blockRun) int { return cmpU(x.off, y.off) })
			u(uint64(len(l)))
			prev = 0
			for _, r := range l {
				u((r.off - prev) / minBlock)
				u(r.n)
				prev = r.off
			}
		}
		classes := slices.Sorted(maps.Keys(s.small))
		u(uint64(len(classes)))
		for _, c := range classes {
			runs := s.small[c]
			u(uint64(c))
			u(uint64(len(runs)))
			end := uint64(0)
			for _, r := range runs {
				u((r.off - end) / minBlock)
				u(r.n)
				end = r.off + r.n*classSizes[c]
			}
		}
	}
	u(uint64(len(h.retired)))
	for _, r := range h.retired {
		u(uint64(r.node))
		u(r.off / minBlock)
		u(r.size)
		u(r.tag)
	}
	return b
}

func cmpU(x, y uint64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// bodyReader reads uvarints, failing (sticky) on truncation or a value out of range.
type bodyReader struct {
	b   []byte
	err error
}

func (r *bodyReader) u(max uint64, what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = fmt.Errorf("alloc: handover body truncated at %s: %w", what, ErrBadHandover)
		return 0
	}
	r.b = r.b[n:]
	if v > max {
		r.err = fmt.Errorf("alloc: handover %s %d exceeds %d: %w", what, v, max, ErrBadHandover)
		return 0
	}
	return v
}

// count reads a list length: each entry takes at least one byte, so a count beyond the bytes
// left is corrupt (and allocating for it is never needed).
func (r *bodyReader) count(what string) int {
	return int(r.u(uint64(len(r.b)), what))
}

// off adds a delta in 16-byte units to prev, within 48 bits.
func (r *bodyReader) off(prev uint64, what string) uint64 {
	d := r.u((farmem.MaxOffset+1)/minBlock, what)
	o := prev + d*minBlock
	if r.err == nil && o > farmem.MaxOffset {
		r.err = fmt.Errorf("alloc: handover %s %#x beyond 48 bits: %w", what, o, ErrBadHandover)
	}
	return o
}

// decodeBody decodes a handover body. It never panics; what it returns has every offset within
// 48 bits, every class known, every count nonzero where zero means nothing; whether the blocks
// belong to a heap is for the adopter to check against the headers.
func decodeBody(b []byte) (*handover, error) {
	r := &bodyReader{b: b}
	h := &handover{}
	const maxOff = farmem.MaxOffset
	na := r.count("arena count")
	for range na {
		if r.err != nil {
			break
		}
		s := arenaState{small: map[int][]blockRun{}}
		s.node = farmem.NodeID(r.u(uint64(farmem.MaxMemoryNode), "node"))
		s.cur = r.u(maxOff, "carve position")
		s.end = r.u(maxOff, "carve end")
		prev := uint64(0)
		for range r.count("spare count") {
			prev = r.off(prev, "spare chunk")
			s.spare = append(s.spare, prev)
		}
		for li := range 2 {
			n := r.count("run count")
			prev = 0
			for range n {
				prev = r.off(prev, "run")
				k := r.u(maxOff, "run length")
				if r.err == nil && k == 0 {
					r.err = fmt.Errorf("alloc: handover run of length 0: %w", ErrBadHandover)
				}
				if li == 0 {
					s.large = append(s.large, blockRun{prev, k})
				} else {
					s.ranges = append(s.ranges, blockRun{prev, k})
				}
			}
		}
		for range r.count("class count") {
			c := int(r.u(uint64(len(classSizes)-1), "class"))
			if _, dup := s.small[c]; dup && r.err == nil {
				r.err = fmt.Errorf("alloc: handover class %d listed twice: %w", c, ErrBadHandover)
			}
			nr := r.count("class runs")
			runs := make([]blockRun, 0, nr)
			end := uint64(0)
			for range nr {
				o := r.off(end, "block run")
				k := r.u(maxOff/classSizes[c], "blocks in run")
				if r.err == nil && (k == 0 || o+k*classSizes[c] > maxOff+1) {
					r.err = fmt.Errorf("alloc: handover run of %d blocks of %d bytes at %#x: %w", k, classSizes[c], o, ErrBadHandover)
				}
				runs = append(runs, blockRun{o, k})
				end = o + k*classSizes[c]
			}
			if r.err == nil && len(runs) > 0 {
				s.small[c] = runs
			}
		}
		if r.err == nil {
			h.arenas = append(h.arenas, s)
		}
	}
	for range r.count("retired count") {
		if r.err != nil {
			break
		}
		rs := retiredState{
			node: farmem.NodeID(r.u(uint64(farmem.MaxMemoryNode), "retired node")),
			off:  r.u(maxOff/minBlock, "retired offset") * minBlock,
			size: r.u(maxOff, "retired size"),
			tag:  r.u(^uint64(0), "retired tag"),
		}
		if r.err == nil && rs.size == 0 {
			r.err = fmt.Errorf("alloc: handover retired block of 0 bytes: %w", ErrBadHandover)
		}
		h.retired = append(h.retired, rs)
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("alloc: %d bytes after the handover body: %w", len(r.b), ErrBadHandover)
	}
	if r.err != nil {
		return nil, r.err
	}
	return h, nil
}

// segment is a stretch of the record's bytes in far memory.
type segment struct {
	addr farmem.Addr
	n    uint64
}

// recordHead is a decoded prefix.
type recordHead struct {
	client   uint64
	bodyLen  uint64
	checksum uint64
	next     uint64
	segs     []segment
	prefix   int // bytes of prefix
}

// encodePrefix writes a record's prefix (next as given, checksum computed over body).
func encodePrefix(client uint64, segs []segment, body []byte, next uint64) []byte {
	p := make([]byte, prefixFixed+descLen*len(segs))
	le := binary.LittleEndian
	le.PutUint64(p[0:], handoverMagic)
	le.PutUint64(p[8:], client)
	le.PutUint64(p[16:], uint64(len(body)))
	le.PutUint64(p[40:], uint64(len(segs)))
	for i, s := range segs {
		le.PutUint64(p[prefixFixed+descLen*i:], uint64(s.addr))
		le.PutUint64(p[prefixFixed+descLen*i+8:], s.n)
	}
	le.PutUint64(p[24:], recordSum(p, body))
	le.PutUint64(p[offNext:], next)
	return p
}

// recordSum is the checksum of a record: FNV-1a of its prefix with the checksum and next words
// taken as zero, then its body.
func recordSum(prefix, body []byte) uint64 {
	f := fnv.New64a()
	var z [16]byte
	f.Write(prefix[:24])
	f.Write(z[:])
	f.Write(prefix[40:])
	f.Write(body)
	return f.Sum64()
}

// decodeHead decodes the prefix at the start of a head read. It never panics.
func decodeHead(b []byte) (recordHead, error) {
	if len(b) < prefixFixed {
		return recordHead{}, fmt.Errorf("alloc: handover head of %d bytes: %w", len(b), ErrBadHandover)
	}
	le := binary.LittleEndian
	if m := le.Uint64(b); m != handoverMagic {
		return recordHead{}, fmt.Errorf("alloc: handover magic %#x, want %#x: %w", m, handoverMagic, ErrBadHandover)
	}
	h := recordHead{client: le.Uint64(b[8:]), bodyLen: le.Uint64(b[16:]), checksum: le.Uint64(b[24:]), next: le.Uint64(b[offNext:])}
	ns := le.Uint64(b[40:])
	if ns > maxSegs || h.bodyLen > maxBody {
		return recordHead{}, fmt.Errorf("alloc: handover of %d segments, %d bytes: %w", ns, h.bodyLen, ErrBadHandover)
	}
	h.prefix = prefixFixed + descLen*int(ns)
	if len(b) < h.prefix {
		return recordHead{}, fmt.Errorf("alloc: handover prefix of %d bytes in a head of %d: %w", h.prefix, len(b), ErrBadHandover)
	}
	rest := h.bodyLen - min(h.bodyLen, uint64(len(b)-h.prefix))
	var sum uint64
	for i := range int(ns) {
		s := segment{farmem.Addr(le.Uint64(b[prefixFixed+descLen*i:])), le.Uint64(b[prefixFixed+descLen*i+8:])}
		if s.n == 0 || s.n > maxBody || s.addr.Offset()+s.n > farmem.MaxOffset+1 {
			return recordHead{}, fmt.Errorf("alloc: handover segment %v of %d bytes: %w", s.addr, s.n, ErrBadHandover)
		}
		sum += s.n
		h.segs = append(h.segs, s)
	}
	if sum != rest {
		return recordHead{}, fmt.Errorf("alloc: handover segments hold %d bytes, the body needs %d more: %w", sum, rest, ErrBadHandover)
	}
	return h, nil
}

// decodeRecord decodes a whole record laid out contiguously (head read, then the segments'
// bytes): prefix, checksum and body. It never panics.
func decodeRecord(b []byte, headRead int) (recordHead, *handover, error) {
	headRead = min(headRead, len(b))
	h, err := decodeHead(b[:headRead])
	if err != nil {
		return h, nil, err
	}
	if uint64(len(b)-h.prefix) < h.bodyLen {
		return h, nil, fmt.Errorf("alloc: handover record truncated: %w", ErrBadHandover)
	}
	body := b[h.prefix : uint64(h.prefix)+h.bodyLen]
	if s := recordSum(b[:h.prefix], body); s != h.checksum {
		return h, nil, fmt.Errorf("alloc: handover checksum %#x, computed %#x: %w", h.checksum, s, ErrBadHandover)
	}
	st, err := decodeBody(body)
	return h, st, err
}

// errNoStorage: the allocator holds no block that can store its record.
var errNoStorage = errors.New("alloc: no block to store the handover record")
