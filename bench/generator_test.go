package bench

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// Sampling tolerances: a count of a binomial(n, p) event is accepted within sigmas standard
// deviations sqrt(n p (1-p)) of n p. With a fixed seed each test is deterministic; 4 sigmas
// would be exceeded by an honest generator about once in 16,000 seeds.
const sigmas = 4

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x5bd1e995)) }

// requireBinomial checks that count of n draws matches probability p within sigmas.
func requireBinomial(t *testing.T, what string, count, n int, p float64) {
	t.Helper()
	exp := float64(n) * p
	sd := math.Sqrt(float64(n) * p * (1 - p))
	t.Logf("%s: %d of %d, expected %.1f ± %.1f (%.2f sd off)", what, count, n, exp, sd, (float64(count)-exp)/sd)
	require.LessOrEqual(t, math.Abs(float64(count)-exp), sigmas*sd,
		"%s: %d of %d draws, expected %.1f (sd %.1f)", what, count, n, exp, sd)
}

// binomialOff reports how many standard deviations count is from n p.
func binomialOff(count, n int, p float64) float64 {
	return math.Abs(float64(count)-float64(n)*p) / math.Sqrt(float64(n)*p*(1-p))
}

// chiSquareCritical returns the chi-square quantile for p = 0.001 (Wilson-Hilferty's
// approximation past 4 degrees of freedom, within 1% there).
func chiSquareCritical(df int) float64 {
	if df >= 1 && df <= 4 {
		return [...]float64{10.828, 13.816, 16.266, 18.467}[df-1] // exact, from tables
	}
	const z = 3.0902 // standard normal quantile of 0.999
	k := float64(df)
	a := 2 / (9 * k)
	return k * math.Pow(1-a+z*math.Sqrt(a), 3)
}

