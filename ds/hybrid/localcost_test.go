package hybrid_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/hybrid"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/internal/dstest"
	"github.com/farmem/farmem/sim"
)

// warmGetTime is the virtual time of one warm Get (the cache filled by a first Get of the same
// key) in sim, one client, with the model's LocalAccess set to local and a cache of budget.
func warmGetTime(t *testing.T, local time.Duration, budget int64) time.Duration {
	t.Helper()
	m := sim.ConnectX6()
	m.MemoryNodes, m.ComputeNodes, m.MemorySize = 1, 1, 16<<20
	m.LocalAccess = local
	s, err := sim.New(m, 1)
	require.NoError(t, err)
	defer s.Close()
	var d time.Duration
	s.Run(func() {
		ctx := context.Background()
		c, err := s.Open(ctx, farmem.ComputeID(1).Node())
		require.NoError(t, err)
		require.NoError(t, alloc.FormatAll(ctx, c, alloc.FormatOptions{}))
		a, err := alloc.New(ctx, c, dstest.AllocOptions)
		require.NoError(t, err)
		root, err := hybrid.Create(ctx, c, a, hybrid.Params{LeafSlots: 8})
		require.NoError(t, err)
		tr, err := hybrid.Open(ctx, c, a, root, hybrid.Options{Cache: hybrid.NewCache(budget)})
		require.NoError(t, err)
		for k := uint64(1); k <= 200; k++ {
			require.NoError(t, tr.Insert(ctx, hybrid.Key(k<<40), k))
		}
		_, err = tr.Get(ctx, hybrid.Key(77<<40))
		require.NoError(t, err)
		start := s.Now()
		v, err := tr.Get(ctx, hybrid.Key(77<<40))
		d = s.Now().Sub(start)
		require.NoError(t, err)
		require.Equal(t, uint64(77), v)
	})
	return d
}

// A warm Get visits the cache once, and pays the model's price of a local access for it (the
// rule of localcost.go, shared with the Sherman-like and SMART-like baselines): raising the
// model's LocalAccess by 1ms makes it exactly 1ms slower. A cache of budget 0 is never visited
// and costs nothing.
func TestCacheVisitsPayLocalAccess(t *testing.T) {
	base := warmGetTime(t, sim.DRAMAccess, 1<<20)
	slow := warmGetTime(t, sim.DRAMAccess+time.Millisecond, 1<<20)
	require.Equal(t, time.Millisecond, slow-base, "warm Get: %v, with a 1ms dearer local access: %v", base, slow)
	require.Equal(t, warmGetTime(t, sim.DRAMAccess, 0), warmGetTime(t, sim.DRAMAccess+time.Millisecond, 0))
}
