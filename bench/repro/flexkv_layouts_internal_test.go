package repro

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFlexLayouts: the computed Fig. 19 is deterministic; the scrambled zipf's hottest key
// draws about 1/26.5 of the accesses (YCSB's 10^10-item zeta) whatever the key count; the
// rank assignment proxies more of the load than the static one's ratio of partitions and its
// CV does not fall far below the floor the hottest key sets (its partition is whole on one
// node); the reductions are sorted with the median inside them.
func TestFlexLayouts(t *testing.T) {
	t.Parallel()
	a, err := flexLayouts(2000, 128, 6, 200_000)
	require.NoError(t, err)
	b, err := flexLayouts(2000, 128, 6, 200_000)
	require.NoError(t, err)
	require.Equal(t, a, b)
	require.InDelta(t, 1/26.47, a.HotShare, 0.005)
	require.Greater(t, a.Proxied, BalanceRatio)
	require.GreaterOrEqual(t, a.After, 0.9*a.Floor)
	require.Positive(t, a.Floor)
	require.Len(t, a.Reductions, 6)
	require.True(t, slices.IsSorted(a.Reductions))
	require.GreaterOrEqual(t, a.Median(), a.Reductions[0])
	require.LessOrEqual(t, a.Median(), a.Reductions[5])
	_, err = flexLayouts(2000, 128, 0, 200_000)
	require.ErrorIs(t, err, ErrConfig)
}
