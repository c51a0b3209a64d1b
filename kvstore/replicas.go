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
// when the store formats a fabric for a replicated RACE index and Format.SymmetricSize is 0:
// such an index keeps every word and KV block there (replmem.Stride times its logical size).
const replicatedIndexSymFraction = 4 // a quarter of each node left outside it

// withIndexReplicas settles the RACE index's replication factor against Options.Replicas (see
// above) and sizes the symmetric area for a replicated index (t nil: Check, no fabric to size it for).
func (o Options) withIndexReplicas(t *farmem.Topology) (Options, error) {
	if o, isSwarm, err := o.withSwarm(t); isSwarm {
		return o, err // SWARM-KV's replicated index and objects (swarm.go)
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
		smallest := uint64(farmem.MaxOffset + 1)
		for _, id := range t.MemoryNodes() {
			if n, ok := t.Node(id); ok {
				smallest = min(smallest, n.Size)
			}
		}
		o.Format.SymmetricSize = smallest - smallest/replicatedIndexSymFraction
	}
	return o, nil
}
