package repro_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/bench/repro"
	"github.com/farmem/farmem/bench/repro/reprotest"
)

// tinySwarm is every figure of the SWARM reproduction small enough for the race detector.
func tinySwarm() repro.SwarmConfig {
	c := repro.SwarmQuick()
	c.Keys, c.Fig13Keys, c.Warmup, c.Ops, c.ContendedWarmup, c.ContendedOps = 12, 12, 10, 40, 5, 20
	c.Seeds, c.Band, c.Words, c.Fig13Clients = []uint64{1}, nil, []int{1, 16}, 16
	c.Fig11Clients, c.Fig11Warmup, c.Fig11Span, c.Fig11Bin = 4, 20*time.Microsecond, 300*time.Microsecond, 50*time.Microsecond
	return c
}

// TestSwarmRoundTrips runs a tiny configuration of every figure and checks what the
// protocols must do: Table 2's common case (RAW 1/1, SWARM 1/1, DM-ABD 2/2) at the median,
// no failed operation, SWARM's contended updates within 4 round trips with a word per writer
// (Fig. 12), and more one-round-trip updates with a word per writer than with one shared word,
// over 80% of them with 16 clients on 12 keys (Fig. 13).
func TestSwarmRoundTrips(t *testing.T) {
	t.Parallel()
	r, err := repro.RunSwarm(context.Background(), tinySwarm(), nil)
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, r.WriteText(&out))
	t.Log("\n" + out.String())
	want := map[string][2]uint64{repro.SysRAW: {1, 1}, repro.SysSWARM: {1, 1}, repro.SysDMABD: {2, 2}}
	require.Len(t, r.Fig5, 3)
	for _, a := range r.Fig5 {
		g, u, errs := a.MedianRoundTrips()
		require.Zero(t, errs, a.System)
		require.Equal(t, want[a.System], [2]uint64{g, u}, a.System)
	}
	require.NotNil(t, r.Fig12)
	_, _, errs := r.Fig12.MedianRoundTrips()
	require.Zero(t, errs)
	require.LessOrEqual(t, r.Fig12.MaxUpdateRoundTrips(), uint64(4))
	require.Len(t, r.Fig13, 4)
	for _, i := range []int{0, 2} { // YCSB B, then A: 1 word, then 16 (one per client)
		require.Less(t, r.Fig13[i].OneRoundTripUpdates(), r.Fig13[i+1].OneRoundTripUpdates())
		require.Greater(t, r.Fig13[i+1].OneRoundTripUpdates(), 0.8)
	}
}

// TestSwarmDeterministic: the same configuration (Figs. 5 and 11) prints the same bytes, one
// seed at a time or both at once.
func TestSwarmDeterministic(t *testing.T) {
	t.Parallel()
	c := tinySwarm()
	c.Figures, c.Seeds = []string{"5", "11"}, []uint64{1, 2}
	r1, err := repro.RunSwarm(context.Background(), c, nil)
	require.NoError(t, err)
	c.Workers = 2
	r2, err := repro.RunSwarm(context.Background(), c, nil)
	require.NoError(t, err)
	require.Contains(t, reprotest.SameText(t, r1, r2), "Beside the paper")
}

// A configuration that cannot run is ErrConfig, before anything runs.
func TestSwarmConfigErrors(t *testing.T) {
	for name, f := range map[string]func(*repro.SwarmConfig){
		"no seeds":      func(c *repro.SwarmConfig) { c.Seeds = nil },
		"keys":          func(c *repro.SwarmConfig) { c.Keys = 1 },
		"ops":           func(c *repro.SwarmConfig) { c.Ops = 0 },
		"words":         func(c *repro.SwarmConfig) { c.Words = []int{65} },
		"clients":       func(c *repro.SwarmConfig) { c.Fig13Clients = 65 },
		"figure":        func(c *repro.SwarmConfig) { c.Figures = []string{"14"} },
		"fig11 clients": func(c *repro.SwarmConfig) { c.Fig11Clients = 0 },
		"fig11 bins":    func(c *repro.SwarmConfig) { c.Fig11Span = 2 * c.Fig11Bin },
		"variant":       func(c *repro.SwarmConfig) { c.Band = []repro.Variant{{}} },
	} {
		c := repro.SwarmQuick()
		f(&c)
		_, err := repro.RunSwarm(context.Background(), c, nil)
		require.ErrorIs(t, err, repro.ErrConfig, name)
	}
}

// TestSwarmFig11: a memory node fails a third of the way through Fig. 11's window, stopping
// or silent: no operation fails, and every bin of the window, the ones after the failure
// included, has operations returning in it (no loss of availability); the timeline prints.
func TestSwarmFig11(t *testing.T) {
	t.Parallel()
	c := tinySwarm()
	c.Figures = []string{"11"}
	r, err := repro.RunSwarm(context.Background(), c, nil)
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, r.WriteText(&out))
	t.Log("\n" + out.String())
	require.Len(t, r.Fig11, 2)
	for _, a := range r.Fig11 {
		bins, errs := a.Timeline()
		require.Zero(t, errs, a.Fault)
		require.Len(t, bins, int(c.Fig11Span/c.Fig11Bin), a.Fault)
		for i, n := range bins {
			require.Positive(t, n, "%s: bin %d returned no operation", a.Fault, i)
		}
	}
	require.Contains(t, out.String(), "Fig. 11")
	require.Contains(t, out.String(), "Paper (§7.7, Fig. 11")
}
