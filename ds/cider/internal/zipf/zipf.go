// Package zipf is YCSB's Zipfian generator (Gray et al., "Quickly generating billion-record
// synthetic databases", SIGMOD 1994, as YCSB's ZipfianGenerator implements it), which draws
// ranks for any skew theta in (0, 1), where math/rand's Zipf needs an exponent above 1, and a
// scrambled variant that spreads the popular ranks over the key space. It serves ds/cider's
// experiments.
package zipf

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Generator draws ranks in [0, n), rank 0 the most popular, P(rank i) proportional to
// 1/(i+1)^theta. It is immutable once built and safe to share; each caller brings its own
// random source.
type Generator struct {
	n                         uint64
	theta, alpha, zetan, eta  float64
	halfPowTheta, oneOverTerm float64
}

// New returns a generator over n ranks with skew theta (0 < theta < 1; YCSB's default is 0.99).
// Building it sums n terms.
func New(n uint64, theta float64) (*Generator, error) {
	if n < 2 || !(theta > 0 && theta < 1) {
		return nil, fmt.Errorf("zipf: n=%d theta=%v: need n >= 2 and 0 < theta < 1", n, theta)
	}
	zetan := Zeta(n, theta)
	zeta2 := Zeta(2, theta)
	g := &Generator{
		n:            n,
		theta:        theta,
		alpha:        1 / (1 - theta),
		zetan:        zetan,
		eta:          (1 - math.Pow(2/float64(n), 1-theta)) / (1 - zeta2/zetan),
		halfPowTheta: 1 + math.Pow(0.5, theta),
	}
	return g, nil
}

// Zeta is sum_{i=1..n} 1/i^theta.
func Zeta(n uint64, theta float64) float64 {
	s := 0.0
	for i := uint64(1); i <= n; i++ {
		s += 1 / math.Pow(float64(i), theta)
	}
	return s
}

// N returns the number of ranks.
func (g *Generator) N() uint64 { return g.n }

// Next draws a rank.
func (g *Generator) Next(r *rand.Rand) uint64 {
	u := r.Float64()
	uz := u * g.zetan
	if uz < 1 {
		return 0
	}
	if uz < g.halfPowTheta {
		return 1
	}
	v := uint64(float64(g.n) * math.Pow(g.eta*u-g.eta+1, g.alpha))
	return min(v, g.n-1)
}

// Prob returns the probability of rank i under the exact distribution.
func (g *Generator) Prob(i uint64) float64 {
	return 1 / math.Pow(float64(i+1), g.theta) / g.zetan
}

// Scrambled maps ranks to keys by a bijection of [0, n), so the popular keys are spread over the
// key space (and over the nodes a structure shards keys across) as YCSB's ScrambledZipfian
// does, without merging ranks.
type Scrambled struct {
	g    *Generator
	mult uint64
}

// NewScrambled returns a scrambled generator over n keys with skew theta.
func NewScrambled(n uint64, theta float64) (*Scrambled, error) {
	g, err := New(n, theta)
	if err != nil {
		return nil, err
	}
	m := uint64(0x9e3779b97f4a7c15) % n
	for gcd(m, n) != 1 || m < 2 && n > 2 {
		m++
	}
	return &Scrambled{g: g, mult: m}, nil
}

// Key returns the key of rank i.
func (s *Scrambled) Key(i uint64) uint64 {
	hi, lo := mul64(i, s.mult)
	_, rem := div128(hi, lo, s.g.n)
	return rem
}

// Next draws a key.
func (s *Scrambled) Next(r *rand.Rand) uint64 { return s.Key(s.g.Next(r)) }

// Ranks returns the rank generator.
func (s *Scrambled) Ranks() *Generator { return s.g }

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
