package generator

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
)

// Permuted is a Zipfian over ranks 0..n-1 whose ranks are mapped onto keys 0..n-1 by a fixed
// bijection (Key: rank i to i*m mod n, for a multiplier m coprime to n), so the popular keys
// are spread over the key space, and over the nodes a structure shards keys across, while each
// key keeps exactly one rank's probability: key Key(i) is drawn with the Zipfian's Prob(i)
// (Gray's law, see Zipfian). It is not YCSB's ScrambledZipfian, which draws over 10^10 items
// and folds them onto the keys by a hash, merging ranks. Next never changes it, so one
// Permuted may serve several goroutines, each with its own random source.
type Permuted struct {
	z    *Zipfian
	n    uint64
	mult uint64
}

// NewPermuted returns a Permuted over n keys with skew theta (n >= 2, 0 < theta < 1; YCSB's is
// ZipfianTheta). Building it sums n terms of zeta.
func NewPermuted(n uint64, theta float64) (*Permuted, error) {
	if n < 2 || n > 1<<62 || !(theta > 0 && theta < 1) {
		return nil, fmt.Errorf("generator: permuted Zipfian over %d keys with theta %v: need n >= 2 and 0 < theta < 1", n, theta)
	}
	m := uint64(0x9e3779b97f4a7c15) % n
	for gcd(m, n) != 1 || m < 2 && n > 2 {
		m++
	}
	return &Permuted{z: NewZipfianRange(0, int64(n-1), theta), n: n, mult: m}, nil
}

// Key returns the key of rank i (i < n).
func (p *Permuted) Key(i uint64) uint64 {
	hi, lo := bits.Mul64(i, p.mult)
	_, rem := bits.Div64(hi%p.n, lo, p.n)
	return rem
}

// Next draws a key.
func (p *Permuted) Next(r *rand.Rand) uint64 { return p.Key(uint64(p.z.Next(r))) }

// Prob returns the probability that Next draws key Key(i): the Zipfian's Prob of rank i.
func (p *Permuted) Prob(i uint64) float64 {
	if i >= p.n {
		return 0
	}
	return p.z.Prob(int64(i))
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
