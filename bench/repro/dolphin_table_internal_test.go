package repro

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Table II's key counts: the full run's five counts along the doubling from 2^17 (log-spaced)
// and 2^18, after 2^15; its ratio averages the counts in [2^17, 2^18), and a single count
// stands alone.
func TestDolphinTableCycle(t *testing.T) {
	c := DolphinFull()
	require.Equal(t, []uint64{1 << 15, 131072, 155872, 185364, 220436, 262144}, c.TableKeys)
	require.Equal(t, []int{1, 2, 3, 4}, c.cycle())
	require.Equal(t, []int{0}, DolphinConfig{TableKeys: []uint64{512}}.cycle())

	// The ratio is of the means over the cycle, not of the largest count.
	c.TableKeys = []uint64{1000, 2000}
	r := &DolphinResult{Config: c, Table: []CacheRow{
		{Index: Dolphin, Bytes: []int64{1000, 2000}},
		{Index: ShermanLike, Bytes: []int64{3000, 2000}},
	}}
	require.Equal(t, []int{0}, c.cycle())
	require.InDelta(t, 3.0, r.TableRatio(ShermanLike), 1e-9)
	lo, hi := r.TableRatioRange(ShermanLike)
	require.InDelta(t, 1.0, lo, 1e-9)
	require.InDelta(t, 3.0, hi, 1e-9)
}
