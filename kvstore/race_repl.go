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

// Repopulate implements Repopulator for a replicated RACE index (race.Table.Repopulate: every
// word the node should hold copied from a majority of the other replicas); an unreplicated one
// returns an error wrapping farmem.ErrInvalid.
func (x *raceIndex) Repopulate(ctx context.Context, node farmem.NodeID) error {
	_, err := x.t.Repopulate(ctx, node)
	return err
}
