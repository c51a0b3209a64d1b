package kvstore

import (
	"context"
	"fmt"
	"slices"

	"github.com/farmem/farmem/farmem"
)

// swarmAdoptable refuses, for a Swarm store, the adoption of a memory node that holds
// replicas of its index and objects (one of its metadata nodes), before anything is done to
// it: rebuilding an object's replica on a node that restarted empty is not built, and the
// node must not count in the objects' quorums until it is (a zeroed replica answering reads
// would let a read miss a write that a majority holds). A node left fenced (farmem.ErrNodeLost)
// answers nothing, so the store keeps running on the others, tolerating one crash fewer.
// Other nodes (holding none of the store's replicas) are adopted as usual.
func (s *Store) swarmAdoptable(node farmem.NodeID) error {
	if _, ok := swarmKind(s.opts.Index); !ok || !slices.Contains(s.meta, node) {
		return nil
	}
	return fmt.Errorf("kvstore: adopt %v: it holds replicas of the swarm index and its objects, and rebuilding objects on a restarted node is not built: the node stays fenced, the store runs on the others: %w", node, farmem.ErrNotSupported)
}

// Repopulate implements Repopulator: a node outside the objects' replicas holds nothing of
// the store (Store.Adopt formats it again), so there is nothing to copy; a replica's node is
// refused by Adopt before it gets here (swarmAdoptable), and here too.
func (x *swarmIndex) Repopulate(ctx context.Context, node farmem.NodeID) error {
	if !slices.Contains(x.nodes, node) {
		return nil
	}
	return fmt.Errorf("kvstore: swarm: repopulate %v: rebuilding the objects' replicas is not built: %w", node, farmem.ErrNotSupported)
}
