package cidertest_test

import (
	"context"
	"flag"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/bench/repro"
)

// long runs the CIDER shape sweep with the measurement it was first asserted with (a warm-up
// of 1 to 3 ms in 250 µs steps, a window of at least 250 µs and 500 operations): about 1.5x the
// default's CPU, which with the race detector is most of this package's test time.
var long = flag.Bool("repro.long", false, "run the CIDER shape sweep with its longer measurement")

// shapeConfig is a small sweep: 16Ki array keys (4Ki on RACE), one seed, and a short
// measurement: a warm-up of 0.5 to 2 ms in 125 µs steps, a window of at least 125 µs and 300
// operations (up to 1 ms). With -repro.long the measurement is the longer one above.
func shapeConfig(structs, syncs []string, clients []int) repro.CiderConfig {
	c := repro.CiderQuick()
	c.Structs, c.Mixes, c.Syncs, c.Clients = structs, []string{repro.WriteIntensive}, syncs, clients
	c.ArrayKeys, c.RaceKeys = 1<<14, 1<<12
	c.Measure = repro.Measure{Step: 125 * time.Microsecond, MinWarmup: 500 * time.Microsecond, MaxWarmup: 2 * time.Millisecond,
		StepOps: 100, Tolerance: 0.2, MinWindow: 125 * time.Microsecond, MaxWindow: time.Millisecond, MinOps: 300}
	if *long {
		c.Measure = repro.Measure{Step: 250 * time.Microsecond, MinWarmup: time.Millisecond, MaxWarmup: 3 * time.Millisecond,
			StepOps: 100, Tolerance: 0.2, MinWindow: 250 * time.Microsecond, MaxWindow: 2 * time.Millisecond, MinOps: 500}
	}
	c.Seeds, c.Tracked, c.Factor, c.Band = []uint64{1}, 256, false, nil
	// The steady state: under Algorithm 1's crediting CIDER may take longer than this test's
	// warm-up to leave the start-up collapse at 192 clients.
	c.EarlyCredit = true
	return c
}

// TestCiderShape asserts, on a small sweep, the shape CIDER §5.2.1 reports on the pointer array
// (write-intensive): optimistic synchronization scales to tens of clients and then collapses,
// and CIDER matches it at low counts and stays on top of it and of the MCS lock as they grow, with fewer memory-node verbs per operation than the MCS lock; and on RACE,
// CIDER far above optimistic at 128 clients.
func TestCiderShape(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of simulation")
	}
	if raceDetector {
		t.Skip("simulated sweeps: run without the race detector (go test ./bench/repro/cidertest/, the README's test command's second part; see norace_test.go)")
	}
	t.Parallel()
	ctx := context.Background()
	// The three sweeps are independent: run them at once (each is deterministic on its own).
	var low, high, rr *repro.CiderResult
	var wg sync.WaitGroup
	for _, w := range []struct {
		dst *(*repro.CiderResult)
		c   repro.CiderConfig
	}{
		{&low, shapeConfig([]string{repro.Array}, []string{repro.Optimistic, repro.CIDER}, []int{16, 32})},
		{&high, shapeConfig([]string{repro.Array}, []string{repro.Optimistic, repro.MCS, repro.CIDER}, []int{192})},
		{&rr, shapeConfig([]string{repro.RACE}, []string{repro.Optimistic, repro.CIDER}, []int{128})},
	} {
		wg.Go(func() {
			r, err := repro.RunCider(ctx, w.c, nil)
			if err == nil {
				*w.dst = r
			} else {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	require.False(t, t.Failed())
	for _, r := range []*repro.CiderResult{low, high, rr} {
		for _, p := range r.Points {
			require.Zero(t, p.Errors, "%s %s %d", p.Struct, p.Sync, p.Clients)
			require.Positive(t, p.Ops, "%s %s %d", p.Struct, p.Sync, p.Clients)
		}
	}
	at := func(k string, n int) repro.CiderPoint {
		r := low
		if n == 192 {
			r = high
		}
		return r.Point(repro.Array, repro.WriteIntensive, k, n)
	}
	tp := func(k string, n int) float64 { return at(k, n).Throughput }
	require.Greater(t, tp(repro.Optimistic, 32), 1.8*tp(repro.Optimistic, 16), "optimistic scales up to tens of clients")
	require.Less(t, tp(repro.Optimistic, 192), tp(repro.Optimistic, 32)/4, "optimistic collapses at high counts")
	require.InDelta(t, 1, tp(repro.CIDER, 16)/tp(repro.Optimistic, 16), 0.1, "CIDER matches optimistic at low contention")
	for _, k := range []string{repro.Optimistic, repro.MCS} {
		require.Greater(t, tp(repro.CIDER, 192), tp(k, 192), "CIDER on top of %s at 192 clients", k)
	}
	require.GreaterOrEqual(t, tp(repro.CIDER, 192), tp(repro.CIDER, 32), "CIDER stays flat")
	c := at(repro.CIDER, 192)
	require.Positive(t, c.Counters.Batches, "no batch was combined")
	require.Less(t, c.MemoryVerbsPerOp(), at(repro.MCS, 192).MemoryVerbsPerOp(), "CIDER spends fewer memory-node verbs per op than MCS")

	ro, rc := rr.Point(repro.RACE, repro.WriteIntensive, repro.Optimistic, 128), rr.Point(repro.RACE, repro.WriteIntensive, repro.CIDER, 128)
	require.Greater(t, rc.Throughput, 4*ro.Throughput, "CIDER on RACE at 128 clients")
}
