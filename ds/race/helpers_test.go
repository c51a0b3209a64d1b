package race_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/ds/race/racetest"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/internal/dstest"
)

// env is a formatted local fabric holding one table.
type env struct {
	f     *local.Fabric
	root  farmem.Addr
	comp  []farmem.NodeID
	ao    alloc.Options
	proto splitProto
}

// splitProto is a split protocol under test: the layout version whose tables use it, and a
// recogniser of its steps (in the verbs of one client), numbered 1 to steps.
type splitProto struct {
	name     string
	version  int
	steps    int
	newSteps func(root farmem.Addr) interface{ Step(farmemtest.Verb) int }
}

// holdsLock reports whether a client that stops right after step n of pr's split still
// holds the split lock (so that another client must take it over): not after a region
// split's release, whose batch releases the lock too when it ends the step's visit.
func (pr splitProto) holdsLock(n int) bool { return pr.version < race.LayoutVersion || n != 6 }

var (
	// wholeSplit is the split of layout version 3 tables: one insert freezes, copies and
	// releases a whole subtable (race.SplitSteps).
	wholeSplit = splitProto{"whole", 3, 7, func(root farmem.Addr) interface{ Step(farmemtest.Verb) int } { return race.NewSplitSteps(root) }}
	// regionSplit is the split of layout version 4 tables, moved region by region over many
	// inserts (race.RegionSteps).
	regionSplit = splitProto{"regions", race.LayoutVersion, race.RegionStepCount, func(root farmem.Addr) interface{ Step(farmemtest.Verb) int } {
		return race.NewRegionSteps(root)
	}}
	// protos are both.
	protos = []splitProto{wholeSplit, regionSplit}
)

// envMemory is the size of a memory node of newEnv's fabric (unless its options say) and of
// the simulated ones (runSim, splitSim): every test of the package passes on 2 MiB nodes. A
// fabric's nodes are allocated whole, and the runtime zero-fills one that reuses memory freed
// by an earlier fabric, faulting in every page of it: with the 64 MiB nodes the package had
// that took a tenth of its CPU time.
const envMemory = 8 << 20

// newEnv starts a local fabric with strict mode on, formats it and creates a table with p, of
// the current layout version (split region by region).
func newEnv(t testing.TB, lo local.Options, p race.Params) *env {
	return newEnvProto(t, lo, p, regionSplit)
}

// newEnvProto is newEnv for a table of pr's layout version.
func newEnvProto(t testing.TB, lo local.Options, p race.Params, pr splitProto) *env {
	t.Helper()
	if lo.MemorySize == 0 {
		lo.MemorySize = envMemory
	}
	f, root := dstest.Local(t, lo, func(ctx context.Context, m farmem.Memory, a *alloc.Allocator) (farmem.Addr, error) {
		return race.CreateVersion(ctx, m, a, p, pr.version)
	})
	e := &env{f: f, root: root, comp: f.Topology().ComputeNodes(), ao: dstest.AllocOptions, proto: pr}
	return e
}

// client is one client's Memory, allocator and table handle.
type client struct {
	m   farmem.Memory
	a   *alloc.Allocator
	tab *race.Table
	// killed, if set, reports that the test crashed the client on purpose (atSplitStep).
	killed *atomic.Bool
	// searching, if set, is set by the workload while the client searches.
	searching *bool
}

// open opens a client on compute node i (modulo their number) with its handle.
func (e *env) open(t testing.TB, i int, opts race.Options) *client {
	return e.openWith(t, i, opts, nil)
}

// openWith is open with the table's Memory (not the allocator's) seen through wrap, if set.
func (e *env) openWith(t testing.TB, i int, opts race.Options, wrap func(farmem.Memory) farmem.Memory) *client {
	t.Helper()
	ctx := context.Background()
	m, err := e.f.Open(ctx, e.comp[i%len(e.comp)])
	require.NoError(t, err)
	a, err := alloc.New(ctx, m, e.ao)
	require.NoError(t, err)
	tm := m
	if wrap != nil {
		tm = wrap(m)
	}
	tab, err := race.Open(ctx, tm, a, e.root, opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = tab.Close()
		_ = a.Close()
		_ = m.Close()
	})
	return &client{m: m, a: a, tab: tab}
}

