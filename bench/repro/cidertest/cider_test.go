package cidertest_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/bench/repro"
	"github.com/farmem/farmem/bench/repro/reprotest"
)

// TestCiderDeterministic runs a small sweep on RACE with CIDER and the factor analysis twice,
// the second time with its seeds run at once, and requires the same bytes (the quick
// configuration's golden pins the full quick run, every synchronizer's points with it). Eight
// clients and one synchronizer (its point, and the factor analysis's CIDER without local WC and
// pessimistic CIDER): the property does not depend on the count or the synchronizer, and each
// of the twelve simulations costs half what it did at sixteen.
func TestCiderDeterministic(t *testing.T) {
	t.Parallel()
	c := repro.CiderQuick()
	c.Structs, c.Syncs, c.Clients, c.Band = []string{repro.RACE}, []string{repro.CIDER}, []int{8}, nil
	c.ArrayKeys, c.RaceKeys = 1<<12, 1<<9
	c.Measure = repro.Measure{Step: 250 * time.Microsecond, MinWarmup: 500 * time.Microsecond, MaxWarmup: 2 * time.Millisecond,
		StepOps: 50, Tolerance: 0.2, MinWindow: 500 * time.Microsecond, MaxWindow: time.Millisecond, MinOps: 200}
	r1, err := repro.RunCider(context.Background(), c, nil)
	require.NoError(t, err)
	c.Workers = 2 // the seeds at once: the same bytes
	r2, err := repro.RunCider(context.Background(), c, nil)
	require.NoError(t, err)
	t.Log("\n" + reprotest.SameText(t, r1, r2))
}

// TestCiderBandRerunsHeadlinePoints runs a two-count sweep (4 and 8 clients) with a band of two
// variants: each rerun holds exactly the headline points (the largest CIDER / O-SYNC's two
// synchronizers and MCS and CIDER at the largest count), carries its variant, and a costlier
// atomic unit moves the optimistic throughput at the same point (the variant is applied, not
// only named).
func TestCiderBandRerunsHeadlinePoints(t *testing.T) {
	t.Parallel()
	c := repro.CiderQuick()
	largest := 8
	c.Structs, c.Syncs, c.Clients = []string{repro.RACE}, []string{repro.Optimistic, repro.MCS, repro.CIDER}, []int{4, largest}
	c.ArrayKeys, c.RaceKeys, c.Seeds, c.Factor = 1<<12, 1<<9, []uint64{1}, false
	c.Measure = repro.Measure{Step: 250 * time.Microsecond, MinWarmup: 500 * time.Microsecond, MaxWarmup: 2 * time.Millisecond,
		StepOps: 50, Tolerance: 0.2, MinWindow: 500 * time.Microsecond, MaxWindow: time.Millisecond, MinOps: 200}
	c.Band = []repro.Variant{{AtomicUnit: 2 * time.Microsecond}, {OpCPU: 100 * time.Nanosecond}}
	r, err := repro.RunCider(context.Background(), c, nil)
	require.NoError(t, err)
	_, _, at := r.Headline()
	require.Len(t, r.Band, 2)
	for i, b := range r.Band {
		require.Equal(t, c.Band[i], b.Config.Costs)
		var got []string
		for _, p := range b.Points {
			got = append(got, fmt.Sprintf("%s/%d", p.Sync, p.Clients))
		}
		want := []string{fmt.Sprintf("%s/%d", repro.Optimistic, at.Clients), fmt.Sprintf("%s/%d", repro.CIDER, at.Clients),
			fmt.Sprintf("%s/%d", repro.MCS, largest)}
		if at.Clients != largest {
			want = append(want, fmt.Sprintf("%s/%d", repro.CIDER, largest))
		}
		require.Equal(t, want, got)
	}
	base := r.Point(repro.RACE, repro.WriteIntensive, repro.Optimistic, at.Clients).Throughput
	slow := r.Band[0].Point(repro.RACE, repro.WriteIntensive, repro.Optimistic, at.Clients).Throughput
	require.Less(t, slow, base, "a 2µs atomic unit slows optimistic synchronization at the same point")
	var out bytes.Buffer
	require.NoError(t, r.WriteText(&out))
	require.Contains(t, out.String(), "atomic unit 2µs")
	require.Contains(t, out.String(), "CPU per verb 100ns")
}

// A variant must set a positive cost.
func TestCiderBandRejectsEmptyVariant(t *testing.T) {
	c := repro.CiderQuick()
	c.Band = []repro.Variant{{}}
	_, err := repro.RunCider(context.Background(), c, nil)
	require.ErrorIs(t, err, repro.ErrConfig)
}
