package sherman_test

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/bench/baseline/internal/basetest"
	"github.com/farmem/farmem/bench/baseline/sherman"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/sim"
)

// warmCostTimes runs, in sim with one client and the model's LocalAccess set to local, a tree
// of 2,000 keys with a cache of budget, and returns the virtual time of a warm Get (the cache
// filled by a first Get of the same key) and of a warm scan of 100 keys.
func warmCostTimes(t *testing.T, local time.Duration, budget int64) (get, scan time.Duration) {
	t.Helper()
	m := sim.ConnectX6()
	m.MemoryNodes, m.ComputeNodes, m.MemorySize = 1, 1, 16<<20
	m.LocalAccess = local
	s, err := sim.New(m, 1)
	require.NoError(t, err)
	defer s.Close()
	key := func(k uint64) []byte { return binary.BigEndian.AppendUint64(nil, k) }
	s.Run(func() {
		ctx := context.Background()
		c, err := s.Open(ctx, farmem.ComputeID(1).Node())
		require.NoError(t, err)
		require.NoError(t, alloc.FormatAll(ctx, c, alloc.FormatOptions{}))
		a, err := alloc.New(ctx, c, alloc.Options{Lease: 10 * time.Second, Refresh: time.Second, ScanInterval: time.Millisecond})
		require.NoError(t, err)
		root, err := sherman.Create(ctx, c, a, sherman.Params{Codec: sherman.Fixed8()})
		require.NoError(t, err)
		tr, err := sherman.Open(ctx, c, a, root, sherman.Options{Cache: sherman.NewCache(budget)})
		require.NoError(t, err)
		for k := uint64(1); k <= 2000; k++ {
			require.NoError(t, tr.Insert(ctx, key(k), k))
		}
		_, err = tr.Get(ctx, key(777))
		require.NoError(t, err)
		start := s.Now()
		v, err := tr.Get(ctx, key(777))
		get = s.Now().Sub(start)
		require.NoError(t, err)
		require.Equal(t, uint64(777), v)
		_, err = tr.Scan(ctx, key(500), nil, 100)
		require.NoError(t, err)
		start = s.Now()
		ps, err := tr.Scan(ctx, key(500), nil, 100)
		scan = s.Now().Sub(start)
		require.NoError(t, err)
		require.Len(t, ps, 100)
	})
	return get, scan
}

// A warm Get visits the cache once (the leaf's parent), a warm scan walks the cached parents
// once, and each pays the model's price of a local access (the rule of ds/hybrid's caches and
// ds/selcc's frames): raising the model's LocalAccess by 1ms makes each exactly 1ms slower. A
// cache of budget 0 costs nothing.
func TestCacheVisitsPayLocalAccess(t *testing.T) {
	basetest.RequireCacheVisitsCharged(t, sim.DRAMAccess, warmCostTimes)
}
