package sherman

import (
	"bytes"
	"encoding/binary"
	"hash/crc64"

	"github.com/farmem/farmem/farmem"
)

var le = binary.LittleEndian

var crcTable = crc64.MakeTable(crc64.ECMA)

// Node layout offsets (see the package doc).
const (
	offLock    = 0
	offSum     = 8
	offMeta    = 16
	offSibling = 24
	offFences  = 32

	flagLow  = 1 // the low fence is a key (else minus infinity)
	flagHigh = 2 // the high fence is a key (else plus infinity)
)

// node is a decoded node. A leaf's vals are its values (one per key); an internal node's are
// its children, one more than its keys: child i covers [keys[i-1], keys[i]).
type node struct {
	addr      farmem.Addr
	level     int
	sibling   farmem.Addr
	low, high []byte // nil: minus / plus infinity
	keys      [][]byte
	vals      []uint64
	raw       []byte // the page as read or written (held by the cache)
}

func (n *node) leaf() bool { return n.level == 0 }

// covers reports whether k lies in [low, high).
func (n *node) covers(k []byte) bool {
	return (n.low == nil || bytes.Compare(k, n.low) >= 0) && !n.beyond(k)
}

// beyond reports whether k is at or past the high fence (the walk goes right).
func (n *node) beyond(k []byte) bool { return n.high != nil && bytes.Compare(k, n.high) >= 0 }

// search returns the index of the first key >= k and whether it equals k.
func (n *node) search(k []byte) (int, bool) {
	lo, hi := 0, len(n.keys)
	for lo < hi {
		m := (lo + hi) / 2
		if bytes.Compare(n.keys[m], k) < 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(n.keys) && bytes.Equal(n.keys[lo], k)
}

// child returns the child of an internal node that covers k.
func (n *node) child(k []byte) farmem.Addr {
	i, eq := n.search(k)
	if eq {
		i++
	}
	return farmem.Addr(n.vals[i])
}

// layout is a tree's node geometry.
type layout struct {
	codec    Codec
	size     int // node bytes
	leafCap  int // entries of a leaf
	innerCap int // separators of an internal node
}

// entryVersionBytes is the room Sherman's two 4-bit entry versions take in a packed leaf
// entry (Params.EntryVersions).
const entryVersionBytes = 2

func newLayout(c Codec, size int, versions bool) layout {
	h := offFences + 2*c.Width
	leafEntry := c.Width + 8
	if versions {
		leafEntry += entryVersionBytes
	}
	return layout{codec: c, size: size, leafCap: (size - h) / leafEntry, innerCap: (size - h - 8) / (c.Width + 8)}
}

func (l layout) entriesOff() int { return offFences + 2*l.codec.Width }

// valueOff is the offset of leaf entry i's value.
func (l layout) valueOff(i int) int { return l.entriesOff() + i*(l.codec.Width+8) + l.codec.Width }

// encode writes n into a node-sized buffer, lock word zero and checksum set.
func (l layout) encode(n *node) []byte {
	b := make([]byte, l.size)
	w := l.codec.Width
	flags := 0
	if n.low != nil {
		flags |= flagLow
		l.codec.put(b[offFences:], n.low)
	}
	if n.high != nil {
		flags |= flagHigh
		l.codec.put(b[offFences+w:], n.high)
	}
	le.PutUint64(b[offMeta:], uint64(n.level)|uint64(flags)<<8|uint64(len(n.keys))<<16)
	le.PutUint64(b[offSibling:], uint64(n.sibling))
	p := l.entriesOff()
	if !n.leaf() {
		le.PutUint64(b[p:], n.vals[0])
		p += 8
	}
	for i, k := range n.keys {
		l.codec.put(b[p:], k)
		v := n.vals[i]
		if !n.leaf() {
			v = n.vals[i+1]
		}
		le.PutUint64(b[p+w:], v)
		p += w + 8
	}
	seal(b)
	return b
}

// seal sets b's checksum word.
func seal(b []byte) { le.PutUint64(b[offSum:], crc64.Checksum(b[offMeta:], crcTable)) }

// sound reports whether a node read is whole (not torn by a concurrent write).
func sound(b []byte) bool { return le.Uint64(b[offSum:]) == crc64.Checksum(b[offMeta:], crcTable) }

// decode parses a node read whole (sound), or reports false if its header is malformed.
func (l layout) decode(a farmem.Addr, b []byte) (*node, bool) {
	w := l.codec.Width
	meta := le.Uint64(b[offMeta:])
	n := &node{addr: a, level: int(meta & 0xff), sibling: farmem.Addr(le.Uint64(b[offSibling:])), raw: b}
	flags, count := int(meta>>8&0xff), int(meta>>16&0xffff)
	capacity := l.leafCap
	if n.level > 0 {
		capacity = l.innerCap
	}
	if count > capacity {
		return nil, false
	}
	if flags&flagLow != 0 {
		n.low = l.codec.get(b[offFences:])
	}
	if flags&flagHigh != 0 {
		n.high = l.codec.get(b[offFences+w:])
	}
	p := l.entriesOff()
	n.keys = make([][]byte, count)
	if n.leaf() {
		n.vals = make([]uint64, count)
	} else {
		n.vals = make([]uint64, count+1)
		n.vals[0] = le.Uint64(b[p:])
		p += 8
	}
	for i := range count {
		n.keys[i] = l.codec.get(b[p:])
		if n.leaf() {
			n.vals[i] = le.Uint64(b[p+w:])
		} else {
			n.vals[i+1] = le.Uint64(b[p+w:])
		}
		p += w + 8
	}
	return n, true
}
