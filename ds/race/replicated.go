package race

import (
	"context"
	"fmt"
	"time"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/replmem"
)

// rootIndexReplicasShift places Params.IndexReplicas in the root's groups word.
const rootIndexReplicasShift = 32

// VirtualNodeBase is the base of the node ids a replicated table's addresses carry: a table
// replicated on r memory nodes lives on the virtual node VirtualNodeBase+r (0xF3, 0xF5 or
// 0xF7), which must not be a node of the fabric. Its root address names that node, so Open
// knows from the root alone that the table is replicated, and on how many nodes.
const VirtualNodeBase farmem.NodeID = 0xF0

// allocator is what a table asks of its allocator: alloc.Allocator itself for an
// unreplicated table, symAlloc for a replicated one.
type allocator interface {
	Alloc(ctx context.Context, size, align uint64) (farmem.Addr, error)
	AllocOn(ctx context.Context, n farmem.NodeID, size, align uint64) (farmem.Addr, error)
	AllocSymmetric(ctx context.Context, size, align uint64) (alloc.SymOffset, error)
	Free(addr farmem.Addr, size uint64) error
	FreeSymmetric(o alloc.SymOffset, size uint64) error
	Retire(ctx context.Context, addr farmem.Addr, size uint64) error
	RetireAt(ctx context.Context, addr farmem.Addr, size uint64, at farmem.Time) error
	RetireSymmetric(ctx context.Context, o alloc.SymOffset, size uint64) error
	PinAt(ctx context.Context, now farmem.Time) error
	PinCoarse(ctx context.Context) (farmem.Time, error)
	Unpin() error
	UnpinSeen() error
	NoteClock(now farmem.Time)
}

// symAlloc allocates a replicated table's memory: a block of n bytes at logical offset o on
// the virtual node is replmem.Stride·n bytes at offset replmem.Stride·o of the allocator's
// symmetric area, on every replica.
type symAlloc struct {
	*alloc.Allocator
	virt farmem.NodeID
}

// physSize is the physical size of a logical block of size bytes: Stride·size rounded up to
// a multiple of Stride·Unit (256 bytes). Every multiple of 256 up to 2 KiB is a size class of
// the allocator and every class above is a multiple of 256, and blocks of a class are carved
// from chunk-aligned chunks, so such a block's offset is 256-aligned and its logical offset
// Unit-aligned (Alloc checks it).
func physSize(size uint64) uint64 {
	const g = replmem.Stride * Unit
	return (replmem.Stride*size + g - 1) &^ (g - 1)
}

func (s symAlloc) Alloc(ctx context.Context, size, _ uint64) (farmem.Addr, error) {
	ps := physSize(size)
	o, err := s.AllocSymmetric(ctx, ps, Unit)
	if err != nil {
		return 0, err
	}
	if uint64(o)%(replmem.Stride*Unit) != 0 {
		_ = s.FreeSymmetric(o, ps)
		return 0, fmt.Errorf("race: symmetric block at %#x is not %d-aligned: %w", uint64(o), replmem.Stride*Unit, ErrPointerRange)
	}
	return farmem.MakeAddr(s.virt, uint64(o)/replmem.Stride), nil
}

func (s symAlloc) AllocOn(ctx context.Context, _ farmem.NodeID, size, align uint64) (farmem.Addr, error) {
	return s.Alloc(ctx, size, align)
}

func (s symAlloc) Free(a farmem.Addr, size uint64) error {
	return s.FreeSymmetric(alloc.SymOffset(replmem.Stride*a.Offset()), physSize(size))
}

func (s symAlloc) Retire(ctx context.Context, a farmem.Addr, size uint64) error {
	return s.RetireSymmetric(ctx, alloc.SymOffset(replmem.Stride*a.Offset()), physSize(size))
}

// RetireAt is Retire: a replicated index's blocks retire with a fresh reading (the embedded
// allocator's RetireAt would take a logical address for a physical one).
func (s symAlloc) RetireAt(ctx context.Context, a farmem.Addr, size uint64, _ farmem.Time) error {
	return s.Retire(ctx, a, size)
}

// IndexReplicasOf returns how many replicas the table at root has (1: not replicated), from
// the root's address alone (see VirtualNodeBase).
func IndexReplicasOf(root farmem.Addr) int { return indexReplicas(root) }

