package farmem

import (
	"fmt"
	"slices"
	"time"
)

// Role is what a node is for.
type Role uint8

const (
	// RoleMemory is a memory node: it owns memory and serves verbs, and runs no application code.
	RoleMemory Role = iota + 1
	// RoleCompute is a compute node: a process that runs clients and Call handlers and owns a
	// region peers reach with ordinary verbs.
	RoleCompute
)

func (r Role) String() string {
	switch r {
	case RoleMemory:
		return "memory"
	case RoleCompute:
		return "compute"
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

// ClientID is the dense, nonzero 16-bit id of a client, unique in the cluster. It encodes the
// client's compute node and its slot there: id = (computeID-1)*ClientsPerNode + slot + 1, so it
// maps to the client's slice of its compute node's region with no round trip.
type ClientID uint16

// NodeInfo describes one node of the cluster.
type NodeInfo struct {
	ID   NodeID
	Role Role
	// Size is the size of the node's region in bytes, header included.
	Size uint64
}

// ComputeHeaderSize is the size of the header at the start of every compute node's region.
// Client slices start right after it.
const ComputeHeaderSize = 4096

// Topology is what every client knows about the cluster without a round trip: its nodes and the
// layout of compute node regions. A compute node's region is
//
//	[0, ComputeHeaderSize)                          header
//	[ComputeHeaderSize, SharedBase())               ClientsPerNode slices of SliceSize bytes
//	[SharedBase(), Size)                            the node's shared area
//
// The slice of client (c, slot) starts at ComputeHeaderSize + slot*SliceSize.
type Topology struct {
	// Nodes lists every node known to this fabric, sorted by ID.
	Nodes []NodeInfo
	// ClientsPerNode is the number of client slots of every compute node (clients and Call
	// handlers together).
	ClientsPerNode int
	// SliceSize is the size in bytes of one client's slice of its compute node's region (a
	// multiple of 64).
	SliceSize uint64
	// DownTimeout is the fabric time after which an unanswered op fails with ErrNodeDown.
	DownTimeout time.Duration
}

// Node returns the node with the given id.
func (t *Topology) Node(id NodeID) (NodeInfo, bool) {
	i, ok := slices.BinarySearchFunc(t.Nodes, id, func(n NodeInfo, id NodeID) int { return int(n.ID) - int(id) })
	if !ok {
		return NodeInfo{}, false
	}
	return t.Nodes[i], true
}

// MemoryNodes returns the ids of the memory nodes, ascending.
func (t *Topology) MemoryNodes() []NodeID { return t.byRole(RoleMemory) }

// ComputeNodes returns the ids of the compute nodes, ascending.
func (t *Topology) ComputeNodes() []NodeID { return t.byRole(RoleCompute) }

func (t *Topology) byRole(r Role) []NodeID {
	var ids []NodeID
	for _, n := range t.Nodes {
		if n.Role == r {
			ids = append(ids, n.ID)
		}
	}
	return ids
}

// SharedBase is the offset of a compute node's shared area: after its header and client slices.
func (t *Topology) SharedBase() uint64 {
	return ComputeHeaderSize + uint64(t.ClientsPerNode)*t.SliceSize
}

// ClientSlice returns the address of a client's slice of its compute node's region. It is pure
// arithmetic: no round trip, and no check that the client is alive.
func (t *Topology) ClientSlice(id ClientID) (Addr, error) {
	if id == 0 || t.ClientsPerNode <= 0 {
		return 0, fmt.Errorf("farmem: client id %d: %w", id, ErrInvalid)
	}
	k := uint64(t.ClientsPerNode)
	c := (uint64(id)-1)/k + 1
	if ComputeID(c) > MaxComputeID {
		return 0, fmt.Errorf("farmem: client id %d: %w", id, ErrInvalid)
	}
	slot := (uint64(id) - 1) % k
	return MakeAddr(ComputeID(c).Node(), ComputeHeaderSize+slot*t.SliceSize), nil
}

// ClientInfo describes one client.
type ClientInfo struct {
	ID ClientID
	// Node is the client's compute node.
	Node NodeID
	// Slot is the client's slot on its compute node.
	Slot int
	// Slice is the client's own slice of its compute node's region, SliceSize bytes long.
	Slice     Addr
	SliceSize uint64
}
