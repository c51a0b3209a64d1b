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

// tinyFlex is a configuration of Fig. 11 and 16 small enough for the race detector.
func tinyFlex() repro.FlexConfig {
	c := repro.FlexQuick()
	c.Keys, c.Depth, c.Clients, c.InFlight = 200, 3, []int{2}, 1
	c.Figures, c.Seeds, c.Band = []string{"11"}, []uint64{1, 2}, nil
	c.Period = 150 * time.Microsecond
	c.Measure = repro.Measure{Step: 50 * time.Microsecond, MinWarmup: 300 * time.Microsecond, MaxWarmup: 500 * time.Microsecond,
		StepOps: 5, Tolerance: 0.5, MinWindow: 50 * time.Microsecond, MaxWindow: 200 * time.Microsecond, MinOps: 30}
	return c
}

// TestFlexDeterministic runs Fig. 11 of a tiny configuration (FlexKV with its manager, the
// Aceso-like store, plain RACE) with one worker and with two seeds at once, requires the same
// bytes, and checks the counted costs that tell the systems apart: plain RACE serves nothing
// from a cache, the Aceso-like store serves some reads through cached addresses, and every
// system made progress without errors.
func TestFlexDeterministic(t *testing.T) {
	t.Parallel()
	c := tinyFlex()
	r1, err := repro.RunFlex(context.Background(), c, nil)
	require.NoError(t, err)
	c.Workers = 2
	r2, err := repro.RunFlex(context.Background(), c, nil)
	require.NoError(t, err)
	require.Contains(t, reprotest.SameText(t, r1, r2), "Beside the paper")
	for _, p := range r1.Points {
		require.Positive(t, p.Ops, "%s %s", p.Workload, p.System)
		require.Zero(t, p.Errors, "%s %s", p.Workload, p.System)
		switch p.System {
		case repro.RaceSys:
			require.Zero(t, p.KVHits+p.AddrHits)
		case repro.AcesoSys:
			require.Zero(t, p.KVHits, "the baseline caches addresses only")
			require.Positive(t, p.AddrHits)
			require.Positive(t, p.AtomicsPerOp, "its updates CAS the memory nodes")
		}
	}
}

// A configuration that cannot run is ErrConfig, before anything runs.
func TestFlexConfigErrors(t *testing.T) {
	for name, f := range map[string]func(*repro.FlexConfig){
		"no seeds":      func(c *repro.FlexConfig) { c.Seeds = nil },
		"clients order": func(c *repro.FlexConfig) { c.Clients = []int{60, 20} },
		"workload":      func(c *repro.FlexConfig) { c.Workloads = []string{"E"} },
		"figure":        func(c *repro.FlexConfig) { c.Figures = []string{"12"} },
		"empty variant": func(c *repro.FlexConfig) { c.Band = []repro.Variant{{}} },
		"share":         func(c *repro.FlexConfig) { c.MemoryShare = 0 },
		"switch":        func(c *repro.FlexConfig) { c.SwitchEnd = c.SwitchAt },
		"layouts":       func(c *repro.FlexConfig) { c.Layouts = -1 },
	} {
		c := repro.FlexQuick()
		f(&c)
		_, err := repro.RunFlex(context.Background(), c, nil)
		require.ErrorIs(t, err, repro.ErrConfig, name)
	}
}

// TestFlexBalance runs Fig. 16 and 19 of a tiny configuration: Fig. 19 reads manager periods
// under both assignments (the static one, then Algorithm 1's) for every seed, the comparison
// with the paper states its CV reduction with a verdict, and the reduction computed from the
// key distribution at the paper's scale beside it.
func TestFlexBalance(t *testing.T) {
	t.Parallel()
	c := tinyFlex()
	c.Figures, c.Seeds, c.BalancePeriods = []string{"16"}, []uint64{1}, 2
	r, err := repro.RunFlex(context.Background(), c, nil)
	require.NoError(t, err)
	require.Len(t, r.Balance, 1)
	for _, b := range r.Balance {
		require.Equal(t, 2, b.Before.Periods, "seed %d", b.Seed)
		require.Equal(t, 2, b.After.Periods, "seed %d", b.Seed)
		require.Positive(t, b.Before.Proxied, "seed %d: half the partitions proxied", b.Seed)
		require.Positive(t, b.Before.Ops, "seed %d", b.Seed)
		require.Positive(t, b.After.Ops, "seed %d", b.Seed)
	}
	var out bytes.Buffer
	require.NoError(t, r.WriteText(&out))
	require.Regexp(t, `Fig. 19 CV reduction by Algorithm 1 \(A\)\s+42.7%\s+[+-][0-9.]+%`, out.String())
	// The computed check, at the run's scale and at the paper's.
	require.Len(t, r.Layouts, 2)
	require.Equal(t, 10_000_000, r.Layouts[1].Keys)
	require.Regexp(t, `Fig. 19 CV reduction computed at 10M keys, 8192 partitions\s+42.7%\s+median -?[0-9.]+%`, out.String())
}
