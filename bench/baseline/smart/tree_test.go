package smart_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/bench/baseline/internal/basetest"
	"github.com/farmem/farmem/bench/baseline/smart"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/lincheck"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/internal/dstest"
	"github.com/farmem/farmem/sim"
)

var allocOpts = dstest.AllocOptions

type client struct {
	m    farmem.Memory
	tree *smart.Tree
}

func openClient(t testing.TB, ctx context.Context, f farmem.Fabric, node farmem.NodeID, root farmem.Addr, cache *smart.Cache) *client {
	t.Helper()
	m, err := f.Open(ctx, node)
	require.NoError(t, err)
	a, err := alloc.New(ctx, m, allocOpts)
	require.NoError(t, err)
	tr, err := smart.Open(ctx, m, a, root, smart.Options{Cache: cache})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tr.Close(); _ = a.Close(); _ = m.Close() })
	return &client{m: m, tree: tr}
}

// localTree starts a strict-mode local fabric holding an empty tree.
func localTree(t testing.TB, lo local.Options) (*local.Fabric, farmem.Addr) {
	t.Helper()
	return dstest.Local(t, lo, smart.Create)
}

// TestSequential checks the tree against a map under random inserts, updates and deletes of
// keys spread over several bytes (prefix splits at several depths), and scans.
func TestSequential(t *testing.T) {
	f, root := localTree(t, local.Options{})
	ctx := context.Background()
	c := openClient(t, ctx, f, f.Topology().ComputeNodes()[0], root, smart.NewCache(1<<20))
	rng := rand.New(rand.NewPCG(3, 4))
	keyOf := func(i int) uint64 { return uint64(i%7)<<48 | uint64(i%5)<<24 | uint64(i) }
	want := map[uint64]uint64{}
	for n := range 4000 {
		k := keyOf(rng.IntN(1000))
		_, present := want[k]
		switch p := rng.IntN(10); {
		case p < 6:
			err := c.tree.Insert(ctx, k, uint64(n))
			if present {
				require.ErrorIs(t, err, smart.ErrExists)
			} else {
				require.NoError(t, err)
				want[k] = uint64(n)
			}
		case p < 8:
			err := c.tree.Update(ctx, k, uint64(n))
			if present {
				require.NoError(t, err)
				want[k] = uint64(n)
			} else {
				require.ErrorIs(t, err, smart.ErrNotFound)
			}
		default:
			err := c.tree.Delete(ctx, k)
			if present {
				require.NoError(t, err)
				delete(want, k)
			} else {
				require.ErrorIs(t, err, smart.ErrNotFound)
			}
		}
	}
	for i := range 1000 {
		k := keyOf(i)
		v, err := c.tree.Get(ctx, k)
		if w, ok := want[k]; ok {
			require.NoError(t, err)
			require.Equal(t, w, v)
		} else {
			require.ErrorIs(t, err, smart.ErrNotFound)
		}
	}
	ps, err := c.tree.Scan(ctx, 0, ^uint64(0), 0)
	require.NoError(t, err)
	require.Len(t, ps, len(want))
	for i, p := range ps {
		require.Equal(t, want[p.Key], p.Value)
		if i > 0 {
			require.Less(t, ps[i-1].Key, p.Key)
		}
	}
	require.NotZero(t, c.tree.Stats().Splits)
}

// TestRoundTrips asserts each operation's round trips and verbs with a warm cache.
func TestRoundTrips(t *testing.T) {
	f, root := localTree(t, local.Options{})
	ctx := context.Background()
	cache := smart.NewCache(1 << 20)
	c := openClient(t, ctx, f, f.Topology().ComputeNodes()[0], root, cache)
	for i := range uint64(1000) {
		require.NoError(t, c.tree.Insert(ctx, 2*i+2, i))
	}
	type verbs = basetest.Verbs
	cost := func(name string, wantRTT uint64, want verbs, f func() error, wantErr error) {
		t.Helper()
		basetest.Cost(t, c.m, name, wantRTT, want, f, wantErr)
	}
	_, err := c.tree.Get(ctx, 600)
	require.NoError(t, err)
	cost("get", smart.GetRoundTrips, verbs{Read: 1}, func() error {
		v, err := c.tree.Get(ctx, 600)
		require.Equal(t, uint64(299), v)
		return err
	}, nil)
	cost("update", smart.UpdateRoundTrips, verbs{Read: 1, Write: 1, CAS: 2}, func() error { return c.tree.Update(ctx, 600, 5) }, nil)
	// 3 joins the 127 keys 2, 4, ..., 254 of its last node (class 128 still).
	cost("insert", smart.InsertRoundTrips, verbs{Read: 1, Write: 1, CAS: 1}, func() error { return c.tree.Insert(ctx, 3, 6) }, nil)
	cost("delete", smart.DeleteRoundTrips, verbs{Read: 1, Write: 1, CAS: 2}, func() error { return c.tree.Delete(ctx, 3) }, nil)
	// 601 is the 129th key of its last node (512, 514, ..., 766): the node enters class 256,
	// which one CAS records in its parent's slot.
	cost("insert, grows", smart.InsertGrowRoundTrips, verbs{Read: 1, Write: 1, CAS: 2}, func() error { return c.tree.Insert(ctx, 601, 6) }, nil)
	// 50 keys of one last node: the node again, then 50 leaves in one batch.
	cost("scan 50", smart.ScanRoundTrips, verbs{Read: 1 + 50}, func() error {
		ps, err := c.tree.Scan(ctx, 1024+2, 1024+102, 0)
		require.Len(t, ps, 50)
		return err
	}, nil)
}

