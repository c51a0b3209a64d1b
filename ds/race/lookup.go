package race

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// errStale asks an operation to look again: a block read failed validation, or the view it
// acted on changed in a way that needs a fresh read.
var errStale = errors.New("race: stale view")

// opState is one operation's key and what it learnt about blocks.
type opState struct {
	key []byte
	k   keyHash
	fp  uint8
	// ranges are the slot index ranges of the key's two combined buckets ([start, start+2B)).
	ranges [2]uint64
	same   bool // both candidates are the same combined bucket
	// known maps a slot word (unique while pinned: its block cannot be reused) to what its
	// block holds.
	known map[Slot]blockInfo
	meta  map[uint64][]byte // slot index -> prefetched metadata
	// waited is the subtable whose split lock this operation last found free while waiting.
	waited farmem.Addr
}

// blockInfo is what a block holds, as far as an operation cares.
type blockInfo struct {
	isKey    bool
	value    []byte
	deadline farmem.Time
}

// view is one read of a key's candidate slots and of its subtable's header, the header read
// after the slots (same batch, same node, so in order).
type view struct {
	st    farmem.Addr
	hdr   uint64
	idx   []uint64 // candidate slot indices, ascending, without duplicates
	words []Slot   // their words as read
}

// word returns the word of slot index i in the view (ok false if i is not a candidate).
func (v *view) word(i uint64) (Slot, bool) {
	for j, x := range v.idx {
		if x == i {
			return v.words[j], true
		}
	}
	return 0, false
}

// newOp prepares an operation on key.
func (t *Table) newOp(key []byte) *opState {
	op := &opState{key: key, k: t.hash(key)}
	op.fp = uint8(op.k.h2>>slotFPShift) >> (8 - t.p.FingerprintBits)
	twoG := 2 * t.geo.groups
	first := reduce(uint32(op.k.h1>>32), twoG)
	second := reduce(uint32(op.k.h2), twoG)
	start := func(mb uint64) uint64 { return (mb/2)*3*t.geo.perB + (mb%2)*t.geo.perB }
	op.ranges = [2]uint64{start(first), start(second)}
	if op.ranges[1] < op.ranges[0] {
		op.ranges[0], op.ranges[1] = op.ranges[1], op.ranges[0]
	}
	op.same = op.ranges[0] == op.ranges[1]
	return op
}

// addReads appends to b the reads of op's candidate slots in st, then of st's header, into
// bufs (allocated to size), and returns the index of the first read.
func (t *Table) addReads(b *farmem.Batch, op *opState, st farmem.Addr, bufs *[3][]byte) int {
	n := 2 * t.geo.perB * 8
	for i := range bufs[:2] {
		if uint64(len(bufs[i])) != n {
			bufs[i] = make([]byte, n)
		}
	}
	if len(bufs[2]) != 8 {
		bufs[2] = make([]byte, 8)
	}
	first := b.Read(t.geo.slotAddr(st, op.ranges[0]), bufs[0])
	if !op.same {
		b.Read(t.geo.slotAddr(st, op.ranges[1]), bufs[1])
	}
	b.Read(st.Add(stHeaderOff), bufs[2])
	return first
}

// decodeView builds the view of what addReads read.
func (t *Table) decodeView(op *opState, st farmem.Addr, bufs *[3][]byte) view {
	v := view{st: st, hdr: binary.LittleEndian.Uint64(bufs[2])}
	n := 2 * t.geo.perB
	add := func(start uint64, buf []byte) {
		for j := range n {
			i := start + j
			if _, dup := v.word(i); dup {
				continue
			}
			v.idx = append(v.idx, i)
			v.words = append(v.words, Slot(binary.LittleEndian.Uint64(buf[8*j:])))
		}
	}
	add(op.ranges[0], bufs[0])
	if !op.same {
		add(op.ranges[1], bufs[1])
	}
	return v
}

// locate reads op's candidate buckets in the subtable the directory cache names (one round
// trip), refreshing the cache until the subtable's header covers the key. pre, if not nil, adds
// ops to the first batch (an Insert's or Update's KV block write).
func (t *Table) locate(ctx context.Context, op *opState, pre func(*farmem.Batch)) (view, error) {
	var bufs [3][]byte
	var b farmem.Batch
	for attempt := 0; ; attempt++ {
		if attempt >= maxAttempts {
			return view{}, fmt.Errorf("race: no subtable covers the key after %d lookups: %w", attempt, ErrCorrupt)
		}
		st := t.subtableFor(op.k.h1)
		b.Reset()
		if pre != nil {
			pre(&b)
		}
		t.addReads(&b, op, st, &bufs)
		t.stats.Lookups++
		if err := t.m.Do(ctx, &b); err != nil {
			return view{}, fmt.Errorf("race: read buckets of %v: %w", st, err)
		}
		pre = nil
		v := t.decodeView(op, st, &bufs)
		if t.bug.noHeaderCheck || covers(v.hdr, op.k.h1) {
			return v, nil
		}
		if err := t.refresh(ctx, op.k.h1); err != nil {
			return view{}, err
		}
		if t.subtableFor(op.k.h1) == st {
			// The directory itself lags behind the split: follow the subtables' child words.
			nst, d, err := t.walk(ctx, st, op.k.h1)
			if err != nil {
				return view{}, err
			}
			p, err := packAddr(nst)
			if err != nil {
				return view{}, err
			}
			t.dir[op.k.h1&uint64(len(t.dir)-1)] = entryWord(p, d)
		}
	}
}

