package transport

import (
	"fmt"
	"time"

	"github.com/farmem/farmem/farmem"
)

// Shape is the shape of a cluster: how many memory and compute nodes, how large, and how a
// compute node's region is cut into client slices and a shared area (see farmem.Topology).
// Every transport's options embed it (local.Options, cxl.Options, sim.Model), so the fields,
// their defaults and their checks are the same everywhere. The zero Shape is one memory node
// of 16 MiB and one compute node with 64 client slots; [Shape.EnsureDefaults] fills it in.
type Shape struct {
	// MemoryNodes is the number of memory nodes (default 1, at most farmem.MaxMemoryNode).
	MemoryNodes int
	// MemorySize is the size in bytes of each memory node, header included (default 16 MiB;
	// at least 64, at most farmem.MaxOffset+1). Transports use it rounded down to 8 bytes.
	MemorySize uint64
	// ComputeNodes is the number of compute nodes (default 1, at most farmem.MaxComputeID). A
	// transport whose compute nodes are processes that come and go (cxl) reads it as the
	// number of compute ids there is room for, and has a default of its own.
	ComputeNodes int
	// ClientsPerNode is the number of client slots of each compute node, Call handlers
	// included (default 64). ComputeNodes*ClientsPerNode must fit 16-bit client ids.
	ClientsPerNode int
	// MaxHandlers is how many Call handlers a compute node runs at once (default 8); that many
	// of its client slots are reserved for them, and at least one slot is left for a client.
	MaxHandlers int
	// SliceSize is each client's slice of its compute node's region (default 16 KiB, rounded
	// up to a multiple of 64 bytes).
	SliceSize uint64
	// SharedSize is the size of each compute node's shared area, after the slices (default
	// 1 MiB, rounded up to a multiple of 8 bytes).
	SharedSize uint64
}

// The defaults EnsureDefaults fills in.
const (
	DefaultMemorySize     = 16 << 20
	DefaultClientsPerNode = 64
	DefaultMaxHandlers    = 8
	DefaultSliceSize      = 16 << 10
	DefaultSharedSize     = 1 << 20
)

// EnsureDefaults sets every zero field to its default and rounds SliceSize up to 64 bytes and
// SharedSize up to 8, in place, and returns s. It is idempotent.
func (s *Shape) EnsureDefaults() *Shape {
	if s.MemoryNodes == 0 {
		s.MemoryNodes = 1
	}
	if s.MemorySize == 0 {
		s.MemorySize = DefaultMemorySize
	}
	if s.ComputeNodes == 0 {
		s.ComputeNodes = 1
	}
	if s.MaxHandlers == 0 {
		s.MaxHandlers = DefaultMaxHandlers
	}
	RegionDefaults(&s.ClientsPerNode, &s.SliceSize, &s.SharedSize)
	return s
}

// RegionDefaults applies EnsureDefaults' rules to the fields that lay out a compute node's
// region, for a configuration that keeps them outside a Shape (rdma's cluster file): a zero
// field gets its default, the slice is rounded up to 64 bytes and the shared area to 8.
func RegionDefaults(clientsPerNode *int, sliceSize, sharedSize *uint64) {
	if *clientsPerNode == 0 {
		*clientsPerNode = DefaultClientsPerNode
	}
	if *sliceSize == 0 {
		*sliceSize = DefaultSliceSize
	}
	*sliceSize = (*sliceSize + 63) &^ 63
	if *sharedSize == 0 {
		*sharedSize = DefaultSharedSize
	}
	*sharedSize = (*sharedSize + 7) &^ 7
}

// ComputeSize is the size of each compute node's region: header, slices and shared area.
func (s *Shape) ComputeSize() uint64 {
	return farmem.ComputeHeaderSize + uint64(s.ClientsPerNode)*s.SliceSize + s.SharedSize
}

// Check reports, wrapping farmem.ErrInvalid, a shape no transport can build: counts out of
// range, no slot left beside the handlers', client ids past 16 bits, a memory node under 64
// bytes, or a region past what an Addr can reach. Call it after EnsureDefaults.
func (s *Shape) Check() error {
	switch {
	case s.MemoryNodes < 0 || s.MemoryNodes > int(farmem.MaxMemoryNode):
		return fmt.Errorf("farmem: %d memory nodes: %w", s.MemoryNodes, farmem.ErrInvalid)
	case s.ComputeNodes < 0 || s.ComputeNodes > int(farmem.MaxComputeID):
		return fmt.Errorf("farmem: %d compute nodes: %w", s.ComputeNodes, farmem.ErrInvalid)
	case s.MaxHandlers < 1 || s.ClientsPerNode <= s.MaxHandlers:
		return fmt.Errorf("farmem: %d client slots cannot hold %d handlers and a client: %w", s.ClientsPerNode, s.MaxHandlers, farmem.ErrInvalid)
	case s.ComputeNodes*s.ClientsPerNode > 0xffff:
		return fmt.Errorf("farmem: %d compute nodes x %d slots exceed 16-bit client ids: %w", s.ComputeNodes, s.ClientsPerNode, farmem.ErrInvalid)
	case s.MemorySize < 64 || s.MemorySize > farmem.MaxOffset+1:
		return fmt.Errorf("farmem: memory node size %d: %w", s.MemorySize, farmem.ErrInvalid)
	case s.SliceSize > farmem.MaxOffset || s.ComputeSize() > farmem.MaxOffset+1:
		return fmt.Errorf("farmem: compute region of %d slices of %d bytes and %d shared: %w", s.ClientsPerNode, s.SliceSize, s.SharedSize, farmem.ErrInvalid)
	}
	return nil
}

// Topology returns the topology of the shape: memory nodes 1..MemoryNodes of MemorySize bytes
// and compute nodes 1..ComputeNodes of ComputeSize bytes (both rounded down to 8), with the
// given down timeout.
func (s *Shape) Topology(down time.Duration) farmem.Topology {
	t := farmem.Topology{ClientsPerNode: s.ClientsPerNode, SliceSize: s.SliceSize, DownTimeout: down}
	for i := range s.MemoryNodes {
		t.Nodes = append(t.Nodes, farmem.NodeInfo{ID: farmem.NodeID(i + 1), Role: farmem.RoleMemory, Size: s.MemorySize &^ 7})
	}
	for c := range s.ComputeNodes {
		t.Nodes = append(t.Nodes, farmem.NodeInfo{ID: farmem.ComputeID(c + 1).Node(), Role: farmem.RoleCompute, Size: s.ComputeSize() &^ 7})
	}
	return t
}
