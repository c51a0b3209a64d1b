package generator

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/internal/stattest"
)

// head returns z's Prob of items 0..h-1 and the probability of an item >= h.
func head(z *Zipfian, h int) (pmf []float64, tail float64) {
	pmf = make([]float64, h)
	tail = 1
	for i := range pmf {
		pmf[i] = z.Prob(int64(i))
		tail -= pmf[i]
	}
	return pmf, tail
}

// zipf is Zipf's law: the probability of rank i over the n ranks whose zeta(n) is zn.
func zipf(i int64, zn, theta float64) float64 { return math.Pow(float64(i+1), -theta) / zn }

// TestZipfianProb: Prob is the law the package doc states: Zipf's for ranks 0 and 1, the
// closed form past them (checked here against the doc's formula, a different computation from
// Prob's inversion of the draw), summing to 1; and it is not Zipf's law past rank 1, by the
// amounts the doc says.
func TestZipfianProb(t *testing.T) {
	for _, n := range []int64{2, 3, 1000, 1 << 17} {
		z := NewZipfian(n)
		zn := Zeta(n, ZipfianTheta)
		eta := (1 - math.Pow(2/float64(n), 1-ZipfianTheta)) / (1 - Zeta(2, ZipfianTheta)/zn)
		sum := 0.0
		for i := range n {
			p := z.Prob(i)
			sum += p
			switch {
			case i < 2:
				require.InEpsilon(t, zipf(i, zn, ZipfianTheta), p, 1e-12, "n=%d rank %d", n, i)
			case i < 2000:
				want := (math.Pow(float64(i+1), 1-ZipfianTheta) - math.Pow(float64(i), 1-ZipfianTheta)) / (math.Pow(float64(n), 1-ZipfianTheta) * eta)
				require.InEpsilon(t, want, p, 1e-9, "n=%d rank %d", n, i)
			}
		}
		require.InDelta(t, 1, sum, 1e-9, "n=%d", n)
		require.Zero(t, z.Prob(-1))
		require.Zero(t, z.Prob(n))
	}
	for _, c := range []struct {
		n        int64
		rank2    float64 // Gray's over Zipf's at rank 2
		firstTen float64 // the same for the mass of ranks 0..9
	}{{1000, 1.171, 1.042}, {1 << 20, 1.194, 1.052}} {
		z := NewZipfian(c.n)
		zn, _ := z.Zeta()
		require.InDelta(t, c.rank2, z.Prob(2)/zipf(2, zn, ZipfianTheta), 0.001, "n=%d", c.n)
		gray, truth := 0.0, 0.0
		for i := range int64(10) {
			gray += z.Prob(i)
			truth += zipf(i, zn, ZipfianTheta)
		}
		require.InDelta(t, c.firstTen, gray/truth, 0.001, "n=%d", c.n)
	}
	// The hottest of a million keys takes about 6.5%.
	require.InDelta(t, 0.065, NewZipfian(1_000_000).Prob(0), 0.001)
	// One item: always item 0.
	require.Equal(t, 1.0, NewZipfian(1).Prob(0))
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
	r := stattest.NewRand(1)
	counts := make([]int, n)
	for range draws {
		v := z.Next(r)
		if v < 0 || v >= n {
			t.Fatalf("draw %d outside [0, %d)", v, n)
		}
		counts[v]++
	}
	zeta := Zeta(n, ZipfianTheta)
	stattest.RequireBinomial(t, "item 0", counts[0], draws, 1/zeta)
	stattest.RequireBinomial(t, "item 1", counts[1], draws, math.Pow(0.5, ZipfianTheta)/zeta)
	// The test can tell: a Zipfian of theta 0.9, or a share computed over 2000 items, is far
	// outside the tolerance.
	require.Greater(t, stattest.BinomialOff(counts[0], draws, 1/Zeta(n, 0.9)), 10.0)
	require.Greater(t, stattest.BinomialOff(counts[0], draws, 1/Zeta(2*n, ZipfianTheta)), 10.0)

	// The head follows Prob, Gray's law (chi-square over items 0..19 and the rest).
	pmf, tail := head(z, 20)
	obs := append(counts[:20:20], 0)
	for _, c := range counts[20:] {
		obs[20] += c
	}
	x := stattest.ChiSquare(obs, append(pmf, tail))
	t.Logf("chi-square of the head: %.1f (critical %.1f)", x, stattest.ChiSquareCritical(20))
	require.Less(t, x, stattest.ChiSquareCritical(20))
	// Gray's law is not Zipf's past item 1 (item 2 is drawn 17% more often than Zipf's
	// 1/3^0.99/zeta), and the draws can tell: Zipf's law for the head is rejected.
	zpmf := make([]float64, 21)
	zpmf[20] = 1
	for i := range 20 {
		zpmf[i] = zipf(int64(i), zeta, ZipfianTheta)
		zpmf[20] -= zpmf[i]
	}
	require.Greater(t, stattest.ChiSquare(obs, zpmf), stattest.ChiSquareCritical(20))
	// The mass of the first k items is within 5% of Zipf's, in the law and in the draws.
	full, _ := head(z, n)
	for _, k := range []int{3, 10, 100, 500} {
		gray, truth, drawn := 0.0, 0.0, 0
		for i := range k {
			gray += full[i]
			truth += math.Pow(float64(i+1), -ZipfianTheta) / zeta
			drawn += counts[i]
		}
		require.InEpsilon(t, truth, gray, 0.05, "first %d items", k)
		stattest.RequireBinomial(t, fmt.Sprintf("first %d items", k), drawn, draws, gray)
	}
}

