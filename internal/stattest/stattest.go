// Package stattest holds the sampling checks the generator and workload tests share: binomial
// counts within a number of standard deviations, and Pearson's chi-square against its p = 0.001
// critical value. With a fixed seed each check is deterministic; at Sigmas an honest generator
// fails about once in 16,000 seeds. It is imported by tests only.
package stattest

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// Sigmas is the tolerance of RequireBinomial: a count of a binomial(n, p) event is accepted
// within Sigmas standard deviations sqrt(n p (1-p)) of n p.
const Sigmas = 4

// NewRand returns a PCG source seeded from seed.
func NewRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x5bd1e995)) }

// RequireBinomial checks that count of n draws matches probability p within Sigmas.
func RequireBinomial(t testing.TB, what string, count, n int, p float64) {
	t.Helper()
	exp := float64(n) * p
	sd := math.Sqrt(float64(n) * p * (1 - p))
	t.Logf("%s: %d of %d, expected %.1f ± %.1f (%.2f sd off)", what, count, n, exp, sd, (float64(count)-exp)/sd)
	require.LessOrEqual(t, math.Abs(float64(count)-exp), Sigmas*sd,
		"%s: %d of %d draws, expected %.1f (sd %.1f)", what, count, n, exp, sd)
}

// BinomialOff reports how many standard deviations count is from n p.
func BinomialOff(count, n int, p float64) float64 {
	return math.Abs(float64(count)-float64(n)*p) / math.Sqrt(float64(n)*p*(1-p))
}

// ChiSquareCritical returns the chi-square quantile for p = 0.001 (Wilson-Hilferty's
// approximation past 4 degrees of freedom, within 1% there).
func ChiSquareCritical(df int) float64 {
	if df >= 1 && df <= 4 {
		return [...]float64{10.828, 13.816, 16.266, 18.467}[df-1] // exact, from tables
	}
	const z = 3.0902 // standard normal quantile of 0.999
	k := float64(df)
	a := 2 / (9 * k)
	return k * math.Pow(1-a+z*math.Sqrt(a), 3)
}

// ChiSquare is Pearson's statistic of counts against probs (which sum to 1).
func ChiSquare(counts []int, probs []float64) float64 {
	n := 0
	for _, c := range counts {
		n += c
	}
	x := 0.0
	for i, c := range counts {
		e := float64(n) * probs[i]
		x += (float64(c) - e) * (float64(c) - e) / e
	}
	return x
}
