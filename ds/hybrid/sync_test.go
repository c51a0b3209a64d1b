package hybrid_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/cider"
	"github.com/farmem/farmem/ds/hybrid"
	"github.com/farmem/farmem/ds/ptrsync"
	"github.com/farmem/farmem/ds/qlock"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

// syncs are the synchronizers the tree's value words take, built for client i (its lock node
// at a distinct offset is the client's own slice, so offset 0 serves every client).
var syncs = []struct {
	name string
	make func(t testing.TB, m farmem.Memory, credits *cider.Credits) ptrsync.Synchronizer
}{
	{"optimistic", func(testing.TB, farmem.Memory, *cider.Credits) ptrsync.Synchronizer { return ptrsync.NewOptimistic() }},
	{"cider", func(t testing.TB, m farmem.Memory, cr *cider.Credits) ptrsync.Synchronizer {
		s, err := cider.NewCIDER(m, cr, cider.Options{})
		require.NoError(t, err)
		return s
	}},
	{"cider-pessimistic", func(t testing.TB, m farmem.Memory, cr *cider.Credits) ptrsync.Synchronizer {
		s, err := cider.NewCIDER(m, cr, cider.Options{Mode: cider.AlwaysPessimistic})
		require.NoError(t, err)
		return s
	}},
	{"cider-random", func(t testing.TB, m farmem.Memory, cr *cider.Credits) ptrsync.Synchronizer {
		s, err := cider.NewCIDER(m, cr, cider.Options{Mode: cider.RandomMode})
		require.NoError(t, err)
		return s
	}},
	{"mcs", func(t testing.TB, m farmem.Memory, _ *cider.Credits) ptrsync.Synchronizer {
		s, err := cider.NewMCS(m, qlock.Options{})
		require.NoError(t, err)
		return s
	}},
	{"spin", func(t testing.TB, m farmem.Memory, _ *cider.Credits) ptrsync.Synchronizer {
		s, err := cider.NewSpin(m, cider.SpinOptions{})
		require.NoError(t, err)
		return s
	}},
}

// openSync opens client i with a synchronizer made on its own Memory (the tree's).
func openSync(t testing.TB, e *env, i int, opts hybrid.Options, mk func(testing.TB, farmem.Memory, *cider.Credits) ptrsync.Synchronizer,
	credits *cider.Credits) *client {
	t.Helper()
	ctx := context.Background()
	m, err := e.f.Open(ctx, e.comp[i%len(e.comp)])
	require.NoError(t, err)
	a, err := alloc.New(ctx, m, e.ao)
	require.NoError(t, err)
	opts.Sync = mk(t, m, credits)
	tr, err := hybrid.Open(ctx, m, a, e.root, opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = tr.Close()
		_ = a.Close()
		_ = m.Close()
	})
	return &client{m: m, a: a, tree: tr, sync: opts.Sync}
}

// syncStats returns the client's synchronizer's counters, if it is one of ds/cider's.
func (c *client) syncStats() (cider.Stats, bool) {
	switch s := c.sync.(type) {
	case *cider.CIDER:
		return s.Stats(), true
	case *cider.MCS:
		return s.Stats(), true
	case *cider.Spin:
		return s.Stats(), true
	}
	return cider.Stats{}, false
}

