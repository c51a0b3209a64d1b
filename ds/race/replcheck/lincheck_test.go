package replcheck_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/lincheck"
	"github.com/farmem/farmem/sim"
)

// replLoad is the workload of the replicated tables' checks: 32 keys over small subtables, so
// that the run splits and doubles the directory while nodes crash.
var replLoad = workload{Keys: 32, Ops: 120, Search: 40, Insert: 25, Update: 15, MaxVal: 60, Unknown: 1}

// replLayout is the layout of the replicated tables' checks: two bucket groups of two-slot
// buckets and four-bit fingerprints.
var replLayout = race.Params{Groups: 1, SlotsPerBucket: 4, FingerprintBits: 4, MaxDepth: 16}

// replRun is the outcome of a checked run over a replicated table.
type replRun struct {
	summary           lincheck.Summary
	verdict           error
	splits, doublings uint64
	digest            string
	// suspected counts replicas the clients found down (replmem.Stats.Suspected), takeovers
	// the replica locks they took over from a client that stopped.
	suspected, takeovers uint64
}

// runReplSim runs w with n clients on a simulated ConnectX-6 cluster of r+1 memory nodes (the
// lowest holds the allocator's shared words, the r others the table) with tearing and jitter,
// crashing the replicas at positions crash (0 is the first replica) at staggered times during
// the run, and checks the history.
func runReplSim(t *testing.T, seed uint64, r int, crash []int, w workload, n int) replRun {
	return runReplSimWith(t, seed, r, crash, w, n, nil)
}

// runReplSimWith is runReplSim with client 0's Memory seen through wrap0 (given the simulator
// and the client), if set.
func runReplSimWith(t *testing.T, seed uint64, r int, crash []int, w workload, n int, wrap0 func(*sim.Sim, farmem.Memory) farmem.Memory) replRun {
	t.Helper()
	model := sim.ConnectX6()
	model.MemoryNodes, model.ComputeNodes, model.MemorySize = r+1, 2, 16<<20
	model.Tearing, model.Jitter = true, 300*time.Nanosecond
	s, err := sim.New(model, seed)
	require.NoError(t, err)
	defer s.Close()
	h := kvModel.NewHistory(s.Runtime())
	var out replRun
	s.Run(func() {
		ctx := context.Background()
		comp := s.Topology().ComputeNodes()
		m0, err := s.Open(ctx, comp[0])
		require.NoError(t, err)
		require.NoError(t, alloc.FormatAll(ctx, m0, alloc.FormatOptions{SymmetricSize: 8 << 20}))
		a0, err := alloc.New(ctx, m0, replAlloc)
		require.NoError(t, err)
		p := replLayout
		p.IndexReplicas = r
		root, err := race.Create(ctx, m0, a0, p)
		require.NoError(t, err)
		cs := make([]*client, n)
		for i := range cs {
			m, err := s.Open(ctx, comp[i%len(comp)])
			require.NoError(t, err)
			a, err := alloc.New(ctx, m, replAlloc)
			require.NoError(t, err)
			c := &client{m: m, a: a}
			tm := m
			if i == 0 && wrap0 != nil {
				tm = wrap0(s, m)
			}
			c.tab, err = race.Open(ctx, tm, a, root, race.Options{Lease: 20 * time.Millisecond})
			require.NoError(t, err)
			cs[i] = c
		}
		info, err := cs[0].tab.Info(ctx)
		require.NoError(t, err)
		start := s.Now()
		replicas := s.Topology().MemoryNodes()[1:]
		for k, x := range crash {
			node := replicas[x]
			s.At(start.Add(time.Duration(k+1)*150*time.Microsecond), func() { require.NoError(t, s.Crash(node)) })
		}
		errs := make([]error, n)
		require.NoError(t, s.Parallel(n, func(i int) { errs[i] = w.run(ctx, cs[i], h, 0) }))
		for i, err := range errs {
			require.NoError(t, err, "client %d", i)
		}
		after, err := cs[n-1].tab.Info(ctx)
		require.NoError(t, err)
		out.splits, out.doublings = after.Splits-info.Splits, after.Doublings-info.Doublings
		out.digest = fmt.Sprintf("%v %v", s.Now(), s.Stats())
		for i, c := range cs {
			out.suspected += c.tab.Replicated().ProtocolStats().Suspected
			out.takeovers += c.tab.Replicated().ProtocolStats().Takeovers
			require.NoError(t, c.tab.Close())
			if err := c.a.Close(); wrap0 == nil || i > 0 {
				require.NoError(t, err)
			}
		}
	})
	out.summary, out.verdict = h.Verify()
	return out
}

