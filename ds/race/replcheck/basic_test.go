package replcheck_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/race"
)

// TestReplicatedBasic: a table replicated on three of four nodes holds its keys through splits
// and doublings, and keeps serving every operation with its lowest node crashed.
func TestReplicatedBasic(t *testing.T) {
	t.Parallel() // its own fabric; a reachable node of the local transport never times out
	e := replEnv(t, 4, 3, race.Params{Groups: 2})
	c := e.open(t, 0, race.Options{})
	ctx := context.Background()
	require.Equal(t, race.VirtualNodeBase+3, e.root.Node())
	const n = 100
	for i := range uint64(n) {
		require.NoError(t, c.tab.Insert(ctx, key(i), val(i, 24)), "insert %d", i)
	}
	info, err := c.tab.Info(ctx)
	require.NoError(t, err)
	require.NotZero(t, info.Splits)
	require.Equal(t, 3, info.Params.IndexReplicas)
	check := func(from uint64) {
		for i := range uint64(n) {
			v, err := c.tab.Search(ctx, key(i))
			if i < from {
				require.ErrorIs(t, err, race.ErrNotFound, "key %d", i)
				continue
			}
			require.NoError(t, err, "key %d", i)
			require.Equal(t, i, unval(v))
		}
	}
	check(0)
	require.NoError(t, e.f.Crash(e.f.Topology().MemoryNodes()[1])) // the first replica
	check(0)
	for i := range uint64(n) {
		require.NoError(t, c.tab.Update(ctx, key(i), val(i, 40)), "update %d", i)
	}
	for i := range uint64(50) {
		require.NoError(t, c.tab.Delete(ctx, key(i)), "delete %d", i)
	}
	for i := uint64(n); i < n+100; i++ {
		require.NoError(t, c.tab.Insert(ctx, key(i), val(i, 24)), "insert %d", i)
	}
	check(50)
	c2 := e.open(t, 1, race.Options{})
	v, err := c2.tab.Search(ctx, key(n+10))
	require.NoError(t, err)
	require.Equal(t, uint64(n+10), unval(v))
	t.Logf("%+v %+v", c.tab.Stats(), c.tab.Replicated().ProtocolStats())
}
