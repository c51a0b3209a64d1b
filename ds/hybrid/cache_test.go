package hybrid_test

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/hybrid"
	"github.com/farmem/farmem/farmem/local"
)

// The cache keeps to its byte budget, evicts, is shared by a node's handles (one warms it for
// the other), and a budget of 0 caches nothing.
func TestCacheBudgetAndSharing(t *testing.T) {
	e := newEnv(t, local.Options{Shape: local.Shape{ComputeNodes: 2}}, hybrid.Params{LeafSlots: 8})
	ctx := context.Background()
	caches, err := hybrid.OpenCaches(ctx, e.f, e.comp, 2000)
	require.NoError(t, err)
	defer caches.Close()
	c0, _ := caches.Get(e.comp[0])
	c1, _ := caches.Get(e.comp[1])
	require.NotSame(t, c0, c1)
	a := e.open(t, 0, hybrid.Options{Cache: c0})
	b := e.open(t, 2, hybrid.Options{Cache: c0}) // same compute node as a
	r := rand.New(rand.NewPCG(3, 4))
	var keys []uint64
	for range 400 {
		k := 1 + r.Uint64N(1<<40)<<20 | r.Uint64N(64)
		if a.tree.Insert(ctx, key(k), k) == nil {
			keys = append(keys, k)
		}
	}
	st := c0.Stats()
	require.LessOrEqual(t, st.Bytes, st.Budget)
	require.Positive(t, st.Evictions)
	// b reaches a leaf through the path a's Get left in the shared cache: one round trip.
	last := keys[len(keys)-1]
	_, err = a.tree.Get(ctx, key(last))
	require.NoError(t, err)
	before := b.m.Stats()
	v, err := b.tree.Get(ctx, key(last))
	require.NoError(t, err)
	require.Equal(t, last, v)
	require.Equal(t, uint64(hybrid.GetRoundTrips), b.m.Stats().Sub(before).RoundTrips)
	for _, k := range keys {
		v, err := b.tree.Get(ctx, key(k))
		require.NoError(t, err)
		require.Equal(t, k, v)
	}

	none := hybrid.NewCache(0)
	z := e.open(t, 1, hybrid.Options{Cache: none})
	for _, k := range keys[:20] {
		_, err := z.tree.Get(ctx, key(k))
		require.NoError(t, err)
	}
	require.Zero(t, none.Stats().Entries)
	require.NoError(t, none.Close())
	require.NoError(t, none.Close())
}
