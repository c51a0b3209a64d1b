package repro_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/bench/repro"
)

// tinyDolphin is a configuration of a few seconds: 512 keys, one compute node of 2 clients,
// YCSB A at one budget, one band variant.
func tinyDolphin() repro.DolphinConfig {
	c := repro.DolphinQuick()
	c.Keys, c.TableKeys = 512, []uint64{512}
	c.MemoryNodes, c.ComputeNodes, c.ClientsPerNode = 2, 1, 2
	c.Budgets = []float64{repro.PaperBudget(800)}
	c.Workloads = []string{repro.YCSBA}
	c.Measure = repro.Measure{Step: 100 * time.Microsecond, MinWarmup: 200 * time.Microsecond, MaxWarmup: 600 * time.Microsecond,
		StepOps: 20, Tolerance: 0.5, MinWindow: 100 * time.Microsecond, MaxWindow: 500 * time.Microsecond, MinOps: 50}
	c.Band = []repro.Variant{{AtomicUnit: 2 * time.Microsecond}}
	return c
}

// TestDolphinDeterministic runs a tiny comparison with one seed twice over, both copies at
// once, and requires each point's two runs to agree exactly (a run is a function of its
// seed, whatever runs beside it); the band's points carry their variant, and the tables hold
// every figure the paper is compared on.
func TestDolphinDeterministic(t *testing.T) {
	t.Parallel()
	c := tinyDolphin()
	c.Seeds, c.Workers = []uint64{1, 1}, 2
	r1, err := repro.RunDolphin(context.Background(), c, nil)
	require.NoError(t, err)
	var a bytes.Buffer
	require.NoError(t, r1.WriteText(&a))
	for _, p := range append(r1.Points, r1.Band...) {
		require.Len(t, p.PerSeed, 2)
		require.Equal(t, p.PerSeed[0], p.PerSeed[1], "%s %s %s %v", p.Index, p.Workload, p.Dist, p.Costs)
		require.NotZero(t, p.PerSeed[0], "%s %s %s", p.Index, p.Workload, p.Dist)
	}
	require.Len(t, r1.Band, 2)
	for _, p := range r1.Band {
		require.Equal(t, c.Band[0], p.Costs)
		require.Equal(t, repro.YCSBA, p.Workload)
	}
	// Every index's cache was measured, and smart-like's holds a pointer per key.
	for _, row := range r1.Table {
		require.NotZero(t, row.Bytes[len(row.Bytes)-1], row.Index)
	}
	require.Greater(t, r1.TableRatio(repro.SMARTLike), 5.0)
	for _, want := range []string{"Table II", "over N", "copies from before a split", "leaf parents of", "Fig. 6", "Fig. 7", "Fig. 8", "Beside the paper", "1.44", "16.25", "1.25-1.45", "1.51 / 1.32", "1.16-3.26"} {
		require.Contains(t, a.String(), want)
	}
	t.Log("\n" + a.String())
}

// A band variant must change a cost, and a configuration needs keys and seeds.
func TestDolphinRejectsBadConfig(t *testing.T) {
	c := tinyDolphin()
	c.Band = []repro.Variant{{}}
	_, err := repro.RunDolphin(context.Background(), c, nil)
	require.ErrorIs(t, err, repro.ErrConfig)
	c = tinyDolphin()
	c.Seeds = nil
	_, err = repro.RunDolphin(context.Background(), c, nil)
	require.ErrorIs(t, err, repro.ErrConfig)
}
