package sherman_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/bench/baseline/internal/basetest"
	"github.com/farmem/farmem/bench/baseline/sherman"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/sim"
)

// TestSequential checks a tree of small nodes (several levels) against a map under random
// inserts, updates and deletes, with both codecs, and full scans against the sorted map.
func TestSequential(t *testing.T) {
	for _, tc := range []struct {
		name   string
		p      sherman.Params
		key    func(i int) []byte
		cache  int64
		ranged bool // NewShermanCache
	}{
		{"fixed8", sherman.Params{NodeSize: 128}, func(i int) []byte { return k8(uint64(i) * 7) }, 1 << 20, false},
		{"fixed8/sherman", sherman.Params{NodeSize: 128, EntryVersions: true}, func(i int) []byte { return k8(uint64(i) * 7) }, 1 << 20, true},
		{"fixed8/sherman/tinycache", sherman.Params{NodeSize: 128, EntryVersions: true}, func(i int) []byte { return k8(uint64(i) * 7) }, 600, true},
		{"bytes", sherman.Params{Codec: sherman.Bytes(16), NodeSize: 256}, func(i int) []byte { return []byte(fmt.Sprintf("user%d", i)) }, 1 << 20, false},
		{"nocache", sherman.Params{NodeSize: 128}, func(i int) []byte { return k8(uint64(i)) }, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, local.Options{Shape: local.Shape{MemoryNodes: 2, ComputeNodes: 1}}, tc.p)
			c := e.open(t, 0, newCache(tc.ranged, tc.cache))
			ctx := context.Background()
			want := map[string]uint64{}
			rng := rand.New(rand.NewPCG(1, 2))
			for n := range 3000 {
				k := tc.key(rng.IntN(800))
				_, present := want[string(k)]
				switch p := rng.IntN(10); {
				case p < 6:
					err := c.tree.Insert(ctx, k, uint64(n))
					if present {
						require.ErrorIs(t, err, sherman.ErrExists)
					} else {
						require.NoError(t, err)
						want[string(k)] = uint64(n)
					}
				case p < 8:
					err := c.tree.Update(ctx, k, uint64(n))
					if present {
						require.NoError(t, err)
						want[string(k)] = uint64(n)
					} else {
						require.ErrorIs(t, err, sherman.ErrNotFound)
					}
				default:
					err := c.tree.Delete(ctx, k)
					if present {
						require.NoError(t, err)
						delete(want, string(k))
					} else {
						require.ErrorIs(t, err, sherman.ErrNotFound)
					}
				}
			}
			for i := range 800 {
				k := tc.key(i)
				v, err := c.tree.Get(ctx, k)
				if w, ok := want[string(k)]; ok {
					require.NoError(t, err)
					require.Equal(t, w, v)
				} else {
					require.ErrorIs(t, err, sherman.ErrNotFound)
				}
			}
			keys := make([]string, 0, len(want))
			for k := range want {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			lo := []byte{}
			if tc.p.Codec.Fixed != 0 || tc.p.Codec == (sherman.Codec{}) {
				lo = k8(0)
			}
			ps, err := c.tree.Scan(ctx, lo, nil, 0)
			require.NoError(t, err)
			require.Len(t, ps, len(keys))
			for i, p := range ps {
				require.Equal(t, keys[i], string(p.Key))
				require.Equal(t, want[keys[i]], p.Value)
			}
			st := c.tree.Stats()
			require.NotZero(t, st.RootGrowths)
			require.Greater(t, st.RootGrowths, uint64(1), "the tree should have three levels or more")
			t.Logf("%+v", st)
		})
	}
}

