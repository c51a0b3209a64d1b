package farmem

import (
	"fmt"
	"strconv"
	"strings"
)

// NodeID names a node of the cluster: a memory node or a compute node. Memory and compute nodes
// share one id space. Memory nodes have ids below [ComputeNodeBit]; a compute node's id is
// [ComputeNodeBit] | its [ComputeID], so the role of any address's node is known without a lookup.
type NodeID uint16

// ComputeNodeBit is set in the NodeID of every compute node and clear in every memory node's.
const ComputeNodeBit NodeID = 0x8000

// MaxMemoryNode is the largest NodeID a memory node may have.
const MaxMemoryNode NodeID = ComputeNodeBit - 1

// IsCompute reports whether id names a compute node.
func (id NodeID) IsCompute() bool { return id&ComputeNodeBit != 0 }

// ComputeID returns the dense compute id of a compute node's NodeID, or 0 for a memory node.
func (id NodeID) ComputeID() ComputeID {
	if !id.IsCompute() {
		return 0
	}
	return ComputeID(id &^ ComputeNodeBit)
}

// String formats the id as "n<decimal>" for memory nodes and "c<compute id>" for compute nodes.
func (id NodeID) String() string {
	if id.IsCompute() {
		return "c" + strconv.FormatUint(uint64(id.ComputeID()), 10)
	}
	return "n" + strconv.FormatUint(uint64(id), 10)
}

// ComputeID is the dense, nonzero id of a compute node (a process). Structures that keep one bit
// or one slot per compute node (SELCC's latch word, FlexKV's sharer bitmap) index by it.
type ComputeID uint16

// Node returns the NodeID of compute node c. It is the zero NodeID for c == 0, which names no
// compute node.
func (c ComputeID) Node() NodeID {
	if c == 0 {
		return 0
	}
	return ComputeNodeBit | NodeID(c)
}

// MaxComputeID is the largest compute id the NodeID encoding can carry.
const MaxComputeID ComputeID = ComputeID(^ComputeNodeBit)

// Addr is a far address: the node id in the top 16 bits and a byte offset in the low 48. Offset 0
// of every node is that node's header, so the zero Addr is nil. Far memory never holds Go
// pointers: it holds Addrs.
type Addr uint64

// OffsetBits is the number of low bits of an Addr that hold the byte offset.
const OffsetBits = 48

// MaxOffset is the largest offset an Addr can carry.
const MaxOffset = 1<<OffsetBits - 1

// MakeAddr builds the address of byte off of node n. Offsets wider than 48 bits ([MaxOffset])
// are truncated: check off first where it comes from outside.
func MakeAddr(n NodeID, off uint64) Addr {
	return Addr(uint64(n)<<OffsetBits | off&MaxOffset)
}

// Node returns the node the address is on.
func (a Addr) Node() NodeID { return NodeID(a >> OffsetBits) }

// Offset returns the byte offset within the node.
func (a Addr) Offset() uint64 { return uint64(a) & MaxOffset }

// Add returns the address d bytes further on the same node. The offset wraps within 48 bits;
// range checks belong to the verbs.
func (a Addr) Add(d uint64) Addr { return MakeAddr(a.Node(), a.Offset()+d) }

// String formats the address as "n3+0x1f40" (memory node 3), "c2+0x40" (compute node 2), or
// "nil". [ParseAddr] reads every form String writes.
func (a Addr) String() string {
	if a == 0 {
		return "nil"
	}
	return a.Node().String() + "+0x" + strconv.FormatUint(a.Offset(), 16)
}

// ParseAddr parses the forms String writes: "nil", "n<id>+<offset>" and "c<compute id>+<offset>",
// where the offset is decimal or 0x-prefixed hexadecimal. It never panics; malformed input gives
// an error wrapping [ErrInvalid].
func ParseAddr(s string) (Addr, error) {
	if s == "nil" {
		return 0, nil
	}
	bad := func(why string) (Addr, error) {
		return 0, fmt.Errorf("farmem: parse address %q: %s: %w", s, why, ErrInvalid)
	}
	nodePart, offPart, ok := strings.Cut(s, "+")
	if !ok {
		return bad("want <node>+<offset>")
	}
	if len(nodePart) < 2 {
		return bad("missing node id")
	}
	digits := nodePart[1:]
	if digits[0] == '+' || digits[0] == '-' {
		return bad("bad node id")
	}
	id, err := strconv.ParseUint(digits, 10, 16)
	if err != nil {
		return bad("bad node id")
	}
	var node NodeID
	switch nodePart[0] {
	case 'n':
		if NodeID(id) > MaxMemoryNode {
			return bad("memory node id out of range")
		}
		node = NodeID(id)
	case 'c':
		// c0 names no compute node, but String writes it for an Addr with node 0x8000, and
		// every Addr must round-trip.
		if ComputeID(id) > MaxComputeID {
			return bad("compute id out of range")
		}
		node = ComputeNodeBit | NodeID(id)
	default:
		return bad("node must start with n or c")
	}
	if offPart == "" || offPart[0] == '+' || offPart[0] == '-' {
		return bad("bad offset")
	}
	var off uint64
	if rest, hex := strings.CutPrefix(offPart, "0x"); hex {
		if rest == "" || rest[0] == '+' || rest[0] == '-' {
			return bad("bad offset")
		}
		off, err = strconv.ParseUint(rest, 16, 64)
	} else {
		off, err = strconv.ParseUint(offPart, 10, 64)
	}
	if err != nil {
		return bad("bad offset")
	}
	if off > MaxOffset {
		return bad("offset exceeds 48 bits")
	}
	if node == 0 && off == 0 {
		return 0, nil
	}
	return MakeAddr(node, off), nil
}
