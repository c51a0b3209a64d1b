package race_test

import (
	"context"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/ds/race/racetest"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/local"
)

// kvModel is the map the histories are checked against.
var kvModel = racetest.Model

// workload is a random mix of operations over a small key space (racetest.Workload).
type workload racetest.Workload

// stressScale returns the factor RACE_STRESS (an integer) asks for, or 1.
func stressScale() int {
	if n, err := strconv.Atoi(os.Getenv("RACE_STRESS")); err == nil && n > 1 {
		return n
	}
	return 1
}

// run performs w's operations with one client's table, recording them in h.
func (w workload) run(ctx context.Context, c *client, h *racetest.History) error {
	return racetest.Workload(w).Run(ctx, racetest.Client{Memory: c.m, Table: c.tab, Killed: c.killed, Searching: c.searching}, h, 0)
}

// collide are layout parameters that force collisions: one bucket group of two-slot buckets
// per subtable (every key of a subtable competes for the same six slots) and two-bit
// fingerprints (most slots match most keys' fingerprints, so KV blocks decide), so subtables
// split often and the directory doubles.
var collide = race.Params{Groups: 1, SlotsPerBucket: 2, FingerprintBits: 2, MaxDepth: 16}

// splitRun is the outcome of a run of the split workload.
type splitRun struct {
	splits, doublings uint64
	census            race.Census
	stats             race.Stats
	verdict           error
}

// runSplits runs w with n clients over a table laid out with collide on a local fabric with
// tearing, jitter and strict mode, and checks the history.
// With crashStep > 0, client 0 is crashed right after that step of its first split.
func runSplits(t *testing.T, w workload, n int, crashStep int, pr splitProto) splitRun {
	return runSplitsWith(t, w, n, crashStep, false, pr)
}

// runSplitsWith is runSplits; with trusting set, every client's searches take the subtable
// their directory cache names for the key's (see trustingSearches).
func runSplitsWith(t *testing.T, w workload, n int, crashStep int, trusting bool, pr splitProto) splitRun {
	return runSplitsGeo(t, w, n, crashStep, trusting, pr, collide)
}

// runSplitsGeo is runSplitsWith over a table laid out with p.
func runSplitsGeo(t *testing.T, w workload, n int, crashStep int, trusting bool, pr splitProto, p race.Params) splitRun {
	t.Helper()
	return runSplitsOpts(t, w, n, crashStep, trusting, pr, p, race.Options{})
}

// runSplitsOpts is runSplitsGeo with every client's handle opened with opts (its Lease set to
// 20ms).
func runSplitsOpts(t *testing.T, w workload, n int, crashStep int, trusting bool, pr splitProto, p race.Params, opts race.Options) splitRun {
	t.Helper()
	e := newEnvProto(t, local.Options{Shape: local.Shape{MemoryNodes: 2, ComputeNodes: 2}, Tearing: true, Jitter: 5 * time.Microsecond}, p, pr)
	cs := make([]*client, n)
	opts.Lease = 20 * time.Millisecond
	for i := range cs {
		switch {
		case i == 0 && crashStep > 0:
			cs[i] = e.crashAtSplitStep(t, i, opts, crashStep)
		case trusting:
			flag := new(bool)
			cs[i] = e.openWith(t, i, opts, func(m farmem.Memory) farmem.Memory { return trustingSearches(m, flag) })
			cs[i].searching = flag
		default:
			cs[i] = e.open(t, i, opts)
		}
	}
	ctx := context.Background()
	before, err := cs[0].tab.Info(ctx)
	require.NoError(t, err)
	h := kvModel.NewHistory(e.f.Runtime())
	var wg sync.WaitGroup
	errs := make([]error, n)
	dead := make(chan struct{})
	if crashStep == 0 {
		close(dead)
	}
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if crashStep > 0 && i == 0 {
				// The victim inserts until it dies in its first split; the others start then.
				defer close(dead)
				v := w
				v.Search, v.Insert, v.Update = 10, 80, 10
				errs[i] = v.run(ctx, c, h)
				return
			}
			<-dead
			errs[i] = w.run(ctx, c, h)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	if crashStep > 0 {
		require.True(t, cs[0].killed.Load(), "client 0 never reached step %d of a split", crashStep)
	}
	after, err := cs[n-1].tab.Info(ctx)
	require.NoError(t, err)
	r := splitRun{splits: after.Splits - before.Splits, doublings: after.Doublings - before.Doublings}
	// A dead splitter's split is finished only if someone wrote to its subtable since.
	r.census = audit(t, cs[n-1], crashStep == 0)
	for _, c := range cs {
		r.stats = addStats(r.stats, c.tab.Stats())
	}
	_, r.verdict = h.Verify()
	return r
}

func addStats(a, b race.Stats) race.Stats {
	a.Lookups += b.Lookups
	a.Refreshes += b.Refreshes
	a.DirReloads += b.DirReloads
	a.Conflicts += b.Conflicts
	a.Kills += b.Kills
	a.Repins += b.Repins
	a.SplitWaits += b.SplitWaits
	a.Recoveries += b.Recoveries
	a.BadBlocks += b.BadBlocks
	a.Moves += b.Moves
	a.Begins += b.Begins
	a.Hops += b.Hops
	a.MixedReads += b.MixedReads
	a.CacheHits += b.CacheHits
	a.CacheStale += b.CacheStale
	a.ChangeHits += b.ChangeHits
	a.ChangeStale += b.ChangeStale
	a.Straight += b.Straight
	a.StraightHandovers += b.StraightHandovers
	return a
}

