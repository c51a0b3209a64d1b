package replcheck_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/sim"
)

// TestRepopulateSim: on the simulator, the first replica of three hangs mid-run (it misses
// writes), comes back and is repopulated while six clients keep running; then another replica
// crashes, so reads need the repopulated one. The history is linearizable and no operation
// fails.
func TestRepopulateSim(t *testing.T) {
	t.Parallel() // a simulation: virtual time, unmoved by other tests
	model := sim.ConnectX6()
	model.MemoryNodes, model.ComputeNodes, model.MemorySize = 4, 2, 16<<20
	model.Tearing, model.Jitter = true, 300*time.Nanosecond
	s, err := sim.New(model, 11)
	require.NoError(t, err)
	defer s.Close()
	h := kvModel.NewHistory(s.Runtime())
	const n = 4
	var rep race.RepopulateReport
	var suspected uint64
	s.Run(func() {
		ctx := context.Background()
		comp := s.Topology().ComputeNodes()
		m0, err := s.Open(ctx, comp[0])
		require.NoError(t, err)
		require.NoError(t, alloc.FormatAll(ctx, m0, alloc.FormatOptions{SymmetricSize: 8 << 20}))
		a0, err := alloc.New(ctx, m0, replAlloc)
		require.NoError(t, err)
		p := replLayout
		p.IndexReplicas = 3
		root, err := race.Create(ctx, m0, a0, p)
		require.NoError(t, err)
		open := func(i int) *client {
			m, err := s.Open(ctx, comp[i%len(comp)])
			require.NoError(t, err)
			a, err := alloc.New(ctx, m, replAlloc)
			require.NoError(t, err)
			tab, err := race.Open(ctx, m, a, root, race.Options{Lease: 20 * time.Millisecond})
			require.NoError(t, err)
			return &client{m: m, a: a, tab: tab}
		}
		cs := make([]*client, n)
		for i := range cs {
			cs[i] = open(i)
		}
		admin := open(n)
		replicas := s.Topology().MemoryNodes()[1:]
		first, other := replicas[0], replicas[2]
		start := s.Now()
		s.At(start.Add(100*time.Microsecond), func() { require.NoError(t, s.Hang(first)) })
		s.At(start.Add(1500*time.Microsecond), func() { require.NoError(t, s.Resume(first)) })
		w := replLoad
		w.Ops = 200
		require.NoError(t, s.Parallel(n+1, func(i int) {
			if i == n {
				// The repopulation, once the node is back, then the crash of another replica.
				require.NoError(t, s.Runtime().Sleep(ctx, 1600*time.Microsecond))
				r, err := admin.tab.Repopulate(ctx, first)
				require.NoError(t, err)
				rep = r
				require.NoError(t, s.Crash(other))
				return
			}
			require.NoError(t, w.run(ctx, cs[i], h, 0))
		}))
		for _, c := range cs {
			suspected += c.tab.Replicated().ProtocolStats().Suspected
		}
	})
	sum, verdict := h.Verify()
	t.Logf("%v; repopulated %+v; suspected %d", sum, rep, suspected)
	require.NoError(t, verdict)
	require.Zero(t, sum.Unknown+sum.Failed)
	require.NotZero(t, rep.Words.Copied, "the node missed no write")
	require.NotZero(t, rep.Subtables)
}

// TestRepopulateLocal: on the local transport, the first replica of three restarts empty (its
// memory lost) while four clients run, is adopted and repopulated under their operations, then
// another replica crashes: the history is linearizable, no operation fails, and every key the
// clients left is readable.
func TestRepopulateLocal(t *testing.T) {
	t.Parallel() // its own fabric; a reachable node of the local transport never times out
	e := replEnvWith(t, 4, 3, replLayout, true)
	const n = 4
	cs := make([]*client, n)
	for i := range cs {
		cs[i] = e.open(t, i, race.Options{Lease: 20 * time.Millisecond})
	}
	admin := e.open(t, 0, race.Options{})
	ctx := context.Background()
	h := kvModel.NewHistory(e.f.Runtime())
	replicas := e.f.Topology().MemoryNodes()[1:]
	first, other := replicas[0], replicas[1]
	home := e.f.Topology().MemoryNodes()[0]
	phase := make([]chan struct{}, 3)
	for i := range phase {
		phase[i] = make(chan struct{})
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := replLoad
			w.Ops = 40
			for p := range 3 {
				if err := w.run(ctx, c, h, p*1000); err != nil {
					errs[i] = err
					return
				}
				if p < 2 {
					<-phase[p]
				}
			}
		}()
	}
	// Phase 0 runs; the first replica restarts empty and is adopted; phase 1 runs while it is
	// repopulated; then another replica crashes and phase 2 runs.
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, e.f.Restart(first))
	require.NoError(t, e.f.Adopt(ctx, first))
	require.NoError(t, alloc.Reformat(ctx, admin.m, home, first))
	close(phase[0])
	rep, err := admin.tab.Repopulate(ctx, first)
	require.NoError(t, err)
	require.NoError(t, e.f.Crash(other))
	close(phase[1])
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	sum, verdict := h.Verify()
	t.Logf("%v; repopulated %+v", sum, rep)
	require.NoError(t, verdict)
	require.Zero(t, sum.Unknown+sum.Failed)
	require.NotZero(t, rep.Words.Copied)
}
