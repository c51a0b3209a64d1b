package repro_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/bench/repro"
)

// TestCiderDeterministic runs a small sweep on RACE with three synchronizers and the factor
// analysis twice, the second time with its seeds run at once, and requires the same bytes (the quick configuration's golden pins the full quick run).
func TestCiderDeterministic(t *testing.T) {
	c := repro.CiderQuick()
	c.Structs, c.Syncs, c.Clients, c.Band = []string{repro.RACE}, []string{repro.Optimistic, repro.MCS, repro.CIDER}, []int{16}, nil
	c.ArrayKeys, c.RaceKeys = 1<<12, 1<<9
	c.Measure = repro.Measure{Step: 250 * time.Microsecond, MinWarmup: 500 * time.Microsecond, MaxWarmup: 2 * time.Millisecond,
		StepOps: 50, Tolerance: 0.2, MinWindow: 500 * time.Microsecond, MaxWindow: time.Millisecond, MinOps: 200}
	var a, b bytes.Buffer
	r1, err := repro.RunCider(context.Background(), c, nil)
	require.NoError(t, err)
	require.NoError(t, r1.WriteText(&a))
	c.Workers = 2 // the seeds at once: the same bytes
	r2, err := repro.RunCider(context.Background(), c, nil)
	require.NoError(t, err)
	require.NoError(t, r2.WriteText(&b))
	require.Equal(t, a.String(), b.String())
	t.Log("\n" + a.String())
}