// TestRoundTrips asserts each operation's round trips and verbs with a warm cache from
// Memory.Stats deltas.
func TestRoundTrips(t *testing.T) {
	e := newEnv(t, local.Options{}, sherman.Params{})
	cache := sherman.NewCache(1 << 20)
	c := e.open(t, 0, cache)
	ctx := context.Background()
	// 2,000 dense keys: a root over leaves, so the root is the leaves' parent.
	for i := range uint64(2000) {
		require.NoError(t, c.tree.Insert(ctx, k8(2*i+2), i))
	}
	_, err := c.tree.Get(ctx, k8(2))
	require.NoError(t, err)
	// Warm the cache with every leaf parent.
	_, err = c.tree.Get(ctx, k8(3999))
	require.ErrorIs(t, err, sherman.ErrNotFound)
	require.NotZero(t, cache.Stats().Entries)

	type verbs = basetest.Verbs
	cost := func(name string, wantRTT uint64, want verbs, f func() error, wantErr error) {
		t.Helper()
		basetest.Cost(t, c.m, name, wantRTT, want, f, wantErr)
	}
	cost("get", sherman.GetRoundTrips, verbs{Read: 1}, func() error {
		v, err := c.tree.Get(ctx, k8(1000))
		require.Equal(t, uint64(499), v)
		return err
	}, nil)
	cost("update", sherman.UpdateRoundTrips, verbs{Read: 1, Write: 2, CAS: 2}, func() error { return c.tree.Update(ctx, k8(1000), 7) }, nil)
	cost("update absent", sherman.AbsentRoundTrips, verbs{Read: 1, CAS: 2}, func() error { return c.tree.Update(ctx, k8(1001), 7) }, sherman.ErrNotFound)
	cost("insert", sherman.InsertRoundTrips, verbs{Read: 1, Write: 1, CAS: 2}, func() error { return c.tree.Insert(ctx, k8(1001), 8) }, nil)
	cost("insert present", sherman.AbsentRoundTrips, verbs{Read: 1, CAS: 2}, func() error { return c.tree.Insert(ctx, k8(1001), 8) }, sherman.ErrExists)
	cost("delete", sherman.DeleteRoundTrips, verbs{Read: 1, Write: 1, CAS: 2}, func() error { return c.tree.Delete(ctx, k8(1001)) }, nil)
	cost("get after update", sherman.GetRoundTrips, verbs{Read: 1}, func() error {
		v, err := c.tree.Get(ctx, k8(1000))
		require.Equal(t, uint64(7), v)
		return err
	}, nil)
	// A scan of 100 keys at 50% fill spans 200 keys: 3 or 4 leaves, one batch.
	before := c.m.Stats()
	ps, err := c.tree.Scan(ctx, k8(1001), k8(1201), 0)
	require.NoError(t, err)
	require.Len(t, ps, 100)
	d := c.m.Stats().Sub(before)
	leaves := d.VerbsOf(farmem.OpRead)
	require.Equal(t, uint64(sherman.ScanRoundTrips), d.RoundTrips, "scan 100: %v", d)
	require.GreaterOrEqual(t, leaves, uint64(2))
	require.LessOrEqual(t, leaves, uint64(5))
	t.Logf("scan 100: %d round trip, %d leaf reads, %d bytes in", d.RoundTrips, leaves, d.BytesIn)
}