// indexReplicas returns how many replicas the table at root has (1: not replicated).
func indexReplicas(root farmem.Addr) int {
	if n := root.Node(); n > VirtualNodeBase && n <= VirtualNodeBase+7 && (n-VirtualNodeBase)%2 == 1 {
		return int(n - VirtualNodeBase)
	}
	return 1
}

// IndexReplicaNodes returns the memory nodes a table replicated on r nodes lives on, for a
// client whose allocator is a: the allocator's metadata nodes (alloc.Allocator.MetaNodes) when
// the fabric was formatted with r of them, so that the index and the allocator's shared words
// are replicated on the same nodes and survive the same crashes; otherwise the r highest
// memory nodes of the fabric (so that, given more than r memory nodes, the lowest one, which
// then holds the allocator's unreplicated shared words, is not among them). The choice
// depends only on the nodes' headers, so every client makes the same one.
func IndexReplicaNodes(t *farmem.Topology, a *alloc.Allocator, r int) ([]farmem.NodeID, error) {
	if meta := a.MetaNodes(); r > 1 && len(meta) == r {
		return meta, nil
	}
	nodes := t.MemoryNodes()
	if len(nodes) < r {
		return nil, fmt.Errorf("race: %d index replicas on %d memory nodes: %w", r, len(nodes), farmem.ErrInvalid)
	}
	return nodes[len(nodes)-r:], nil
}

// replicate returns client m's replicated view and allocator for a table replicated on r
// memory nodes (IndexReplicaNodes), suspecting replicas in h (nil: its own).
func replicate(m farmem.Memory, a *alloc.Allocator, r int, lease time.Duration, skew time.Duration, h *replmem.Health) (*replmem.Memory, allocator, error) {
	nodes, err := IndexReplicaNodes(m.Topology(), a, r)
	if err != nil {
		return nil, nil, err
	}
	virt := VirtualNodeBase + farmem.NodeID(r)
	rm, err := replmem.New(m, replmem.Options{Nodes: nodes, Virtual: virt, Lease: lease, ClockSkew: skew, Health: h})
	if err != nil {
		return nil, nil, fmt.Errorf("race: replicated index: %w", err)
	}
	return rm, symAlloc{Allocator: a, virt: virt}, nil
}

// Replicated returns the table's replicated view of its client's memory (nil for an
// unreplicated table): its ProtocolStats count the replication protocol's work.
func (t *Table) Replicated() *replmem.Memory {
	rm, _ := t.m.(*replmem.Memory)
	return rm
}

// Round trips of a replicated table's operations (Params.IndexReplicas > 1), uncontended,
// with ptrsync.Optimistic and every replica up, asserted exactly in the package's tests
// beside the unreplicated ones. A plain read or write of the table's memory is one round trip
// to every replica at once, as unreplicated; each CAS of a word (a slot, a header, a lock) is
// ReplicatedCASRoundTrips, the reads that follow it in a batch riding its second round trip.
const (
	// ReplicatedCASRoundTrips: the lock round (a CAS of the word's control word and a read of
	// its state on every replica) and the write round (the new value and the release).
	ReplicatedCASRoundTrips = 2
	// ReplicatedSearchRoundTrips: the buckets and header; the KV block (as unreplicated).
	ReplicatedSearchRoundTrips = SearchRoundTrips
	// ReplicatedSearchAbsentRoundTrips: the buckets and header.
	ReplicatedSearchAbsentRoundTrips = SearchAbsentRoundTrips
	// ReplicatedInsertRoundTrips: the block's write with the lookup; the tentative CAS with
	// the re-read (in its write round); the commit CAS.
	ReplicatedInsertRoundTrips = 1 + ReplicatedCASRoundTrips + ReplicatedCASRoundTrips
	// ReplicatedUpdateRoundTrips: the block's write with the lookup; the key's block; the CAS.
	ReplicatedUpdateRoundTrips = 2 + ReplicatedCASRoundTrips
	// ReplicatedDeleteRoundTrips: the lookup; the key's block; the CAS.
	ReplicatedDeleteRoundTrips = 2 + ReplicatedCASRoundTrips
)
