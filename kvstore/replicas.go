package kvstore

import (
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// One replication factor for the store (Options.Replicas) and its RACE index (Race.Replicas).
//
// A store created with Options.Replicas = r > 1 keeps its metadata on r memory nodes
// (alloc.Allocator.MetaNodes, the home node first); a RACE index whose Replicas (or
// Params.IndexReplicas) is left 0 is then replicated on the same r nodes (race places a
// replicated table on the allocator's metadata nodes when there are as many:
// race.IndexReplicaNodes), so Options.Replicas alone makes every word of the store survive any
// (r-1)/2 of those nodes crashed. An index that asks for another factor is refused, except 1:
// an unreplicated index under replicated metadata is a choice (its keys on a node that
// restarts are purged by Adopt and reported lost, as with r = 1). A replicated index under
// unreplicated metadata (Options.Replicas 0 or 1, Race.Replicas r) keeps its r replicas on the
// highest r memory nodes, the home node a single point of failure for the store's root and
// the allocator.

// replicatedIndexSymFraction is the share of the smallest memory node the symmetric area gets
// when the store formats a fabric for a replicated RACE index, or for FlexKV's replicated KV
// blocks, and Format.SymmetricSize is 0: such an index keeps every word and KV block there
// (replmem.Stride times its logical size), FlexKV every KV block.
const replicatedIndexSymFraction = 4 // a quarter of each node left outside it

// withIndexReplicas settles the RACE index's replication factor against Options.Replicas (see
// above) and sizes the symmetric area for a replicated index (t nil: Check, no fabric to size it for).
func (o Options) withIndexReplicas(t *farmem.Topology) (Options, error) {
	if o, isSwarm, err := o.withSwarm(t); isSwarm {
		return o, err // SWARM-KV's replicated index and objects (swarm.go)
	}
	if k, ok := o.Index.(*FlexKV); ok {
		// FlexKV and its Aceso-like baseline copy every KV block on Replicas memory nodes
		// (race.Params.Replicas), which race allocates at the same offset on each: from the
		// symmetric area, which then holds every pair. Left at the allocator's default (an
		// eighth of a node) it would fill while the heap, which holds only the index, stood
		// nearly empty.
		if k.params().Replicas > 1 && o.Format.SymmetricSize == 0 && t != nil && len(t.MemoryNodes()) > 1 {
			o.Format.SymmetricSize = replicatedSymSize(t)
		}
		return o, nil
	}
	r, ok := o.Index.(Race)
	if !ok {
		return o, nil
	}
	ir := r.Params.IndexReplicas
	if ir == 0 {
		ir = r.Replicas
	}
	switch {
	case o.Replicas > 1 && ir == 0:
		r.Replicas, ir = o.Replicas, o.Replicas
		o.Index = r
	case o.Replicas > 1 && ir > 1 && ir != o.Replicas:
		return o, fmt.Errorf("kvstore: the RACE index asks for %d replicas, the store for %d (Options.Replicas): leave Race.Replicas 0 to replicate the index on the store's metadata nodes, or set it to 1 for an unreplicated index: %w", ir, o.Replicas, farmem.ErrInvalid)
	}
	if ir > 1 && o.Format.SymmetricSize == 0 && t != nil {
		o.Format.SymmetricSize = replicatedSymSize(t)
	}
	return o, nil
}

// replicatedSymSize is the symmetric area a store gives a fabric it formats for replicated
// data (KV blocks, and a replicated index's words): all of the smallest memory node but the
// 1/replicatedIndexSymFraction left to the heap.
func replicatedSymSize(t *farmem.Topology) uint64 {
	smallest := uint64(farmem.MaxOffset + 1)
	for _, id := range t.MemoryNodes() {
		if n, ok := t.Node(id); ok {
			smallest = min(smallest, n.Size)
		}
	}
	return smallest - smallest/replicatedIndexSymFraction
}
