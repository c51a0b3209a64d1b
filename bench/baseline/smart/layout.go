package smart

import (
	"encoding/binary"
	"slices"

	"github.com/farmem/farmem/farmem"
)

var le = binary.LittleEndian

// Child words (8 bytes, CAS only once published): bits 0-43 the child's offset / 8, 44-51 its
// memory node, 52-55 its kind (0 empty, 1 leaf, 2+i a node of class classes[i]: a reader
// fetches that class's slots, and the whole node only if that class's last slot is filled,
// which a word not yet brought up to date by the node's growth can cause), 56-63 its partial
// byte. The kind plays the part of the node type in SMART's parent entry.
const (
	kindEmpty = 0
	kindLeaf  = 1
)

// classes are the node sizes a reader fetches and the cache charges: SMART's node types
// (its "homogeneous adaptive internal node", TREE_ENABLE_FINE_GRAIN_NODE, on in SMART's
// build), every power of two from 4 to 256 children, not ART's 4, 16, 48 and 256.
var classes = [...]int{4, 8, 16, 32, 64, 128, 256}

// kindWhole is the kind readNode takes for a whole node (the largest class).
const kindWhole = len(classes) + 1

func classOf(n int) int {
	for i, c := range classes {
		if n <= c {
			return i
		}
	}
	return len(classes) - 1
}

// kindOf is the child-word kind of a node holding n children.
func kindOf(n int) int { return classOf(n) + 2 }

// classSlots is the slots a reader fetches for a node word of kind k.
func classSlots(k int) int { return classes[min(max(k-2, 0), len(classes)-1)] }

func word(a farmem.Addr, kind int, partial byte) uint64 {
	return uint64(a.Offset())/8 | uint64(a.Node())<<44 | uint64(kind)<<52 | uint64(partial)<<56
}

func wordAddr(w uint64) farmem.Addr {
	return farmem.MakeAddr(farmem.NodeID(w>>44&0xff), (w&(1<<44-1))*8)
}

func withKind(w uint64, k int) uint64 { return w&^(0xf<<52) | uint64(k)<<52 }

func wordKind(w uint64) int     { return int(w >> 52 & 0xf) }
func wordPartial(w uint64) byte { return byte(w >> 56) }
func withPartial(w uint64, p byte) uint64 {
	return w&(1<<56-1) | uint64(p)<<56
}

// Node layout: 0 depth d (the byte it routes by), 8 prefix (the key's first d bytes, the rest
// zero), 16 reserved, 24 the 256 child word slots, filled in order. Allocated whole (2,072
// bytes), read as 24 + 8n bytes for the class its child word names.
const (
	nodeHeader = 24
	nodeSlots  = 256
	nodeBytes  = nodeHeader + 8*nodeSlots
)

// Leaf layout (32 bytes): 0 the lock word (CAS only: 0 free, else the holder's client id +
// 1), 8 the key, 16 the value, 24 dead (nonzero once deleted; never revived).
const (
	leafBytes = 32
	leafKey   = 8
)

func keyByte(k uint64, d int) byte { return byte(k >> (56 - 8*d)) }

func prefixMask(d int) uint64 {
	if d == 0 {
		return 0
	}
	return ^uint64(0) << (64 - 8*d)
}

// node is a decoded node read.
type node struct {
	addr   farmem.Addr
	depth  int
	prefix uint64
	slots  []uint64 // as read: a prefix of the 256 slots
	// from is the parent's slot that named the node when it was reached (0 for the root, or
	// unknown), and fromWord the word it held then: an insert that grows the node past that
	// word's class brings the word up to date with a CAS.
	from     farmem.Addr
	fromWord uint64
}

// find returns the child word with partial p, its slot index, and the first empty slot (-1 if
// none was read).
func (n *node) find(p byte) (w uint64, at, empty int) {
	empty = -1
	for i, s := range n.slots {
		if s == 0 {
			if empty < 0 {
				empty = i
			}
			continue
		}
		if wordPartial(s) == p {
			return s, i, empty
		}
	}
	return 0, -1, empty
}

// with returns a copy of n with slot i set to w (copies shared through the cache are never
// changed).
func (n *node) with(i int, w uint64) *node {
	c := *n
	c.slots = slices.Clone(n.slots)
	c.slots[i] = w
	return &c
}

func (n *node) count() int {
	c := 0
	for _, s := range n.slots {
		if s != 0 {
			c++
		}
	}
	return c
}

func (n *node) slotAddr(i int) farmem.Addr { return n.addr + farmem.Addr(nodeHeader+8*i) }

// full reports whether the read may have missed slots (its last slot is filled).
func (n *node) partial() bool { return len(n.slots) < nodeSlots && n.slots[len(n.slots)-1] != 0 }

func encodeNode(depth int, prefix uint64, children []uint64) []byte {
	b := make([]byte, nodeBytes)
	le.PutUint64(b[0:], uint64(depth))
	le.PutUint64(b[8:], prefix)
	for i, w := range children {
		le.PutUint64(b[nodeHeader+8*i:], w)
	}
	return b
}

func decodeNode(a farmem.Addr, b []byte) *node {
	n := &node{addr: a, depth: int(le.Uint64(b[0:]) & 0xff), prefix: le.Uint64(b[8:])}
	n.slots = make([]uint64, (len(b)-nodeHeader)/8)
	for i := range n.slots {
		n.slots[i] = le.Uint64(b[nodeHeader+8*i:])
	}
	return n
}

func encodeLeaf(k, v uint64) []byte {
	b := make([]byte, leafBytes)
	le.PutUint64(b[8:], k)
	le.PutUint64(b[16:], v)
	return b
}