func chiSquare(counts []int, probs []float64) float64 {
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

// gensPMF returns the exact probability with which Gray's algorithm, as Zipfian implements it,
// draws each of the items 0..h-1 over n items with the given zeta, and the probability of an
// item >= h. Items 0 and 1 come from the explicit cases; the rest from inverting
// n*(eta*u-eta+1)^alpha >= i for u in [(1+0.5^theta)/zeta, 1).
func grayPMF(n int64, theta, zetan float64, h int) (pmf []float64, tail float64) {
	zeta2 := Zeta(2, theta)
	eta := (1 - math.Pow(2/float64(n), 1-theta)) / (1 - zeta2/zetan)
	uT := (1 + math.Pow(0.5, theta)) / zetan
	// atLeast(i) is the probability that the formula branch yields an item >= i.
	atLeast := func(i int64) float64 {
		ui := (math.Pow(float64(i)/float64(n), 1-theta) - 1 + eta) / eta
		return 1 - max(uT, min(ui, 1))
	}
	pmf = make([]float64, h)
	for i := range int64(h) {
		pmf[i] = atLeast(i) - atLeast(i+1)
	}
	pmf[0] += 1 / zetan
	pmf[1] += math.Pow(0.5, theta) / zetan
	return pmf, atLeast(int64(h))
}

func TestZetaIncremental(t *testing.T) {
	require.InDelta(t, 1+math.Pow(0.5, 0.99), Zeta(2, 0.99), 1e-15)
	// Extending from 1000 to 5000 items sums the same terms as from scratch.
	require.InEpsilon(t, Zeta(5000, 0.99), zetaFrom(1000, 5000, 0.99, Zeta(1000, 0.99)), 1e-13)
}

// YCSB's precomputed zeta for its scrambled space is zeta(10^10, 0.99): the head summed
// directly, the tail from 10^6 to 10^10 by Euler-Maclaurin (integral, half the end terms and
// the first derivative correction; the next term is below 1e-20).
func TestScrambledZetaConstant(t *testing.T) {
	const theta = 0.99
	const m = 1_000_000
	n := float64(ScrambledItemCount)
	f := func(x float64) float64 { return math.Pow(x, -theta) }
	df := func(x float64) float64 { return -theta * math.Pow(x, -theta-1) }
	tail := (math.Pow(n, 1-theta)-math.Pow(m, 1-theta))/(1-theta) + (f(n)-f(m))/2 + (df(n)-df(m))/12
	got := Zeta(m, theta) + tail
	t.Logf("zeta(1e10, 0.99) = %.12f, YCSB's constant %.12f", got, ScrambledZeta)
	require.InEpsilon(t, ScrambledZeta, got, 1e-9)
	// A space of 10^16 items (a later YCSB's ITEM_COUNT) would need a different zeta.
	n16 := 1e16
	require.Greater(t, Zeta(m, theta)+(math.Pow(n16, 1-theta)-math.Pow(m, 1-theta))/(1-theta), 40.0)
}

// Zipfian(n)'s most popular item is drawn with probability 1/zeta(n, 0.99) exactly (Gray's
// explicit first case), the second with 0.5^0.99/zeta(n): checked within 4 binomial sigmas.
func TestZipfianTopKeyShare(t *testing.T) {
	const n, draws = 1000, 400_000
	z := NewZipfian(n)
	r := newRand(1)
	counts := make([]int, n)
	for range draws {
		v := z.Next(r)
		require.True(t, v >= 0 && v < n, "draw %d outside [0, %d)", v, n)
		counts[v]++
	}
	zeta := Zeta(n, ZipfianTheta)
	requireBinomial(t, "item 0", counts[0], draws, 1/zeta)
	requireBinomial(t, "item 1", counts[1], draws, math.Pow(0.5, ZipfianTheta)/zeta)
	// The test can tell: a Zipfian of theta 0.9, or a share computed over 2000 items, is far
	// outside the tolerance.
	require.Greater(t, binomialOff(counts[0], draws, 1/Zeta(n, 0.9)), 10.0)
	require.Greater(t, binomialOff(counts[0], draws, 1/Zeta(2*n, ZipfianTheta)), 10.0)

	// The head follows Gray's algorithm exactly (chi-square over items 0..19 and the rest).
	pmf, tail := grayPMF(n, ZipfianTheta, zeta, 20)
	obs := append(counts[:20:20], 0)
	for _, c := range counts[20:] {
		obs[20] += c
	}
	x := chiSquare(obs, append(pmf, tail))
	t.Logf("chi-square of the head: %.1f (critical %.1f)", x, chiSquareCritical(20))
	require.Less(t, x, chiSquareCritical(20))
	// Gray's closed form is an approximation past item 1 (item 2 is drawn 17% more often than
	// a true Zipfian's 1/3^0.99/zeta would be), but the mass of the first k items is within 5%
	// of the true Zipfian's, in the algorithm and in the draws.
	full, _ := grayPMF(n, ZipfianTheta, zeta, n)
	for _, k := range []int{3, 10, 100, 500} {
		gray, truth, drawn := 0.0, 0.0, 0
		for i := range k {
			gray += full[i]
			truth += math.Pow(float64(i+1), -ZipfianTheta) / zeta
			drawn += counts[i]
		}
		require.InEpsilon(t, truth, gray, 0.05, "first %d items", k)
		requireBinomial(t, fmt.Sprintf("first %d items", k), drawn, draws, gray)
	}
}

// NextN with a larger item count extends zeta incrementally, as YCSB's nextLong(itemcount)
// does, and the top share follows: 1/zeta(new n).
func TestZipfianGrows(t *testing.T) {
	z := NewZipfian(1000)
	r := newRand(2)
	const n2, draws = 5000, 300_000
	top := 0
	for range draws {
		v := z.NextN(r, n2)
		require.True(t, v >= 0 && v < n2)
		if v == 0 {
			top++
		}
	}
	zn, count := z.Zeta()
	require.Equal(t, int64(n2), count)
	require.InEpsilon(t, Zeta(n2, ZipfianTheta), zn, 1e-12)
	requireBinomial(t, "item 0 over 5000", top, draws, 1/Zeta(n2, ZipfianTheta))
	// A smaller count keeps the larger zeta (YCSB's allowitemcountdecrease=false) but stays in range.
	for range 1000 {
		require.Less(t, z.NextN(r, 10), int64(10))
	}
	zn2, count2 := z.Zeta()
	require.Equal(t, zn, zn2)
	require.Equal(t, int64(n2), count2)
	// A range that does not start at 0.
	zr := NewZipfianRange(10, 19, ZipfianTheta)
	for range 1000 {
		v := zr.Next(r)
		require.True(t, v >= 10 && v <= 19)
	}
}

// FNVHash64 is FNV-1a over the 8 little-endian bytes, as an absolute value: checked against
// the standard library's FNV-1a.
func TestFNVHash64(t *testing.T) {
	r := newRand(3)
	for i := range 10000 {
		v := int64(i)
		if i >= 100 {
			v = int64(r.Uint64())
		}
		h := fnv.New64a()
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], uint64(v))
		h.Write(b[:])
		want := int64(h.Sum64())
		if want < 0 {
			want = -want
		}
		require.Equal(t, want, FNVHash64(v), "v=%d", v)
	}
	// YCSB's first key: users of YCSB will recognise it.
	require.Equal(t, "user6284781860667377211", KeyName(0, 1, false))
	require.Equal(t, "user0000000042", KeyName(42, 10, true))
	require.Equal(t, "user42", KeyName(42, 1, true))
	require.Equal(t, foldHash(-7, 5), int64(3)) // the one negative hash YCSB could see, kept in range
}

