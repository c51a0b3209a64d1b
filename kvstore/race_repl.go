package kvstore

import (
	"context"
	"fmt"

	"github.com/farmem/farmem/ds/ptrsync"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
)

// checkReplicatedSync refuses, for a replicated RACE index (its root on a virtual node), a
// synchronizer other than ptrsync.Optimistic: CIDER's, MCS's and the spinlock's lock state
// lives in words they reach through their own client, not through the table's replicated
// memory, so it would neither be replicated nor reachable at the table's addresses.
func checkReplicatedSync(root farmem.Addr, s ptrsync.Synchronizer) error {
	if race.IndexReplicasOf(root) <= 1 || s == nil {
		return nil
	}
	if _, ok := s.(*ptrsync.Optimistic); !ok {
		return fmt.Errorf("kvstore: a replicated RACE index needs the optimistic synchronizer (Options.Sync = kvstore.Optimistic), not %T: %w", s, farmem.ErrInvalid)
	}
	return nil
}

// Repopulator is an index whose memory is replicated on several memory nodes and that can
// copy to one of them, restarted empty (or back after missing writes), everything it should
// hold, from a majority of the others, while the store runs. A store's adoption of a
// restarted node calls it on every client's index once the node is usable again (formatted and
// adopted), so that the node rejoins the index's quorums with its copies current.
type Repopulator interface {
	// Repopulate copies to node what the index keeps there, from a majority of its other
	// replicas. It returns farmem.ErrInvalid if node holds no replica of the index.
	Repopulate(ctx context.Context, node farmem.NodeID) (race.RepopulateReport, error)
}

// Repopulate implements Repopulator for a replicated RACE index (race.Table.Repopulate); an
// unreplicated one returns an error wrapping farmem.ErrInvalid.
func (x *raceIndex) Repopulate(ctx context.Context, node farmem.NodeID) (race.RepopulateReport, error) {
	return x.t.Repopulate(ctx, node)
}
