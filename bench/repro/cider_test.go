package repro_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/bench/repro"
)

func TestCiderQuickDeterministic(t *testing.T) {
	var a, b bytes.Buffer
	r1, err := repro.RunCider(context.Background(), repro.CiderQuick(), nil)
	require.NoError(t, err)
	require.NoError(t, r1.WriteText(&a))
	r2, err := repro.RunCider(context.Background(), repro.CiderQuick(), nil)
	require.NoError(t, err)
	require.NoError(t, r2.WriteText(&b))
	require.Equal(t, a.String(), b.String())
	t.Log("\n" + a.String())
}
