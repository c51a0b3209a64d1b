package generator

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/internal/stattest"
)

func TestPermutedIsABijection(t *testing.T) {
	for _, n := range []uint64{2, 3, 10, 1000, 4096, 99991} {
		p, err := NewPermuted(n, 0.9)
		require.NoError(t, err)
		seen := make([]bool, n)
		for i := range n {
			k := p.Key(i)
			require.Less(t, k, n)
			require.False(t, seen[k], "n=%d: key %d twice", n, k)
			seen[k] = true
		}
	}
}

func TestPermutedBadParams(t *testing.T) {
	for _, c := range []struct {
		n     uint64
		theta float64
	}{{1, 0.5}, {10, 0}, {10, 1}, {10, 1.5}, {10, math.NaN()}} {
		_, err := NewPermuted(c.n, c.theta)
		require.Error(t, err, "%+v", c)
	}
}

// TestPermutedDraws: a draw is the Zipfian's rank mapped by Key, so key Key(i) follows rank
// i's Prob (Permuted.Prob): the hottest key is Key(0) with Prob(0), the third Key(2) with Gray's Prob(2), not
// Zipf's.
func TestPermutedDraws(t *testing.T) {
	const n, draws = 5000, 400_000
	p, err := NewPermuted(n, ZipfianTheta)
	require.NoError(t, err)
	ranks := NewZipfianRange(0, n-1, ZipfianTheta)
	r1, r2 := stattest.NewRand(11), stattest.NewRand(11)
	for range 1000 {
		require.Equal(t, p.Key(uint64(ranks.Next(r2))), p.Next(r1))
	}
	counts := make([]int, n)
	r := stattest.NewRand(12)
	for range draws {
		counts[p.Next(r)]++
	}
	for i := range uint64(3) {
		stattest.RequireBinomial(t, "key of rank "+string(rune('0'+i)), counts[p.Key(i)], draws, p.Prob(i))
		require.Equal(t, ranks.Prob(int64(i)), p.Prob(i))
	}
	require.Greater(t, stattest.BinomialOff(counts[p.Key(2)], draws, zipf(2, Zeta(n, ZipfianTheta), ZipfianTheta)), 6.0, "Zipf's law at rank 2")
}