// TestLinearizableLocal runs a random mix with 6 clients on two compute nodes of a local
// fabric with tearing, jitter and strict mode, over 128-byte nodes (frequent splits at every
// level), with a tiny cache (constant eviction) and with none, both codecs, and checks the
// history.
func TestLinearizableLocal(t *testing.T) {
	for _, tc := range []struct {
		name   string
		p      sherman.Params
		budget int64
		locks  bool
		key    func(i int) []byte
		ranged bool // NewShermanCache
	}{
		{"fixed8/tinycache/locks", sherman.Params{NodeSize: 128}, 600, true, func(i int) []byte { return k8(uint64(i) + 1) }, false},
		{"fixed8/nocache", sherman.Params{NodeSize: 128}, 0, false, func(i int) []byte { return k8(uint64(i) + 1) }, false},
		{"bytes/cache/locks", sherman.Params{Codec: sherman.Bytes(12), NodeSize: 256}, 1 << 20, true, func(i int) []byte { return []byte(fmt.Sprintf("k%04d", i)) }, false},
		{"fixed8/shermancache/locks", sherman.Params{NodeSize: 128, EntryVersions: true}, 1 << 20, true, func(i int) []byte { return k8(uint64(i) + 1) }, true},
		{"fixed8/shermancache/tiny", sherman.Params{NodeSize: 128, EntryVersions: true}, 600, false, func(i int) []byte { return k8(uint64(i) + 1) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, local.Options{Shape: local.Shape{MemoryNodes: 2, ComputeNodes: 2}, Tearing: true, Jitter: 5 * time.Microsecond}, tc.p)
			caches := []*sherman.Cache{newCache(tc.ranged, tc.budget), newCache(tc.ranged, tc.budget)}
			const n = 6
			var locks [2]*sherman.LockTable
			if tc.locks {
				locks = [2]*sherman.LockTable{sherman.NewLockTable(), sherman.NewLockTable()}
			}
			cs := make([]*client, n)
			for i := range cs {
				cs[i] = e.openLocks(t, i, caches[i%2], locks[i%2])
			}
			h := kvModel.NewHistory(e.f.Runtime())
			w := workload{ops: 400, span: 300, scan: 10, get: 20, insert: 45, update: 15, key: tc.key}
			basetest.Parallel(t, n, func(i int) error { return w.run(context.Background(), cs[i], h) })
			st := sumStats(cs)
			t.Logf("%+v", st)
			h.Check(t)
			require.NotZero(t, st.Splits)
			require.NotZero(t, st.RootGrowths)
			require.NotZero(t, st.LockRetries, "no lock contention")
			if tc.locks {
				require.NotZero(t, st.Handovers, "no lock handed over")
			}
		})
	}
}

// TestLinearizableSim runs the mix on a simulated ConnectX-6 cluster with tearing and jitter
// over two seeds, checks the histories, and that a run is a function of its seed.
func TestLinearizableSim(t *testing.T) {
	run := func(seed uint64) (string, sherman.Stats) {
		model := sim.ConnectX6()
		model.MemoryNodes, model.ComputeNodes, model.MemorySize = 2, 2, 64<<20
		model.Tearing, model.Jitter = true, 300*time.Nanosecond
		s, err := sim.New(model, seed)
		require.NoError(t, err)
		defer s.Close()
		h := kvModel.NewHistory(s.Runtime())
		var digest string
		var st sherman.Stats
		s.Run(func() {
			ctx := context.Background()
			comp := s.Topology().ComputeNodes()
			m0, err := s.Open(ctx, comp[0])
			require.NoError(t, err)
			require.NoError(t, formatAll(ctx, m0))
			c0 := openAlloc(t, ctx, m0)
			root, err := sherman.Create(ctx, m0, c0, sherman.Params{NodeSize: 128})
			require.NoError(t, err)
			caches := []*sherman.Cache{sherman.NewCache(800), sherman.NewCache(1 << 20)}
			locks := []*sherman.LockTable{sherman.NewLockTable(), sherman.NewLockTable()}
			const n = 6
			cs := make([]*client, n)
			for i := range cs {
				cs[i] = openClientOpts(t, ctx, s, comp[i%2], root, sherman.Options{Cache: caches[i%2], Locks: locks[i%2]})
			}
			w := workload{ops: 300, span: 100, scan: 10, get: 25, insert: 45, update: 10, key: func(i int) []byte { return k8(uint64(i) + 1) }}
			errs := make([]error, n)
			require.NoError(t, s.Parallel(n, func(i int) { errs[i] = w.run(ctx, cs[i], h) }))
			for i, err := range errs {
				require.NoError(t, err, "client %d", i)
			}
			st = sumStats(cs)
			digest = fmt.Sprintf("%+v %v %v", st, s.Now(), s.Stats())
		})
		sum, verdict := h.Verify()
		t.Logf("seed %d: %v; %+v", seed, sum, st)
		require.NoError(t, verdict, "seed %d", seed)
		require.NotZero(t, st.Splits)
		require.NotZero(t, st.Handovers)
		return digest, st
	}
	first, _ := run(1)
	_, _ = run(2)
	again, _ := run(1)
	require.Equal(t, first, again, "same seed, same run")
}