// matching returns the view's slots whose fingerprint is op's and that sel accepts.
func (t *Table) matching(op *opState, v *view, sel func(Slot) bool) []int {
	var js []int
	for j, w := range v.words {
		if !w.Empty() && w.Fingerprint() == op.fp && sel(w) {
			js = append(js, j)
		}
	}
	return js
}

// learn reads the blocks of the view's slots js that op does not know yet (one round trip,
// none if it knows them all) and, when meta is set, the metadata entries of those slots. It
// returns errStale if a block fails validation: its slot changed under the read, or the
// block is being reused, and the caller must look again.
func (t *Table) learn(ctx context.Context, op *opState, v *view, js []int, meta bool) error {
	var b farmem.Batch
	type pending struct {
		w   Slot
		buf []byte
	}
	var ps []pending
	for _, j := range js {
		w := blockKey(v.words[j])
		if _, ok := op.known[w]; ok {
			continue
		}
		buf := make([]byte, w.Size())
		b.Read(w.Addr(), buf)
		ps = append(ps, pending{w, buf})
	}
	type mpending struct {
		i   uint64
		buf []byte
	}
	var ms []mpending
	if meta && t.tr.MetaSize > 0 {
		for _, j := range js {
			buf := make([]byte, t.tr.MetaSize)
			b.Read(t.geo.metaAddr(v.st, v.idx[j]), buf)
			ms = append(ms, mpending{v.idx[j], buf})
		}
	}
	if len(b.Ops) == 0 {
		return nil
	}
	if err := t.m.Do(ctx, &b); err != nil {
		return fmt.Errorf("race: read KV blocks: %w", err)
	}
	if op.known == nil {
		op.known = make(map[Slot]blockInfo)
	}
	stale := false
	for _, p := range ps {
		blk, err := t.decode(p.w.Addr(), p.buf)
		if err != nil {
			t.stats.BadBlocks++
			stale = true
			continue
		}
		info := blockInfo{isKey: bytes.Equal(blk.Key, op.key), deadline: blk.Deadline}
		if info.isKey {
			info.value = blk.Value
		}
		op.known[p.w] = info
	}
	if len(ms) > 0 {
		op.meta = make(map[uint64][]byte, len(ms))
		for _, mp := range ms {
			op.meta[mp.i] = mp.buf
		}
	}
	if stale {
		return errStale
	}
	return nil
}

// blockKey is the part of a slot word that names its block: the word without its frozen and
// tentative bits (an insert commits by clearing the tentative bit of the same block).
func blockKey(w Slot) Slot { return w &^ (SlotFrozen | SlotTentative) }

// decode validates a block (unless the checksum defect is on).
func (t *Table) decode(a farmem.Addr, b []byte) (Block, error) {
	if !t.bug.noChecksum {
		return DecodeBlock(a, b)
	}
	le := binary.LittleEndian
	if len(b) < blockOverhead {
		return Block{}, ErrCorrupt
	}
	kl, vl := int(le.Uint16(b[0:])), int(le.Uint32(b[4:]))
	if kl+vl > len(b)-blockHeader {
		return Block{}, ErrCorrupt
	}
	return Block{Key: b[blockHeader : blockHeader+kl], Value: b[blockHeader+kl : blockHeader+kl+vl],
		Deadline: farmem.Time(le.Uint64(b[8:]))}, nil
}

// findKey returns the position in v of a committed slot holding op's key, or -1: it reads the
// blocks of committed fingerprint matches it does not know yet (and their metadata when meta
// is set). A key is in at most one committed slot at a time; if the reads, spread over time,
// saw it in two (deleted from one and inserted into another in between), either is a value it
// had during the read, and the first is taken.
func (t *Table) findKey(ctx context.Context, op *opState, v *view, meta bool) (int, error) {
	js := t.matching(op, v, Slot.Committed)
	if len(js) == 0 {
		return -1, nil
	}
	if err := t.learn(ctx, op, v, js, meta); err != nil {
		return -1, err
	}
	for _, j := range js {
		if op.known[blockKey(v.words[j])].isKey {
			return j, nil
		}
	}
	return -1, nil
}

// frozen reports whether any slot of the view is frozen.
func (v *view) frozen() bool {
	for _, w := range v.words {
		if w.Frozen() {
			return true
		}
	}
	return false
}
