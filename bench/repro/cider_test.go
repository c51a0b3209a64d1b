package repro_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/bench/repro"
)

// TestCiderDeterministic runs a small sweep with every structure and synchronizer twice and
// requires the same bytes (the quick configuration's golden pins the full quick run).
func TestCiderDeterministic(t *testing.T) {
	c := repro.CiderQuick()
	c.Clients = []int{32}
	c.ArrayKeys, c.RaceKeys = 1<<12, 1<<10
	c.Warmup, c.Window = time.Millisecond, 500*time.Microsecond
	var a, b bytes.Buffer
	r1, err := repro.RunCider(context.Background(), c, nil)
	require.NoError(t, err)
	require.NoError(t, r1.WriteText(&a))
	r2, err := repro.RunCider(context.Background(), c, nil)
	require.NoError(t, err)
	require.NoError(t, r2.WriteText(&b))
	require.Equal(t, a.String(), b.String())
	t.Log("\n" + a.String())
}
