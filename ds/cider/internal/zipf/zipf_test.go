package zipf

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFrequencies: the drawn frequencies of the most popular ranks match the exact
// distribution (Gray et al.'s method is exact for ranks 0 and 1 and close above).
func TestFrequencies(t *testing.T) {
	const n, draws = 100000, 200000
	g, err := New(n, 0.99)
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(1, 2))
	var counts [10]int
	for range draws {
		if v := g.Next(r); v < 10 {
			counts[v]++
		} else {
			require.Less(t, v, uint64(n))
		}
	}
	for i, c := range counts[:2] {
		want := g.Prob(uint64(i)) * draws
		require.InDelta(t, want, float64(c), 5*math.Sqrt(want), "rank %d", i)
	}
	require.Greater(t, counts[2], counts[5])
	// The hottest of a million keys takes about 6.5% (the notes' 4.95% is for 60M keys).
	big, err := New(1_000_000, 0.99)
	require.NoError(t, err)
	require.InDelta(t, 0.065, big.Prob(0), 0.003)
}

func TestScrambledIsABijection(t *testing.T) {
	for _, n := range []uint64{2, 3, 10, 1000, 4096, 99991} {
		s, err := NewScrambled(n, 0.9)
		require.NoError(t, err)
		seen := make([]bool, n)
		for i := range n {
			k := s.Key(i)
			require.Less(t, k, n)
			require.False(t, seen[k], "n=%d: key %d twice", n, k)
			seen[k] = true
		}
	}
}

func TestBadParams(t *testing.T) {
	for _, c := range []struct {
		n     uint64
		theta float64
	}{{1, 0.5}, {10, 0}, {10, 1}, {10, 1.5}, {10, math.NaN()}} {
		_, err := New(c.n, c.theta)
		require.Error(t, err, "%+v", c)
	}
}