// TestSyncRoundTrips counts one uncontended update of a 100-byte value exactly, warm cache,
// through each synchronizer, against the tree's own optimistic loop: round trips, verbs to
// memory nodes by kind, and the unsignaled Spear release.
func TestSyncRoundTrips(t *testing.T) {
	type cost struct {
		rtt                                  uint64
		reads, writes, cas, mcas, faa, unsig uint64
	}
	want := map[string]cost{
		// [FAA, read leaf head and keys, read values, WRITE block]; [CAS]; release FAA unsignaled.
		"tree":       {rtt: 2, reads: 2, writes: 1, cas: 1, faa: 2, unsig: 1},
		"optimistic": {rtt: 2, reads: 2, writes: 1, cas: 1, faa: 2, unsig: 1},
		// A cold key: optimistic.
		"cider": {rtt: 2, reads: 2, writes: 1, cas: 1, faa: 2, unsig: 1},
		// [FAA, reads]; MaskedCAS enqueue; [WRITE block, CAS]; CAS release.
		"cider-pessimistic": {rtt: 4, reads: 2, writes: 1, cas: 2, mcas: 1, faa: 2, unsig: 1},
		// [FAA, reads, WRITE]; MaskedCAS enqueue; CAS; CAS release.
		"mcs": {rtt: 4, reads: 2, writes: 1, cas: 2, mcas: 1, faa: 2, unsig: 1},
		// [FAA, reads, WRITE]; [lock CAS, read value word]; CAS; CAS unlock.
		"spin": {rtt: 4, reads: 3, writes: 1, cas: 3, faa: 2, unsig: 1},
	}
	for _, sy := range append([]struct {
		name string
		make func(t testing.TB, m farmem.Memory, credits *cider.Credits) ptrsync.Synchronizer
	}{{"tree", nil}}, syncs...) {
		w, ok := want[sy.name]
		if !ok {
			continue
		}
		t.Run(sy.name, func(t *testing.T) {
			e := newEnv(t, local.Options{}, hybrid.Params{BlockValues: true, LockEntries: 64})
			ctx := context.Background()
			c := e.openWith(t, 0, hybrid.Options{Cache: hybrid.NewCache(1 << 20)}, nil)
			if sy.make != nil {
				c = openSync(t, e, 0, hybrid.Options{Cache: hybrid.NewCache(1 << 20)}, sy.make, cider.NewCredits(0))
			}
			const k = 0x0102030405060701
			require.NoError(t, c.tree.InsertBytes(ctx, key(k), make([]byte, 100)))
			require.NoError(t, c.tree.UpdateBytes(ctx, key(k), make([]byte, 100))) // warm the cache
			before := c.m.Stats()
			require.NoError(t, c.tree.UpdateBytes(ctx, key(k), []byte("the value of a hot key, one hundred bytes long.......................................................")))
			d := c.m.Stats().Sub(before)
			v := d.Verbs[farmem.TargetMemory]
			got := cost{rtt: d.RoundTrips, reads: v[farmem.OpRead], writes: v[farmem.OpWrite], cas: v[farmem.OpCAS],
				mcas: v[farmem.OpMaskedCAS], faa: v[farmem.OpFAA], unsig: d.Unsignaled}
			t.Logf("%s: %+v (%v)", sy.name, got, d)
			require.Equal(t, w, got)
		})
	}
}

// TestSyncLinearizable runs an update-heavy mix on few keys with 8 clients on two compute nodes
// of a local fabric with tearing, jitter and strict mode, each synchronizer in turn, over a lock
// table of one entry per memory node (every key shares it with others), and checks the
// history; CIDER's pessimistic runs must combine batches, and a member of another key than its
// executor's must have retried rather than taken the outcome (the history would show it).
func TestSyncLinearizable(t *testing.T) {
	t.Parallel()
	for _, sy := range syncs {
		t.Run(sy.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, local.Options{Shape: local.Shape{MemoryNodes: 2, ComputeNodes: 2}, Tearing: true, Jitter: 5 * time.Microsecond, Strict: true},
				hybrid.Params{LeafSlots: 8, BlockValues: true, LockEntries: 1})
			ctx := context.Background()
			const n = 8
			credits := []*cider.Credits{cider.NewCredits(0), cider.NewCredits(0)}
			cs := make([]*client, n)
			for i := range cs {
				cs[i] = openSync(t, e, i, hybrid.Options{Lease: time.Second}, sy.make, credits[i%2])
			}
			h := kvModel.NewHistory(e.f.Runtime())
			w := workload{ops: 150, get: 25, insert: 20, update: 50, unknown: 3, span: 6, blocks: true}
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i, c := range cs {
				wg.Add(1)
				go func() { defer wg.Done(); errs[i] = w.run(ctx, c, h) }()
			}
			wg.Wait()
			for i, err := range errs {
				require.NoError(t, err, "client %d", i)
			}
			flushPosts(t, cs) // a release FAA posted unsignaled may still be on its way
			census := audit(t, cs[0])
			require.Zero(t, census.Held, "Spear words left held")
			var st cider.Stats
			for _, c := range cs {
				if s, ok := c.syncStats(); ok {
					st = st.Add(s)
				}
			}
			t.Logf("%s: %+v", sy.name, st)
			h.Check(t)
			if sy.name == "cider-pessimistic" {
				require.NotZero(t, st.Batches, "no combined batch")
			}
		})
	}
}
