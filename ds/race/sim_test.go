package race_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/lincheck"
	"github.com/farmem/farmem/internal/dstest"
	"github.com/farmem/farmem/sim"
)

// simOutcome is what one simulated run produced.
type simOutcome struct {
	splits, doublings uint64
	stats             race.Stats
	verdict           error
	summary           lincheck.Summary
	digest            string // a fingerprint of the run, equal for equal seeds
	census            race.Census
}

// simFaults schedules faults on a run: s, the clients, and the time the workload starts.
type simFaults func(s *sim.Sim, cs []*client, start farmem.Time)

// runSim runs w with n clients on a simulated ConnectX-6 cluster (two memory nodes, two compute
// nodes, tearing and jitter on) over a table laid out with p, under faults, and checks the
// history. Everything, faults included, is a function of seed.
// With victimStep > 0, client 0 first inserts alone until it is crashed right after that step
// of its first split (holding the lock), and the others run after it.
func runSim(t *testing.T, seed uint64, w workload, n int, p race.Params, faults simFaults, victimStep int, opts race.Options, pr splitProto) simOutcome {
	t.Helper()
	model := sim.ConnectX6()
	model.MemoryNodes, model.ComputeNodes, model.MemorySize = 2, 2, envMemory
	model.Tearing, model.Jitter = true, 300*time.Nanosecond
	s, err := sim.New(model, seed)
	require.NoError(t, err)
	defer s.Close()
	ao := dstest.AllocOptions
	h := kvModel.NewHistory(s.Runtime())
	var out simOutcome
	s.Run(func() {
		ctx := context.Background()
		comp := s.Topology().ComputeNodes()
		m0, err := s.Open(ctx, comp[0])
		require.NoError(t, err)
		require.NoError(t, alloc.FormatAll(ctx, m0, alloc.FormatOptions{}))
		a0, err := alloc.New(ctx, m0, ao)
		require.NoError(t, err)
		root, err := race.CreateVersion(ctx, m0, a0, p, pr.version)
		require.NoError(t, err)
		cs := make([]*client, n)
		for i := range cs {
			m, err := s.Open(ctx, comp[i%len(comp)])
			require.NoError(t, err)
			a, err := alloc.New(ctx, m, ao)
			require.NoError(t, err)
			opts.Lease = 20 * time.Millisecond
			tm, c := m, &client{m: m, a: a}
			if i == 0 && victimStep > 0 {
				tm, c.killed = atSplitStep(m, root, pr, victimStep, func() { require.NoError(t, s.CrashClient(m.Info().ID)) })
			}
			c.tab, err = race.Open(ctx, tm, a, root, opts)
			require.NoError(t, err)
			cs[i] = c
		}
		before, err := race.Open(ctx, m0, a0, root, race.Options{})
		require.NoError(t, err)
		b, err := before.Info(ctx)
		require.NoError(t, err)
		run := cs
		if victimStep > 0 {
			v := w
			v.Search, v.Insert, v.Update = 10, 80, 10
			require.NoError(t, v.run(ctx, cs[0], h))
			require.True(t, cs[0].killed.Load(), "client 0 never reached step %d of a split", victimStep)
			run = cs[1:]
		}
		if faults != nil {
			faults(s, run, s.Now())
		}
		errs := make([]error, len(run))
		require.NoError(t, s.Parallel(len(run), func(i int) { errs[i] = w.run(ctx, run[i], h) }))
		for i, err := range errs {
			require.NoError(t, err, "client %d", i)
		}
		a, err := before.Info(ctx)
		require.NoError(t, err)
		// Not quiet: the crashed client may leave a tentative slot or a held lock behind.
		out.census = audit(t, cs[n-1], false)
		out.splits, out.doublings = a.Splits-b.Splits, a.Doublings-b.Doublings
		for _, c := range cs {
			out.stats = addStats(out.stats, c.tab.Stats())
		}
		out.digest = fmt.Sprintf("%+v %+v %v %v", a.Root, out.stats, s.Now(), s.Stats())
	})
	out.summary, out.verdict = h.Verify()
	return out
}

// pauseAndCrash pauses one client for longer than the table's lease (its locks are taken
// over, and its renewals refused when it wakes), pauses another briefly, and crashes a third
// (its operations in flight have unknown outcomes; a split it held is finished by others).
func pauseAndCrash(s *sim.Sim, cs []*client, start farmem.Time) {
	pause := func(c *client, at, d time.Duration) {
		id := c.m.Info().ID
		s.At(start.Add(at), func() { _ = s.PauseClient(id) })
		s.At(start.Add(at+d), func() { _ = s.ResumeClient(id) })
	}
	pause(cs[0], 150*time.Microsecond, 30*time.Millisecond)
	pause(cs[1], 400*time.Microsecond, 2*time.Millisecond)
	crashed := cs[2].m.Info().ID
	s.At(start.Add(700*time.Microsecond), func() { _ = s.CrashClient(crashed) })
}