// ScrambledZipfian's hottest key is min + FNVHash64(0) mod n, and its frequency is what YCSB's
// folding gives: the large space's item 0 (1/ScrambledZeta) plus every other item of that space
// that folds onto the same key. The head (the first 2 million items of 10^10+1) is summed item
// by item from Gray's algorithm; the tail's mass, spread by the hash over the n keys, adds
// tail/n.
func TestScrambledZipfianTopKey(t *testing.T) {
	const n, draws = 1000, 2_000_000
	const head = 2_000_000
	s := NewScrambledZipfian(0, n-1)
	r := newRand(4)
	counts := make([]int, n)
	for range draws {
		v := s.Next(r)
		require.True(t, v >= 0 && v < n)
		counts[v]++
	}
	hot := foldHash(FNVHash64(0), n)
	best := 0
	for k := range counts {
		if counts[k] > counts[best] {
			best = k
		}
	}
	require.Equal(t, hot, int64(best), "the hottest key is the fold of the large space's item 0")

	pmf, tail := grayPMF(ScrambledItemCount+1, ZipfianTheta, ScrambledZeta, head)
	p := tail / n
	for i, q := range pmf {
		if foldHash(FNVHash64(int64(i)), n) == hot {
			p += q
		}
	}
	t.Logf("hot key %d: YCSB's folding gives %.5f (1/zeta alone %.5f, tail %.3f)", hot, p, 1/ScrambledZeta, tail)
	requireBinomial(t, "hot key", counts[hot], draws, p)
	// The folding matters: item 0's share alone is rejected.
	require.Greater(t, binomialOff(counts[hot], draws, 1/ScrambledZeta), 6.0)

	// A range that does not start at 0 is the same draw shifted.
	s2 := NewScrambledZipfian(1000, 1000+n-1)
	r1, r2 := newRand(5), newRand(5)
	for range 1000 {
		require.Equal(t, s.Next(r1)+1000, s2.Next(r2))
	}
}

