package selcctest_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/bench/repro"
	"github.com/farmem/farmem/bench/repro/reprotest"
	"github.com/farmem/farmem/farmem"
)

// tinySelcc is a configuration of every figure small enough for the race detector.
func tinySelcc() repro.SelccConfig {
	c := repro.SelccQuick()
	c.Lines, c.ScaleLines, c.Records = 96, []int{48, 96}, 600
	c.Clients, c.Seeds, c.MicroReads, c.TreeReads = []int{8}, []uint64{1}, []int{95}, []int{95}
	c.Measure = repro.Measure{Step: 100 * time.Microsecond, MinWarmup: 200 * time.Microsecond, MaxWarmup: 500 * time.Microsecond,
		StepOps: 20, Tolerance: 0.5, MinWindow: 100 * time.Microsecond, MaxWindow: 300 * time.Microsecond, MinOps: 100}
	c.Band = nil
	return c
}

// TestSelccDeterministic runs Fig. 17 of a tiny configuration (the three systems) with one
// worker and with two seeds at once, and requires the same bytes.
func TestSelccDeterministic(t *testing.T) {
	t.Parallel()
	c := tinySelcc()
	c.Seeds, c.Figures, c.Clients = []uint64{1, 2}, []string{"17"}, []int{4}
	r1, err := repro.RunSelcc(context.Background(), c, nil)
	require.NoError(t, err)
	c.Workers = 2
	r2, err := repro.RunSelcc(context.Background(), c, nil)
	require.NoError(t, err)
	require.Contains(t, reprotest.SameText(t, r1, r2), "Beside the paper")
}

// TestSelccRoundTrips runs every figure of a tiny configuration and checks the round trips the
// systems must make: SEL two per GCL access and none served from a cache (no hit), two per
// level of the tree (600 records make two levels: a few leaves under the root); SELCC some hits
// at every point; the Sherman-like tree about one per read (a warm cache of internal nodes), or
// a walk from the root per missed parent with Sherman's cache.
func TestSelccRoundTrips(t *testing.T) {
	t.Parallel()
	c := tinySelcc()
	c.ShermanCache = true
	r, err := repro.RunSelcc(context.Background(), c, nil)
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, r.WriteText(&out))
	t.Log("\n" + out.String())
	require.Contains(t, out.String(), "SELCC / Sherman-like, Sherman's cache", "the diagnostic's rows beside the paper")
	require.Contains(t, out.String(), "dflt Mops")
	for _, p := range r.Points {
		require.Positive(t, p.Ops, "%+v", p)
		require.Zero(t, p.Errors)
		switch {
		case p.System == repro.SEL && (p.Fig == "13" || p.Fig == "14" || p.Fig == "14-scale"):
			require.Zero(t, p.Hits)
			require.InDelta(t, 2.0, p.RoundTripsPerOp(), 0.6, "SEL: 2 round trips per access, a few retries")
		case p.System == repro.SEL:
			require.Zero(t, p.Hits)
			require.Less(t, p.Lines, 20, "a root over a few leaves")
			require.InDelta(t, 4.0, p.RoundTripsPerOp(), 0.3, "SEL: 2 round trips per level of a 2-level tree")
		case p.System == repro.Sherman:
			require.Zero(t, p.Hits)
			require.InDelta(t, 1.0, p.RoundTripsPerOp(), 0.4, "Sherman-like: a leaf read per Get, 3 round trips per 1 in 20 Updates")
		case p.System == repro.ShermanDefault:
			// Sherman's cache: a parent it holds costs the leaf's read, one it does not a walk
			// of every level from the root (never the root pointer's read once warm).
			require.Zero(t, p.Hits)
			require.GreaterOrEqual(t, p.Levels, 2)
			require.Greater(t, p.ParentCover, 0.5)
			require.LessOrEqual(t, p.ParentCover, 1.0)
			require.Equal(t, 6, p.PaperLevels, "Sherman's tree of 2 billion keys")
			reads := float64(p.Fabric.Verbs[farmem.TargetMemory][farmem.OpRead]) / float64(p.Ops)
			require.GreaterOrEqual(t, reads, 0.95, "a leaf read per operation at least")
			require.LessOrEqual(t, reads, float64(p.Levels)+0.1, "at most a walk from the root per operation")
		default:
			require.Positive(t, p.Hits, "%s %s %s: a cache that never hits", p.Fig, p.Dist, p.System)
		}
	}
}

// A configuration that cannot run is ErrConfig, before anything runs.
func TestSelccConfigErrors(t *testing.T) {
	for name, f := range map[string]func(*repro.SelccConfig){
		"no seeds":      func(c *repro.SelccConfig) { c.Seeds = nil },
		"clients order": func(c *repro.SelccConfig) { c.Clients = []int{64, 8} },
		"tiny cache":    func(c *repro.SelccConfig) { c.Lines, c.CacheDiv = 16, 8 },
		"read ratio":    func(c *repro.SelccConfig) { c.TreeReads = []int{101} },
		"access":        func(c *repro.SelccConfig) { c.Access = 7 },
		"figure":        func(c *repro.SelccConfig) { c.Figures = []string{"12"} },
		"empty variant": func(c *repro.SelccConfig) { c.Band = []repro.Variant{{}} },
		"fill":          func(c *repro.SelccConfig) { c.TreeFill = 0 },
	} {
		c := repro.SelccQuick()
		f(&c)
		_, err := repro.RunSelcc(context.Background(), c, nil)
		require.ErrorIs(t, err, repro.ErrConfig, name)
	}
}