// memory opens a Memory on compute node i (modulo their number), closed when t ends (after
// whatever tableOn opened on it later).
func (e *env) memory(t testing.TB, i int) farmem.Memory {
	t.Helper()
	m, err := e.f.Open(context.Background(), e.comp[i%len(e.comp)])
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// tableOn opens an allocator with options ao and a table handle with opts, both on m (a
// compute node's Memory, possibly wrapped: what the allocator reads through it counts too),
// closed when t ends; m itself stays the caller's.
func (e *env) tableOn(t testing.TB, m farmem.Memory, ao alloc.Options, opts race.Options) *race.Table {
	t.Helper()
	ctx := context.Background()
	a, err := alloc.New(ctx, m, ao)
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	tab, err := race.Open(ctx, m, a, e.root, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tab.Close() })
	return tab
}

// atSplitStep returns m seen through an Interposer that runs act once, right after the verb
// that ends step n (or a later one with it: a region split's bit may ride its copies' batch) (1..7, numbered by race.SplitSteps) of the client's first split that gets
// that far, and a flag set just before act runs. act may block (the client stalls there) or
// crash the client through the fabric's fault injection (it dies there, holding the split
// lock: its later verbs fail with farmem.ErrNodeDown).
func atSplitStep(m farmem.Memory, root farmem.Addr, pr splitProto, n int, act func()) (farmem.Memory, *atomic.Bool) {
	steps := pr.newSteps(root)
	fired := new(atomic.Bool)
	return &farmemtest.Interposer{Memory: m, After: func(_ context.Context, v farmemtest.Verb, _ uint64, err error) {
		if err == nil && !fired.Load() && steps.Step(v) >= n {
			fired.Store(true)
			act()
		}
	}}, fired
}

// beforeSplitStep is atSplitStep, but act runs right before the client posts the verb that
// would end step n: a client paused there past its lease posts that verb late, after another
// client took its split over (its renewal, checked before the verb, came earlier).
func beforeSplitStep(m farmem.Memory, root farmem.Addr, pr splitProto, n int, act func()) farmem.Memory {
	steps := pr.newSteps(root)
	fired := new(atomic.Bool)
	return &farmemtest.Interposer{Memory: m, Before: func(_ context.Context, v farmemtest.Verb) {
		if !fired.Load() && steps.Step(v) >= n {
			fired.Store(true)
			act()
		}
	}}
}

// crashAtSplitStep opens client i whose first split dies at step n (see atSplitStep).
func (e *env) crashAtSplitStep(t testing.TB, i int, opts race.Options, n int) *client {
	var killed *atomic.Bool
	c := e.openWith(t, i, opts, func(m farmem.Memory) farmem.Memory {
		w, fired := atSplitStep(m, e.root, e.proto, n, func() { require.NoError(t, e.f.CrashClient(m.Info().ID)) })
		killed = fired
		return w
	})
	c.killed = killed
	return c
}

var (
	key   = racetest.Key
	val   = racetest.Val
	unval = racetest.Unval
)

// audit checks the table's invariants from c and returns its census; with quiet set it also
// requires no frozen, tentative or locked state left behind.
func audit(t testing.TB, c *client, quiet bool) race.Census {
	t.Helper()
	census, err := c.tab.Audit(context.Background())
	require.NoError(t, err)
	if quiet {
		require.Zero(t, census.Frozen, "frozen slots left: %+v", census)
		require.Zero(t, census.Tentative, "tentative slots left: %+v", census)
		require.Zero(t, census.Locked, "split locks left held: %+v", census)
	}
	return census
}

// assertCost runs f on c (uncontended), checks its error against wantErr (nil: none), and
// asserts exactly the round trips and atomics (CAS and masked CAS) it made, and that it made
// no FAA, from c.m.Stats() deltas; it logs the deltas under name.
func (c *client) assertCost(t *testing.T, name string, wantRTT, wantCAS uint64, f func() error, wantErr error) {
	t.Helper()
	d := dstest.Cost(t, c.m, name, f, wantErr)
	require.Equal(t, wantRTT, d.RoundTrips, "%s: round trips (%v)", name, d)
	require.Equal(t, wantCAS, d.VerbsOf(farmem.OpCAS)+d.VerbsOf(farmem.OpMaskedCAS), "%s: atomics (%v)", name, d)
	require.Zero(t, d.VerbsOf(farmem.OpFAA), "%s: FAAs (%v)", name, d)
	t.Logf("%-28s %v", name, d)
}