// TestReplicatedLinearizableSim: a table replicated on three nodes, its first replica crashed
// mid-run, and on five nodes with two crashed (the first included), on the simulator: the
// histories are linearizable and no operation fails.
func TestReplicatedLinearizableSim(t *testing.T) {
	t.Parallel() // a simulation: virtual time, unmoved by other tests
	for _, tc := range []struct {
		r     int
		crash []int
	}{{3, []int{0}}, {3, []int{2}}, {5, []int{0, 3}}} {
		for seed := range uint64(1) {
			o := runReplSim(t, seed+1, tc.r, tc.crash, replLoad, 4)
			t.Logf("r=%d crash %v seed %d: %v; splits %d, doublings %d", tc.r, tc.crash, seed+1, o.summary, o.splits, o.doublings)
			require.NoError(t, o.verdict)
			require.Zero(t, o.summary.Unknown+o.summary.Failed, "operations failed while a minority of replicas was down")
			require.NotZero(t, o.splits)
			require.NotZero(t, o.suspected, "no client met the crashed replicas")
		}
	}
}

// TestReplicatedSimDeterministic: a replicated run with a crash is a function of its seed.
func TestReplicatedSimDeterministic(t *testing.T) {
	t.Parallel() // a simulation: virtual time, unmoved by other tests
	w := replLoad
	w.Ops = 60
	a := runReplSim(t, 5, 3, []int{0}, w, 4)
	b := runReplSim(t, 5, 3, []int{0}, w, 4)
	require.NoError(t, a.verdict)
	require.Equal(t, a.digest, b.digest)
}

// TestReplicatedLinearizableLocal: the same on the local transport with tearing and jitter,
// the first replica crashed once the clients have made a third of their operations.
func TestReplicatedLinearizableLocal(t *testing.T) {
	t.Parallel() // its own fabric; a reachable node of the local transport never times out
	for _, tc := range []struct {
		r     int
		crash []int
	}{{3, []int{0}}, {5, []int{0, 4}}} {
		e := replEnvWith(t, tc.r+1, tc.r, replLayout, true)
		const n = 4
		cs := make([]*client, n)
		for i := range cs {
			cs[i] = e.open(t, i, race.Options{Lease: 20 * time.Millisecond})
		}
		ctx := context.Background()
		h := kvModel.NewHistory(e.f.Runtime())
		var done atomic.Int64
		var once sync.Once
		replicas := e.f.Topology().MemoryNodes()[1:]
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i, c := range cs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w := replLoad
				for phase := range 3 {
					w.Ops = 20
					if err := w.run(ctx, c, h, phase*1000); err != nil {
						errs[i] = err
						return
					}
					if done.Add(1) >= n {
						once.Do(func() {
							for _, x := range tc.crash {
								require.NoError(t, e.f.Crash(replicas[x]))
							}
						})
					}
				}
			}()
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		sum, verdict := h.Verify()
		t.Logf("r=%d crash %v: %v", tc.r, tc.crash, sum)
		require.NoError(t, verdict)
		require.Zero(t, sum.Unknown+sum.Failed)
		var suspected uint64
		for _, c := range cs {
			suspected += c.tab.Replicated().ProtocolStats().Suspected
		}
		require.NotZero(t, suspected, "no client met the crashed replicas")
	}
}

// TestReplicatedClientDiesSim: client 0 dies holding the replica locks of a word (right after
// a lock round of its that won a majority), while the first replica crashes: the others take
// its locks over once their lease expires, the history is linearizable, and only the dead
// client's last operation has an unknown outcome.
func TestReplicatedClientDiesSim(t *testing.T) {
	t.Parallel() // a simulation: virtual time, unmoved by other tests
	wrap := func(s *sim.Sim, m farmem.Memory) farmem.Memory {
		var fired atomic.Bool
		return &farmemtest.Interposer{Memory: m, After: func(_ context.Context, v farmemtest.Verb, _ uint64, err error) {
			if err != nil || fired.Load() || v.Single || v.Posted || v.Waited {
				return
			}
			won := 0
			for i, op := range v.Batch.Ops {
				if prev, e := v.Batch.Result(i); op.Kind == farmem.OpCAS && op.Swap>>63 == 1 && e == nil && prev == op.Cmp {
					won++
				}
			}
			if won >= 2 {
				fired.Store(true)
				require.NoError(t, s.CrashClient(m.Info().ID))
			}
		}}
	}
	w := replLoad
	w.Ops = 80
	o := runReplSimWith(t, 3, 3, []int{0}, w, 4, wrap)
	t.Logf("%v; takeovers %d", o.summary, o.takeovers)
	require.NoError(t, o.verdict)
	require.LessOrEqual(t, o.summary.Unknown+o.summary.Failed, 1)
	require.NotZero(t, o.takeovers, "nobody took the dead client's locks over")
}
