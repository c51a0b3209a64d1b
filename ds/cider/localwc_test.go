package cider_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/cider"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/sim"
)

// TestLocalWCCombines: eight clients of one compute node update one key of the pointer array at
// once, in virtual time. Without local write combining every update CASes the pointer on the
// memory node (and most fail and retry); with it, followers of a leader return Combined, and the
// memory node sees fewer CASes per update than without it. The final value is one of the
// values written.
func TestLocalWCCombines(t *testing.T) {
	const clients, rounds = 8, 20
	run := func(k syncKind) (memCAS uint64, combined uint64) {
		m := sim.ConnectX6()
		m.MemoryNodes, m.ComputeNodes, m.MemorySize = 1, 1, 4<<20
		e := newSimEnv(t, m, 1, 4, collide)
		e.do(func() {
			cs := make([]*client, clients)
			for i := range cs {
				cs[i] = e.open(t, i, arrayKV, k)
			}
			require.NoError(t, cs[0].kv.Insert(context.Background(), 1, val(1, 8)))
			before := e.s.Stats()
			errs := make([]error, clients)
			require.NoError(t, e.s.Parallel(clients, func(i int) {
				for r := range rounds {
					if errs[i] = cs[i].kv.Update(context.Background(), 1, val(uint64(i*rounds+r+1), 8)); errs[i] != nil {
						return
					}
				}
			}))
			for _, err := range errs {
				require.NoError(t, err)
			}
			st := e.s.Stats().Sub(before)
			memCAS = st.Verbs[farmem.TargetMemory][farmem.OpCAS]
			for _, c := range cs {
				if l, ok := c.sync.(*cider.LocalWC); ok {
					combined += l.LocalStats().Combined
				}
			}
			got, err := cs[0].kv.Search(context.Background(), 1)
			require.NoError(t, err)
			v := unval(got)
			require.True(t, v >= 1 && v <= clients*rounds, "final value %d was never written", v)
		})
		return memCAS, combined
	}
	plainCAS, plainComb := run(optimistic)
	lwcCAS, lwcComb := run(optimisticLWC)
	t.Logf("memory-node CASes: %d without local WC, %d with it (%d updates combined)", plainCAS, lwcCAS, lwcComb)
	require.Zero(t, plainComb)
	require.Positive(t, lwcComb, "no update was combined locally")
	require.Less(t, lwcCAS, plainCAS, "local WC did not spare memory-node CASes")
}