// NextN with a larger item count extends zeta incrementally, as YCSB's nextLong(itemcount)
// does, and the top share follows: 1/zeta(new n).
func TestZipfianGrows(t *testing.T) {
	z := NewZipfian(1000)
	r := stattest.NewRand(2)
	const n2, draws = 5000, 300_000
	top := 0
	for range draws {
		v := z.NextN(r, n2)
		if v < 0 || v >= n2 {
			t.Fatalf("draw %d outside [0, %d)", v, n2)
		}
		if v == 0 {
			top++
		}
	}
	zn, count := z.Zeta()
	require.Equal(t, int64(n2), count)
	require.InEpsilon(t, Zeta(n2, ZipfianTheta), zn, 1e-12)
	stattest.RequireBinomial(t, "item 0 over 5000", top, draws, 1/Zeta(n2, ZipfianTheta))
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
	r := stattest.NewRand(3)
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
	const items = 2_000_000
	s := NewScrambledZipfian(0, n-1)
	r := stattest.NewRand(4)
	counts := make([]int, n)
	for range draws {
		v := s.Next(r)
		if v < 0 || v >= n {
			t.Fatalf("draw %d outside [0, %d)", v, n)
		}
		counts[v]++
	}
	hot := s.Fold(0)
	require.Equal(t, foldHash(FNVHash64(0), n), hot)
	best := 0
	for k := range counts {
		if counts[k] > counts[best] {
			best = k
		}
	}
	require.Equal(t, hot, int64(best), "the hottest key is the fold of the large space's item 0")

	pmf, tail := head(NewZipfianZeta(0, ScrambledItemCount, ZipfianTheta, ScrambledZeta), items)
	p := tail / n
	for i, q := range pmf {
		if s.Fold(int64(i)) == hot {
			p += q
		}
	}
	t.Logf("hot key %d: YCSB's folding gives %.5f (1/zeta alone %.5f, tail %.3f)", hot, p, 1/ScrambledZeta, tail)
	stattest.RequireBinomial(t, "hot key", counts[hot], draws, p)
	// The folding matters: item 0's share alone is rejected.
	require.Greater(t, stattest.BinomialOff(counts[hot], draws, 1/ScrambledZeta), 6.0)

	// A range that does not start at 0 is the same draw shifted.
	s2 := NewScrambledZipfian(1000, 1000+n-1)
	r1, r2 := stattest.NewRand(5), stattest.NewRand(5)
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
	r := stattest.NewRand(6)
	const draws = 300_000
	count := func(n int64) []int {
		counts := make([]int, n)
		for range draws {
			v := l.Next(r)
			if v < 0 || v >= n {
				t.Fatalf("draw %d outside [0, %d)", v, n)
			}
			counts[v]++
		}
		return counts
	}
	c1 := count(1000)
	stattest.RequireBinomial(t, "newest of 1000", c1[999], draws, 1/Zeta(1000, ZipfianTheta))
	stattest.RequireBinomial(t, "second newest of 1000", c1[998], draws, math.Pow(0.5, ZipfianTheta)/Zeta(1000, ZipfianTheta))

	for range 500 {
		c.Ack(c.Next())
	}
	require.Equal(t, int64(1499), c.Last())
	c2 := count(1500)
	stattest.RequireBinomial(t, "newest of 1500", c2[1499], draws, 1/Zeta(1500, ZipfianTheta))
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
	r := stattest.NewRand(7)
	counts := make([]int, n)
	for range draws {
		v := h.Next(r)
		if v < 100 || v >= 100+n {
			t.Fatalf("draw %d outside [100, %d)", v, 100+n)
		}
		counts[v-100]++
	}
	hot := 0
	for _, c := range counts[:200] {
		hot += c
	}
	stattest.RequireBinomial(t, "hot set", hot, draws, 0.8)
	uniformWithin := func(cs []int) {
		probs := make([]float64, len(cs))
		for i := range probs {
			probs[i] = 1 / float64(len(cs))
		}
		x := stattest.ChiSquare(cs, probs)
		require.Less(t, x, stattest.ChiSquareCritical(len(cs)-1))
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
	r := stattest.NewRand(8)
	counts := make([]int, 100)
	for range draws {
		v := u.Next(r)
		if v < -5 || v > 94 {
			t.Fatalf("draw %d outside [-5, 94]", v)
		}
		counts[v+5]++
	}
	probs := make([]float64, 100)
	for i := range probs {
		probs[i] = 0.01
	}
	x := stattest.ChiSquare(counts, probs)
	require.Less(t, x, stattest.ChiSquareCritical(99))
	// The chi-square test can tell a skewed generator.
	z := NewZipfian(100)
	for i := range counts {
		counts[i] = 0
	}
	for range draws {
		counts[z.Next(r)]++
	}
	require.Greater(t, stattest.ChiSquare(counts, probs), 10*stattest.ChiSquareCritical(99))
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
