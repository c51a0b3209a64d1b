package alloc

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// classOf is the smallest class holding the size, and classBelow the largest class of at most
// n bytes (-1 below the smallest), at every class boundary and around it.
func TestClassOfAndBelow(t *testing.T) {
	sizes := []uint64{0, 1, math.MaxUint64}
	for _, c := range classSizes {
		sizes = append(sizes, c-1, c, c+1)
	}
	for _, n := range sizes {
		below := -1
		for i, c := range classSizes {
			if c <= n {
				below = i
			}
		}
		require.Equal(t, below, classBelow(n), "classBelow(%d)", n)
		if n == 0 || n > classSizes[len(classSizes)-1] {
			continue
		}
		of := 0
		for classSizes[of] < n {
			of++
		}
		require.Equal(t, of, classOf(n), "classOf(%d)", n)
	}
}
