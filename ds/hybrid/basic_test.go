package hybrid_test

import (
	"context"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/hybrid"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

func TestKeysRefused(t *testing.T) {
	e := newEnv(t, local.Options{}, hybrid.Params{})
	c := e.open(t, 0, hybrid.Options{})
	ctx := context.Background()
	for _, k := range [][]byte{nil, []byte("short"), []byte("123456789"), key(0), key(1 << 63), key(^uint64(0))} {
		_, err := c.tree.Get(ctx, k)
		require.ErrorIs(t, err, hybrid.ErrKey, "%x", k)
		require.ErrorIs(t, c.tree.Insert(ctx, k, 1), hybrid.ErrKey)
		require.ErrorIs(t, c.tree.Update(ctx, k, 1), hybrid.ErrKey)
		require.ErrorIs(t, c.tree.Delete(ctx, k), hybrid.ErrKey)
	}
	require.NoError(t, c.tree.Insert(ctx, key(hybrid.MaxKey), 7))
	require.NoError(t, c.tree.Insert(ctx, key(1), 8))
	_, err := hybrid.Open(ctx, c.m, c.a, e.root.Add(64), hybrid.Options{})
	require.ErrorIs(t, err, hybrid.ErrCorrupt)
	_, err = hybrid.Create(ctx, c.m, c.a, hybrid.Params{LeafSlots: 2})
	require.ErrorIs(t, err, farmem.ErrInvalid)
}

// TestSequentialModel runs random operations against a Go map with 8-slot leaves and no cache,
// then with a cache, over key sets dense (splits, special-node growth), sparse (prefix splits,
// node growth) and mixed, and audits the tree after each.
func TestSequentialModel(t *testing.T) {
	for _, tc := range []struct {
		name   string
		keyOf  func(r *rand.Rand) uint64
		budget int64
	}{
		{"dense", func(r *rand.Rand) uint64 { return 1 + r.Uint64N(600) }, 0},
		{"dense-cached", func(r *rand.Rand) uint64 { return 1 + r.Uint64N(600) }, 1 << 20},
		{"sparse", func(r *rand.Rand) uint64 { return 1 + r.Uint64N(hybrid.MaxKey) }, 1 << 20},
		{"clustered", func(r *rand.Rand) uint64 {
			return r.Uint64N(4)<<56 | r.Uint64N(3)<<40 | r.Uint64N(300) + 1
		}, 4096},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, local.Options{}, hybrid.Params{LeafSlots: 8})
			c := e.open(t, 0, hybrid.Options{Cache: hybrid.NewCache(tc.budget)})
			ctx := context.Background()
			r := rand.New(rand.NewPCG(1, 2))
			model := map[uint64]uint64{}
			for i := range 4000 {
				k := tc.keyOf(r)
				v := uint64(i + 1)
				want, ok := model[k]
				switch r.IntN(4) {
				case 0:
					got, err := c.tree.Get(ctx, key(k))
					if ok {
						require.NoError(t, err, "get %#x", k)
						require.Equal(t, want, got, "get %#x", k)
					} else {
						require.ErrorIs(t, err, hybrid.ErrNotFound, "get %#x", k)
					}
				case 1:
					err := c.tree.Insert(ctx, key(k), v)
					if ok {
						require.ErrorIs(t, err, hybrid.ErrExists, "insert %#x", k)
					} else {
						require.NoError(t, err, "insert %#x", k)
						model[k] = v
					}
				case 2:
					err := c.tree.Update(ctx, key(k), v)
					if ok {
						require.NoError(t, err, "update %#x", k)
						model[k] = v
					} else {
						require.ErrorIs(t, err, hybrid.ErrNotFound, "update %#x", k)
					}
				case 3:
					err := c.tree.Delete(ctx, key(k))
					if ok {
						require.NoError(t, err, "delete %#x", k)
						delete(model, k)
					} else {
						require.ErrorIs(t, err, hybrid.ErrNotFound, "delete %#x", k)
					}
				}
			}
			keys := slices.Sorted(maps.Keys(model))
			all, err := c.tree.Scan(ctx, 1, hybrid.MaxKey+1, 0)
			require.NoError(t, err)
			require.Len(t, all, len(keys))
			for i, p := range all {
				require.Equal(t, keys[i], p.Key)
				require.Equal(t, model[p.Key], p.Value)
			}
			for range 50 {
				a, b := tc.keyOf(r), tc.keyOf(r)
				a, b = min(a, b), max(a, b)
				limit := r.IntN(5)
				got, err := c.tree.Scan(ctx, a, b, limit)
				require.NoError(t, err)
				var want []hybrid.Pair
				for _, k := range keys {
					if k >= a && k < b && (limit == 0 || len(want) < limit) {
						want = append(want, hybrid.Pair{Key: k, Value: model[k]})
					}
				}
				if len(want) == 0 {
					require.Empty(t, got, "scan [%#x, %#x) limit %d", a, b, limit)
					continue
				}
				require.Equal(t, want, got, "scan [%#x, %#x) limit %d", a, b, limit)
			}
			census := audit(t, c)
			require.Equal(t, len(model), census.Keys)
			require.Zero(t, census.Held)
			for _, l := range census.Leaves {
				for i, k := range l.Keys {
					require.Equal(t, model[k], l.Values[i], "key %#x", k)
				}
			}
			st := c.tree.Stats()
			t.Logf("%s: %+v census nodes %v special %d leaves %d tombstones %d", tc.name, st, census.Nodes, census.Special, len(census.Leaves), census.Tombstones)
		})
	}
}
