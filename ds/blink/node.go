package blink

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sort"
)

// Node layout in a line's body (little-endian):
//
//	0      valid byte (1)
//	1      level (0: leaf)
//	2..3   entry count n
//	4..11  right sibling (a GCL address; 0: none)
//	12..13 high key length (0xFFFF: +infinity), then the high key
//	leaf entries:     klen u16, vlen u16, key, value          (4+k+v bytes each)
//	internal entries: child0 u64, then n times klen u16, key, child u64 (10+k bytes each)
const (
	hdrSize = 14
	infLen  = 0xFFFF
)

// node is a decoded tree node. An internal node has len(kids) == len(keys)+1: kids[i] covers
// [keys[i-1], keys[i]).
type node struct {
	level uint8
	right uint64
	high  []byte // nil with inf
	inf   bool
	keys  [][]byte
	vals  [][]byte // leaf
	kids  []uint64 // internal
	// voff is, for a leaf decoded from a line, each value's offset in the line (nil for a
	// node built in memory): an update of a value by one of the same length writes only
	// those bytes, so the line's dirty range (and its write-back) is the value, not the node.
	// Stale once the node changes in memory (an insert, delete or split re-encodes it whole).
	voff []int
}

// covers reports whether key is below the node's high key (else a reader moves right).
func (n *node) covers(key []byte) bool { return n.inf || bytes.Compare(key, n.high) < 0 }

// find returns the index of the first key >= key and whether it equals key.
func (n *node) find(key []byte) (int, bool) {
	i := sort.Search(len(n.keys), func(i int) bool { return bytes.Compare(n.keys[i], key) >= 0 })
	return i, i < len(n.keys) && bytes.Equal(n.keys[i], key)
}

// child returns the child of an internal node that covers key.
func (n *node) child(key []byte) uint64 {
	i := sort.Search(len(n.keys), func(i int) bool { return bytes.Compare(n.keys[i], key) > 0 })
	return n.kids[i]
}

// size returns the node's encoded size.
func (n *node) size() int {
	s := hdrSize + len(n.high)
	if n.level == 0 {
		for i := range n.keys {
			s += 4 + len(n.keys[i]) + len(n.vals[i])
		}
		return s
	}
	s += 8
	for _, k := range n.keys {
		s += 10 + len(k)
	}
	return s
}

// encode writes the node into b (at least n.size() bytes) and returns the bytes used.
func (n *node) encode(b []byte) int {
	b[0], b[1] = 1, n.level
	binary.LittleEndian.PutUint16(b[2:], uint16(len(n.keys)))
	binary.LittleEndian.PutUint64(b[4:], n.right)
	p := hdrSize
	if n.inf {
		binary.LittleEndian.PutUint16(b[12:], infLen)
	} else {
		binary.LittleEndian.PutUint16(b[12:], uint16(len(n.high)))
		p += copy(b[p:], n.high)
	}
	if n.level == 0 {
		for i, k := range n.keys {
			binary.LittleEndian.PutUint16(b[p:], uint16(len(k)))
			binary.LittleEndian.PutUint16(b[p+2:], uint16(len(n.vals[i])))
			p += 4
			p += copy(b[p:], k)
			p += copy(b[p:], n.vals[i])
		}
		return p
	}
	binary.LittleEndian.PutUint64(b[p:], n.kids[0])
	p += 8
	for i, k := range n.keys {
		binary.LittleEndian.PutUint16(b[p:], uint16(len(k)))
		p += 2
		p += copy(b[p:], k)
		binary.LittleEndian.PutUint64(b[p:], n.kids[i+1])
		p += 8
	}
	return p
}

// decode parses a node from b; keys and values are copies. A malformed body fails with
// ErrCorrupt.
func decode(b []byte) (*node, error) {
	bad := func(what string) (*node, error) { return nil, fmt.Errorf("blink: node %s: %w", what, ErrCorrupt) }
	if len(b) < hdrSize || b[0] != 1 {
		return bad("header")
	}
	n := &node{level: b[1], right: binary.LittleEndian.Uint64(b[4:])}
	cnt := int(binary.LittleEndian.Uint16(b[2:]))
	p := hdrSize
	if hl := int(binary.LittleEndian.Uint16(b[12:])); hl == infLen {
		n.inf = true
	} else {
		if p+hl > len(b) {
			return bad("high key")
		}
		n.high = bytes.Clone(b[p : p+hl])
		p += hl
	}
	n.keys = make([][]byte, cnt)
	if n.level == 0 {
		n.vals = make([][]byte, cnt)
		n.voff = make([]int, cnt)
		for i := range cnt {
			if p+4 > len(b) {
				return bad("entry")
			}
			kl, vl := int(binary.LittleEndian.Uint16(b[p:])), int(binary.LittleEndian.Uint16(b[p+2:]))
			p += 4
			if p+kl+vl > len(b) {
				return bad("entry")
			}
			n.keys[i] = bytes.Clone(b[p : p+kl])
			n.vals[i] = append([]byte{}, b[p+kl:p+kl+vl]...)
			n.voff[i] = p + kl
			p += kl + vl
		}
		return n, nil
	}
	if p+8 > len(b) {
		return bad("child")
	}
	n.kids = make([]uint64, cnt+1)
	n.kids[0] = binary.LittleEndian.Uint64(b[p:])
	p += 8
	for i := range cnt {
		if p+2 > len(b) {
			return bad("entry")
		}
		kl := int(binary.LittleEndian.Uint16(b[p:]))
		p += 2
		if p+kl+8 > len(b) {
			return bad("entry")
		}
		n.keys[i] = bytes.Clone(b[p : p+kl])
		n.kids[i+1] = binary.LittleEndian.Uint64(b[p+kl:])
		p += kl + 8
	}
	return n, nil
}

// split cuts an overfull node in two by bytes: n keeps the left half and gets the separator
// as its high key; the right half (returned, with n's old high key and right sibling) gets
// sibling pointer 0 for the caller to set. sep is the separator to post in the parent: the
// right half's first key (leaf), or the key pushed up (internal).
func (n *node) split() (r *node, sep []byte) {
	r = &node{level: n.level, high: n.high, inf: n.inf, right: n.right}
	total := n.size()
	acc, cut := hdrSize, 1
	for i := range n.keys {
		if n.level == 0 {
			acc += 4 + len(n.keys[i]) + len(n.vals[i])
		} else {
			acc += 10 + len(n.keys[i])
		}
		if acc >= total/2 {
			cut = max(1, min(i+1, len(n.keys)-1))
			break
		}
	}
	if n.level == 0 {
		sep = n.keys[cut]
		r.keys = append([][]byte{}, n.keys[cut:]...)
		r.vals = append([][]byte{}, n.vals[cut:]...)
		n.keys, n.vals = n.keys[:cut:cut], n.vals[:cut:cut]
	} else {
		sep = n.keys[cut]
		r.keys = append([][]byte{}, n.keys[cut+1:]...)
		r.kids = append([]uint64{}, n.kids[cut+1:]...)
		n.keys, n.kids = n.keys[:cut:cut], n.kids[:cut+1:cut+1]
	}
	n.high, n.inf = sep, false
	return r, sep
}