var kvModel = lincheck.KV[uint64, uint64]()

type kvHistory = basetest.History[uint64]

// keyOf spreads indices over prefixes diverging at bytes 0, 3 and 6.
func keyOf(i int) uint64 { return uint64(i%3)<<56 | uint64(i%2)<<32 | uint64(i/6)<<4 | 1 }

// runMix runs ops operations of the mix over keyOf(i), i < span, on c's tree as c's client,
// recording them in h (see basetest.Mix): a scan reaches up to 200 past its key, with a limit
// of 0, 4 or 8.
func runMix(ctx context.Context, c *client, h *kvHistory, ops, span int) error {
	mix := basetest.Mix[uint64]{Ops: ops, Span: span, Scan: 10, Get: 25, Insert: 40, Update: 13, Key: keyOf,
		ScanEnd: func(rng *rand.Rand, _ int, k uint64) (uint64, int) {
			to := k + 1 + rng.Uint64N(200)
			return to, rng.IntN(3) * 4
		}}
	tr := c.tree
	return mix.Run(ctx, c.m, basetest.Tree[uint64]{
		Get: tr.Get, Insert: tr.Insert, Update: tr.Update, Delete: tr.Delete,
		Scan: func(ctx context.Context, from, to uint64, limit int) ([]lincheck.Pair[uint64, uint64], error) {
			got, err := tr.Scan(ctx, from, to, limit)
			var ps []lincheck.Pair[uint64, uint64]
			for _, p := range got {
				ps = append(ps, lincheck.Pair[uint64, uint64]{Key: p.Key, Value: p.Value})
			}
			return ps, err
		},
		ErrNotFound: smart.ErrNotFound, ErrExists: smart.ErrExists,
	}, kvModel, h)
}

func sum(cs []*client) smart.Stats {
	var s smart.Stats
	for _, c := range cs {
		x := c.tree.Stats()
		s.Inserts += x.Inserts
		s.Updates += x.Updates
		s.Deletes += x.Deletes
		s.LockRetries += x.LockRetries
		s.Refreshes += x.Refreshes
		s.Splits += x.Splits
	}
	return s
}

// TestLinearizableLocal runs the mix with 6 clients on two compute nodes with tearing, jitter
// and strict mode, with a tiny cache (constant eviction) and a large one, and checks the
// history.
func TestLinearizableLocal(t *testing.T) {
	for _, budget := range []int64{300, 1 << 20} {
		t.Run(fmt.Sprint(budget), func(t *testing.T) {
			f, root := localTree(t, local.Options{Shape: local.Shape{MemoryNodes: 2, ComputeNodes: 2}, Tearing: true, Jitter: 5 * time.Microsecond})
			comp := f.Topology().ComputeNodes()
			caches := []*smart.Cache{smart.NewCache(budget), smart.NewCache(budget)}
			const n = 6
			cs := make([]*client, n)
			for i := range cs {
				cs[i] = openClient(t, context.Background(), f, comp[i%2], root, caches[i%2])
			}
			h := kvModel.NewHistory(f.Runtime())
			basetest.Parallel(t, n, func(i int) error { return runMix(context.Background(), cs[i], h, 400, 60) })
			st := sum(cs)
			t.Logf("%+v", st)
			h.Check(t)
			require.NotZero(t, st.Splits)
			require.NotZero(t, st.Refreshes)
		})
	}
}

// TestLinearizableSim runs the mix on a simulated ConnectX-6 cluster with tearing and jitter
// and checks the history; a run is a function of its seed.
func TestLinearizableSim(t *testing.T) {
	run := func(seed uint64) string {
		model := sim.ConnectX6()
		model.MemoryNodes, model.ComputeNodes, model.MemorySize = 2, 2, 64<<20
		model.Tearing, model.Jitter = true, 300*time.Nanosecond
		s, err := sim.New(model, seed)
		require.NoError(t, err)
		defer s.Close()
		h := kvModel.NewHistory(s.Runtime())
		var digest string
		s.Run(func() {
			ctx := context.Background()
			comp := s.Topology().ComputeNodes()
			m0, err := s.Open(ctx, comp[0])
			require.NoError(t, err)
			require.NoError(t, alloc.FormatAll(ctx, m0, alloc.FormatOptions{}))
			a0, err := alloc.New(ctx, m0, allocOpts)
			require.NoError(t, err)
			root, err := smart.Create(ctx, m0, a0)
			require.NoError(t, err)
			caches := []*smart.Cache{smart.NewCache(300), smart.NewCache(1 << 20)}
			const n = 6
			cs := make([]*client, n)
			for i := range cs {
				cs[i] = openClient(t, ctx, s, comp[i%2], root, caches[i%2])
			}
			errs := make([]error, n)
			require.NoError(t, s.Parallel(n, func(i int) { errs[i] = runMix(ctx, cs[i], h, 300, 80) }))
			for i, err := range errs {
				require.NoError(t, err, "client %d", i)
			}
			st := sum(cs)
			require.NotZero(t, st.Splits)
			require.NotZero(t, st.LockRetries)
			digest = fmt.Sprintf("%+v %v %v", st, s.Now(), s.Stats())
		})
		sum, verdict := h.Verify()
		t.Logf("seed %d: %v", seed, sum)
		require.NoError(t, verdict, "seed %d", seed)
		return digest
	}
	first := run(1)
	run(2)
	require.Equal(t, first, run(1), "same seed, same run")
}
