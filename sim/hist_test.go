package sim

import (
	"math/rand/v2"
	"testing"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/stretchr/testify/require"
)

// TestHistogramMatchesLibrary checks the simulator's own recording against the library's: the
// same values give the same counts, total and quantiles.
func TestHistogramMatchesLibrary(t *testing.T) {
	ours := newHistogram()
	lib := hdrhistogram.New(1, histMax, 2)
	rec := func(v int64) {
		ours.record(v)
		require.NoError(t, lib.RecordValue(min(max(v, 0), histMax)))
	}
	for v := int64(-3); v < 1<<14; v++ {
		rec(v)
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		rec(rnd.Int64N(histMax+1) >> rnd.IntN(40))
	}
	for _, v := range []int64{histMax - 1, histMax, histMax + 1, 1 << 62} {
		rec(v)
	}
	got := ours.export()
	require.Equal(t, lib.Export().Counts, got.Export().Counts)
	require.Equal(t, lib.TotalCount(), got.TotalCount())
	for _, q := range []float64{0, 50, 99, 99.9, 100} {
		require.Equal(t, lib.ValueAtQuantile(q), got.ValueAtQuantile(q))
	}
	ours.reset()
	require.Zero(t, ours.export().TotalCount())
}