func simSeeds() int { return 3 * stressScale() }

// TestLinearizableSim is the split workload on the simulator over several seeds: one client
// dies in the middle of its first split (at a step that depends on the seed), then the others
// run with one paused past the lease, one paused briefly and one crashed.
func TestLinearizableSim(t *testing.T) {
	t.Parallel() // a simulation: virtual time, unmoved by other tests
	// The whole split's (a layout version 3 table); TestLinearizableSimRegions is the region
	// split's.
	pr := wholeSplit
	for seed := range uint64(simSeeds()) {
		o := runSim(t, seed+1, splitLoad, 8, collide, pauseAndCrash, 1+int(seed)%pr.steps, race.Options{}, pr)
		t.Logf("%s seed %d: splits %d, doublings %d; %v; %+v; %+v", pr.name, seed+1, o.splits, o.doublings, o.summary, o.stats, o.census)
		require.NoError(t, o.verdict, "%s seed %d", pr.name, seed+1)
		require.GreaterOrEqual(t, o.splits, uint64(3))
		require.GreaterOrEqual(t, o.doublings, uint64(1))
		require.NotZero(t, o.stats.Recoveries, "%s seed %d: no lock was taken over", pr.name, seed+1)
	}
}

// TestLinearizableSimRegions is TestLinearizableSim over subtables moved in four regions
// (splits spread over many operations, mixed keys): one client dies after a step of its first
// split (each seed another step: see steps), then the others run with one paused past the lease (its
// late verbs land after others took its step over), one paused briefly and one crashed.
func TestLinearizableSimRegions(t *testing.T) {
	t.Parallel() // a simulation: virtual time, unmoved by other tests
	var all race.Stats
	// The victim's steps: a freeze, a bit set, the header moved (TestLinearizableRegions kills
	// a client at every step); RACE_STRESS runs all of them, over more seeds.
	steps := []int{3, 5, 8}
	if stressScale() > 1 {
		steps = nil
		for range stressScale() {
			for s := 1; s <= regionSplit.steps; s++ {
				steps = append(steps, s)
			}
		}
	}
	for seed := range uint64(len(steps)) {
		o := runSim(t, seed+200, regionLoad, 8, regions, pauseAndCrash, steps[seed], race.Options{}, regionSplit)
		t.Logf("seed %d: splits %d, doublings %d; %v; %+v; %+v", seed+200, o.splits, o.doublings, o.summary, o.stats, o.census)
		require.NoError(t, o.verdict, "seed %d", seed+200)
		require.GreaterOrEqual(t, o.splits, uint64(2))
		if regionSplit.holdsLock(steps[seed]) {
			require.NotZero(t, o.stats.Recoveries, "seed %d: no lock was taken over", seed+200)
		}
		all = addStats(all, o.stats)
	}
	require.NotZero(t, all.MixedReads, "no search read a mixed key")
}

// TestLinearizableSimHotKeys is the hot-key workload on the simulator, with paused and crashed
// clients and a pin budget short enough that waiting operations re-pin.
func TestLinearizableSimHotKeys(t *testing.T) {
	t.Parallel() // a simulation: virtual time, unmoved by other tests
	for seed := range uint64(simSeeds()) {
		// A pin budget of a few round trips: operations that wait re-pin and look again.
		o := runSim(t, seed+100, hot, 8, race.Params{FingerprintBits: 1}, pauseAndCrash, 0, race.Options{PinBudget: 20 * time.Microsecond}, regionSplit)
		t.Logf("seed %d: %v; kills %d, conflicts %d, repins %d", seed+100, o.summary, o.stats.Kills, o.stats.Conflicts, o.stats.Repins)
		require.NoError(t, o.verdict, "seed %d", seed+100)
		require.NotZero(t, o.stats.Repins)
	}
}

// TestSimDeterministic runs one seed twice: the table takes time, randomness and scheduling only
// from the client's runtime, so both runs are identical.
func TestSimDeterministic(t *testing.T) {
	t.Parallel() // a simulation: virtual time, unmoved by other tests
	w := splitLoad
	w.Ops = 200
	a := runSim(t, 7, w, 6, collide, pauseAndCrash, 3, race.Options{}, regionSplit)
	b := runSim(t, 7, w, 6, collide, pauseAndCrash, 3, race.Options{}, regionSplit)
	require.NoError(t, a.verdict)
	require.Equal(t, a.digest, b.digest)
	require.NotEqual(t, a.digest, runSim(t, 8, w, 6, collide, pauseAndCrash, 3, race.Options{}, regionSplit).digest)
}