// Latest favours the newest acknowledged insert with share 1/zeta(inserted), and follows
// inserts as they are acknowledged, its zeta growing incrementally.
func TestLatest(t *testing.T) {
	c := NewAckCounter(1000)
	for i := range int64(1000) {
		c.Ack(i) // below the start: already acknowledged, a no-op
	}
	require.Equal(t, int64(999), c.Last())
	l := NewLatest(c)
	r := newRand(6)
	const draws = 300_000
	count := func(n int64) []int {
		counts := make([]int, n)
		for range draws {
			v := l.Next(r)
			require.True(t, v >= 0 && v < n, "draw %d outside [0, %d)", v, n)
			counts[v]++
		}
		return counts
	}
	c1 := count(1000)
	requireBinomial(t, "newest of 1000", c1[999], draws, 1/Zeta(1000, ZipfianTheta))
	requireBinomial(t, "second newest of 1000", c1[998], draws, math.Pow(0.5, ZipfianTheta)/Zeta(1000, ZipfianTheta))

	for range 500 {
		c.Ack(c.Next())
	}
	require.Equal(t, int64(1499), c.Last())
	c2 := count(1500)
	requireBinomial(t, "newest of 1500", c2[1499], draws, 1/Zeta(1500, ZipfianTheta))
	zn, cnt := l.z.Zeta()
	require.Equal(t, int64(1500), cnt)
	require.InEpsilon(t, Zeta(1500, ZipfianTheta), zn, 1e-12)
	// The old newest key is now rank 501: rarely drawn.
	require.Less(t, c2[999], draws/1000)
}

// Hotspot sends hotspotopnfraction of the draws to the first hotspotdatafraction of the range,
// uniformly within each set.
func TestHotspot(t *testing.T) {
	const n, draws = 1000, 400_000
	h := NewHotspot(100, 100+n-1, 0.2, 0.8)
	lo, size := h.HotSet()
	require.Equal(t, int64(100), lo)
	require.Equal(t, int64(200), size)
	r := newRand(7)
	counts := make([]int, n)
	for range draws {
		v := h.Next(r)
		require.True(t, v >= 100 && v < 100+n)
		counts[v-100]++
	}
	hot := 0
	for _, c := range counts[:200] {
		hot += c
	}
	requireBinomial(t, "hot set", hot, draws, 0.8)
	uniformWithin := func(cs []int) {
		probs := make([]float64, len(cs))
		for i := range probs {
			probs[i] = 1 / float64(len(cs))
		}
		x := chiSquare(cs, probs)
		require.Less(t, x, chiSquareCritical(len(cs)-1))
	}
	uniformWithin(counts[:200])
	uniformWithin(counts[200:])
	// Degenerate sets: everything goes to the non-empty one.
	all := NewHotspot(0, 9, 0, 0.8)
	for range 100 {
		require.Less(t, all.Next(r), int64(10))
	}
	allHot := NewHotspot(0, 9, 1, 0.5)
	for range 100 {
		require.Less(t, allHot.Next(r), int64(10))
	}
}

func TestUniform(t *testing.T) {
	const draws = 200_000
	u := NewUniform(-5, 94)
	r := newRand(8)
	counts := make([]int, 100)
	for range draws {
		v := u.Next(r)
		require.True(t, v >= -5 && v <= 94)
		counts[v+5]++
	}
	probs := make([]float64, 100)
	for i := range probs {
		probs[i] = 0.01
	}
	x := chiSquare(counts, probs)
	require.Less(t, x, chiSquareCritical(99))
	// The chi-square test can tell a skewed generator.
	z := NewZipfian(100)
	for i := range counts {
		counts[i] = 0
	}
	for range draws {
		counts[z.Next(r)]++
	}
	require.Greater(t, chiSquare(counts, probs), 10*chiSquareCritical(99))
}

func TestAckCounter(t *testing.T) {
	c := NewAckCounter(10)
	require.Equal(t, int64(9), c.Last())
	a, b, d := c.Next(), c.Next(), c.Next()
	require.Equal(t, []int64{10, 11, 12}, []int64{a, b, d})
	c.Ack(12)
	c.Ack(11)
	require.Equal(t, int64(9), c.Last(), "10 is not acknowledged yet")
	c.Ack(10)
	require.Equal(t, int64(12), c.Last())
	require.Empty(t, c.pending)

	// Concurrent inserters: at the end every number is acknowledged.
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				c.Ack(c.Next())
			}
		}()
	}
	wg.Wait()
	require.Equal(t, int64(12+8000), c.Last())
	require.Equal(t, c.issued(), c.Last()+1)
}