// splitLoad is the workload of the split tests: 48 keys over subtables of six slots.
var splitLoad = workload{Keys: 48, Ops: 600, Search: 40, Insert: 25, Update: 15, MaxVal: 120, Unknown: 5}

// TestLinearizableLocal runs concurrent clients on the local transport with tearing, jitter and
// strict mode, over keys forced into collisions, and checks the history is linearizable; the
// table must split at least 3 times and double its directory during the run.
func TestLinearizableLocal(t *testing.T) {
	w := splitLoad
	w.Ops *= stressScale()
	for _, pr := range protos {
		r := runSplits(t, w, 6, 0, pr)
		t.Logf("%s: splits %d, doublings %d; %+v; %+v", pr.name, r.splits, r.doublings, r.stats, r.census)
		require.NoError(t, r.verdict, pr.name)
		require.GreaterOrEqual(t, r.splits, uint64(3), pr.name)
		require.GreaterOrEqual(t, r.doublings, uint64(1), pr.name)
		require.NotZero(t, r.stats.SplitWaits, "%s: no operation ever met a split in progress", pr.name)
		require.NotZero(t, r.stats.Refreshes, "%s: no client ever found its directory cache stale", pr.name)
	}
}

// regions are layout parameters whose subtables move in four regions (four bucket groups of
// two-slot buckets, two-bit fingerprints): a key's two buckets often lie in different
// regions, so that a split in progress leaves keys mixed (one region moved) for a while.
var regions = race.Params{Groups: 4, SlotsPerBucket: 2, FingerprintBits: 2, MaxDepth: 16}

// regionLoad is the workload of the region tests: more keys than splitLoad, as subtables
// hold four times more.
var regionLoad = workload{Keys: 160, Ops: 600, Search: 40, Insert: 30, Update: 10, MaxVal: 120, Unknown: 5}

// TestLinearizableRegions is TestLinearizableLocal over subtables moved in four regions:
// splits run across many operations, mixed keys are read in both halves, and clients die in
// the middle of each step (each run's first split) in turn.
func TestLinearizableRegions(t *testing.T) {
	w := regionLoad
	w.Ops *= stressScale()
	var all race.Stats
	for step := 0; step <= regionSplit.steps; step++ {
		n := 6
		if step > 0 {
			// Runs with a victim: fewer clients and operations (the test's time under -race).
			n, w.Ops = 4, 400*stressScale()
		}
		r := runSplitsGeo(t, w, n, step, false, regionSplit, regions)
		t.Logf("dead at step %d: splits %d, doublings %d; %+v; %+v", step, r.splits, r.doublings, r.stats, r.census)
		require.NoError(t, r.verdict, "dead at step %d", step)
		require.GreaterOrEqual(t, r.splits, uint64(2), "dead at step %d", step)
		if step > 0 && regionSplit.holdsLock(step) {
			require.NotZero(t, r.stats.Recoveries, "step %d: nobody took the dead client's split over", step)
		}
		all = addStats(all, r.stats)
	}
	require.NotZero(t, all.Hops, "no lookup read a split's new half")
	require.NotZero(t, all.MixedReads, "no search read a mixed key")
}

// trustingSearches returns m on which, while *searching is set, the header words that end a
// lookup's batch of reads (the candidate buckets, then the subtable's header and move words)
// read as 0: a depth-0 header and no move, which cover every key. A search then trusts whatever subtable its
// directory cache names, as one that skipped the header check would.
func trustingSearches(m farmem.Memory, searching *bool) farmem.Memory {
	return &farmemtest.Interposer{Memory: m, After: func(_ context.Context, v farmemtest.Verb, _ uint64, err error) {
		if err != nil || !*searching || v.Single || v.Posted {
			return
		}
		for _, op := range v.Batch.Ops {
			if op.Kind != farmem.OpRead {
				return
			}
		}
		if last := v.Batch.Ops[len(v.Batch.Ops)-1]; len(v.Batch.Ops) > 1 && len(last.Buf) == race.LookupHeaderLen {
			clear(last.Buf)
		}
	}}
}

// TestBrokenHeaderCheckCaught: searches that trust a stale directory cache without checking
// the subtable's header read the wrong subtable after a split, which the check must catch.
func TestBrokenHeaderCheckCaught(t *testing.T) {
	for range 10 {
		r := runSplitsWith(t, splitLoad, 6, 0, true, regionSplit)
		if r.verdict != nil {
			t.Logf("caught: %.300v", r.verdict)
			return
		}
	}
	t.Fatal("searches without the header check passed the linearizability check 10 times")
}

// TestLinearizableSplitterDies is TestLinearizableLocal with one client dying in the middle of a
// whole split (a layout version 3 table; at each step in turn): the others must take the split over once its lease expires,
// and the history must stay linearizable.
func TestLinearizableSplitterDies(t *testing.T) {
	w := splitLoad
	w.Ops = 250 * stressScale()
	// The whole split's; TestLinearizableRegions kills region splitters at each step.
	pr := wholeSplit
	for step := 1; step <= pr.steps; step++ {
		r := runSplits(t, w, 4, step, pr)
		require.NoError(t, r.verdict, "%s: dead at step %d", pr.name, step)
		require.NotZero(t, r.stats.Recoveries, "%s: step %d: nobody took the dead client's split over", pr.name, step)
	}
}
