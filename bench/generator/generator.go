package generator

import (
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
)

// Generator draws item numbers. Every generator of this package takes its randomness from the
// *rand.Rand passed to Next, so a run on the simulator (whose clients have seeded sources) is
// a function of its seed. A generator is for one goroutine; the stateful ones (Zipfian,
// ScrambledZipfian, Latest) have a Clone for another.
type Generator interface {
	Next(r *rand.Rand) int64
}

// ZipfianTheta is YCSB's Zipfian constant.
const ZipfianTheta = 0.99

// YCSB's ScrambledZipfianGenerator draws from a Zipfian over a large item space whose zeta it
// precomputed, then folds the draw into the caller's range with an FNV hash.
const (
	// ScrambledItemCount is YCSB's ITEM_COUNT: the underlying generator is constructed over
	// 0..ScrambledItemCount inclusive, that is ScrambledItemCount+1 items.
	ScrambledItemCount = 10_000_000_000
	// ScrambledZeta is YCSB's precomputed zeta(ScrambledItemCount, 0.99).
	ScrambledZeta = 26.46902820178302
)

// Zeta returns zeta(n, theta) = sum over i in 1..n of 1/i^theta, summed in YCSB's order.
func Zeta(n int64, theta float64) float64 { return zetaFrom(0, n, theta, 0) }

// zetaFrom extends sum, the zeta of st items, to n items (YCSB's incremental zetastatic).
func zetaFrom(st, n int64, theta, sum float64) float64 {
	for i := st; i < n; i++ {
		sum += 1 / math.Pow(float64(i+1), theta)
	}
	return sum
}

// Zipfian is YCSB's ZipfianGenerator (Gray et al., "Quickly generating billion-record
// synthetic databases", SIGMOD 1994): item base is the most popular, base+1 the next, and so on.
// Its draws follow Gray's law, which is Zipf's only at the top: over n items with skew theta,
// rank i (item base+i) is drawn with probability
//
//	i = 0:       1 / zeta(n)                                       (Zipf's)
//	i = 1:       0.5^theta / zeta(n)                               (Zipf's)
//	2 <= i < n:  ((i+1)^(1-theta) - i^(1-theta)) / (n^(1-theta) * eta),
//	             eta = (1 - (2/n)^(1-theta)) / (1 - zeta(2)/zeta(n))
//
// The ranks from 2 up get, together, Zipf's mass 1 - zeta(2)/zeta(n), spread by the density
// (1-theta) x^-theta rather than by Zipf's 1/(i+1)^theta: at theta 0.99 rank 2 is drawn about
// 17% (n = 1000) to 19% (n = 2^20) more often than Zipf's law says, rank 3 11-13%, rank 10
// 1-3%, ranks past about 100 1-3% less; the mass of the first k ranks stays within about 5% of
// Zipf's. Prob returns this law, not Zipf's.
//
// NextN(r, n) draws over a larger item count n the way YCSB's nextLong(itemcount) does: zeta
// is extended incrementally from the count it was last computed for (so a growing table costs
// only the new terms), and a smaller n keeps the larger zeta (YCSB's allowitemcountdecrease =
// false). One deliberate difference: YCSB recomputes eta with the item count of construction;
// this one uses the current count, as Gray's formula means, so the tail stays Gray's law over n.
//
// Next and Prob do not change the generator (only NextN with a larger count does), so one
// Zipfian may serve goroutines that only call Next, each with its own random source.
type Zipfian struct {
	base  int64
	items int64 // item count of construction
	count int64 // item count zetan was computed for (YCSB's countforzeta)
	theta float64
	alpha float64
	zetan float64
	zeta2 float64
	half  float64 // 0.5^theta
	eta   float64
}

// NewZipfian returns a Zipfian over 0..n-1 with theta 0.99, computing zeta(n) (O(n): about a
// second per 50 million items). It panics if n < 1.
func NewZipfian(n int64) *Zipfian { return NewZipfianRange(0, n-1, ZipfianTheta) }

// NewZipfianRange returns a Zipfian over min..max inclusive with the given theta (0 < theta < 1).
// It panics if max < min or theta is outside (0, 1).
func NewZipfianRange(min, max int64, theta float64) *Zipfian {
	if max < min {
		panic("generator: Zipfian over an empty range")
	}
	return NewZipfianZeta(min, max, theta, Zeta(max-min+1, theta))
}

// NewZipfianZeta is NewZipfianRange with zeta(max-min+1, theta) given (YCSB's constructor with a
// precomputed zetan, used for its large scrambled space).
func NewZipfianZeta(min, max int64, theta, zetan float64) *Zipfian {
	if max < min || max-min+1 <= 0 {
		panic("generator: Zipfian over an empty range")
	}
	if !(theta > 0 && theta < 1) {
		panic("generator: Zipfian theta must be in (0, 1)")
	}
	z := &Zipfian{
		base:  min,
		items: max - min + 1,
		theta: theta,
		alpha: 1 / (1 - theta),
		zetan: zetan,
		zeta2: Zeta(2, theta),
		half:  math.Pow(0.5, theta),
	}
	z.count = z.items
	z.eta = z.etaFor(z.items)
	return z
}

func (z *Zipfian) etaFor(n int64) float64 {
	return (1 - math.Pow(2/float64(n), 1-z.theta)) / (1 - z.zeta2/z.zetan)
}

// Next draws over the item count of construction.
func (z *Zipfian) Next(r *rand.Rand) int64 { return z.NextN(r, z.items) }

// NextN draws over base..base+n-1, extending zeta incrementally when n grew (see Zipfian).
func (z *Zipfian) NextN(r *rand.Rand, n int64) int64 {
	if n < 1 {
		n = 1
	}
	if n > z.count {
		z.zetan = zetaFrom(z.count, n, z.theta, z.zetan)
		z.count = n
		z.eta = z.etaFor(n)
	}
	u := r.Float64()
	uz := u * z.zetan
	if uz < 1 {
		return z.base
	}
	if uz < 1+z.half {
		return z.base + 1
	}
	v := int64(float64(n) * math.Pow(z.eta*u-z.eta+1, z.alpha))
	// Rounding in Pow can reach n itself; YCSB would return it, one past its range.
	return z.base + min(max(v, 0), n-1)
}

// Prob returns the probability that Next draws item base+i, with the generator's current zeta
// and eta: Gray's law (see Zipfian), computed from the draw's formula, 0 outside the range.
func (z *Zipfian) Prob(i int64) float64 {
	n := z.items
	if i < 0 || i >= n {
		return 0
	}
	p := z.atLeast(i, n) - z.atLeast(i+1, n)
	switch i {
	case 0:
		p += 1 / z.zetan
	case 1:
		p += z.half / z.zetan
	}
	return p
}

// atLeast is the probability that a draw over n items takes the formula's branch (u at least
// (1+0.5^theta)/zeta) and yields an item >= i: n*(eta*u-eta+1)^alpha >= i inverted for u.
func (z *Zipfian) atLeast(i, n int64) float64 {
	uT := (1 + z.half) / z.zetan
	if uT >= 1 {
		return 0 // two items or fewer: the explicit cases take every draw (and eta is 0/0)
	}
	ui := (math.Pow(float64(i)/float64(n), 1-z.theta) - 1 + z.eta) / z.eta
	return 1 - min(1, max(uT, ui))
}

// Zeta returns the zeta the generator currently draws with, and the item count it is for.
func (z *Zipfian) Zeta() (zetan float64, count int64) { return z.zetan, z.count }

// Clone returns a copy with its own state (for another goroutine).
func (z *Zipfian) Clone() *Zipfian { c := *z; return &c }

// ScrambledZipfian is YCSB's ScrambledZipfianGenerator: a Zipfian over YCSB's large item space
// (0..ScrambledItemCount, zeta precomputed as ScrambledZeta) whose draw is folded into
// min..max by FNVHash64(draw) mod (max-min+1) (Fold). The popular items are scattered over the
// range, and the hottest key is Fold(0), drawn with probability a little above 1/ScrambledZeta:
// a key's probability is the sum of Gray's law (see Zipfian) over every large-space item that
// folds onto it, so the law over keys is not Zipf's, nor Gray's, and depends on the hash.
type ScrambledZipfian struct {
	min, n int64
	z      *Zipfian
}

// NewScrambledZipfian returns a ScrambledZipfian over min..max inclusive. It panics if max < min.
func NewScrambledZipfian(min, max int64) *ScrambledZipfian {
	if max < min || max-min+1 <= 0 {
		panic("generator: ScrambledZipfian over an empty range")
	}
	return &ScrambledZipfian{min: min, n: max - min + 1,
		z: NewZipfianZeta(0, ScrambledItemCount, ZipfianTheta, ScrambledZeta)}
}

// Next draws one item.
func (s *ScrambledZipfian) Next(r *rand.Rand) int64 { return s.Fold(s.z.Next(r)) }

// Fold returns the key a draw of item (of the large space) becomes.
func (s *ScrambledZipfian) Fold(item int64) int64 { return s.min + foldHash(FNVHash64(item), s.n) }

// Clone returns a copy with its own state.
func (s *ScrambledZipfian) Clone() *ScrambledZipfian {
	c := *s
	c.z = s.z.Clone()
	return &c
}

// foldHash is YCSB's fnvhash64(v) % n. Java's Math.abs leaves Long.MIN_VALUE negative, and so
// does Go; YCSB would then return a key below its range, this returns it wrapped into range.
func foldHash(h, n int64) int64 {
	v := h % n
	if v < 0 {
		v += n
	}
	return v
}

// FNVHash64 is YCSB's Utils.fnvhash64: FNV-1a over the 8 little-endian bytes of v, then the
// absolute value as a signed 64-bit number (math.MinInt64 stays negative, as in Java).
func FNVHash64(v int64) int64 {
	const (
		offset = 0xCBF29CE484222325
		prime  = 1099511628211
	)
	h := uint64(offset)
	u := uint64(v)
	for range 8 {
		h ^= u & 0xff
		u >>= 8
		h *= prime
	}
	s := int64(h)
	if s < 0 {
		s = -s
	}
	return s
}

// Uniform draws uniformly from min..max inclusive.
type Uniform struct{ min, n int64 }

// NewUniform returns a uniform generator over min..max inclusive. It panics if max < min.
func NewUniform(min, max int64) *Uniform {
	if max < min || max-min+1 <= 0 {
		panic("generator: Uniform over an empty range")
	}
	return &Uniform{min: min, n: max - min + 1}
}

// Next draws one item.
func (u *Uniform) Next(r *rand.Rand) int64 { return u.min + r.Int64N(u.n) }

// Hotspot is YCSB's HotspotIntegerGenerator: the first hotFraction of lower..upper (rounded
// down, as YCSB does) is the hot set and receives hotOpFraction of the draws, uniformly; the
// rest of the range receives the others, uniformly. Where rounding leaves one set empty, every
// draw goes to the other (YCSB would divide by zero).
type Hotspot struct {
	lower, hot, cold int64
	hotOp            float64
}

// NewHotspot returns a hotspot generator over lower..upper inclusive. It panics if upper <
// lower or a fraction is outside [0, 1].
func NewHotspot(lower, upper int64, hotFraction, hotOpFraction float64) *Hotspot {
	if upper < lower || upper-lower+1 <= 0 {
		panic("generator: Hotspot over an empty range")
	}
	if !(hotFraction >= 0 && hotFraction <= 1 && hotOpFraction >= 0 && hotOpFraction <= 1) {
		panic("generator: Hotspot fraction outside [0, 1]")
	}
	n := upper - lower + 1
	hot := int64(float64(n) * hotFraction)
	return &Hotspot{lower: lower, hot: hot, cold: n - hot, hotOp: hotOpFraction}
}

// HotSet returns the hot set as lower..lower+size-1.
func (h *Hotspot) HotSet() (lower, size int64) { return h.lower, h.hot }

// Next draws one item.
func (h *Hotspot) Next(r *rand.Rand) int64 {
	if h.cold == 0 || (h.hot > 0 && r.Float64() < h.hotOp) {
		return h.lower + r.Int64N(h.hot)
	}
	return h.lower + h.hot + r.Int64N(h.cold)
}

// Latest is YCSB's SkewedLatestGenerator: a Zipfian over the items inserted so far, counted
// back from the most recently acknowledged insert, so the newest key is the most popular and
// popularity follows inserts as they happen. Its Zipfian grows incrementally with the insert
// count. YCSB draws over last items and so never returns item 0; this draws over last+1 items,
// 0..last.
type Latest struct {
	c *AckCounter
	z *Zipfian
}

// NewLatest returns a Latest over c's acknowledged items (computing zeta over them once). c
// must have acknowledged at least item 0 (Last() >= 0); until then Next returns 0.
func NewLatest(c *AckCounter) *Latest {
	return &Latest{c: c, z: NewZipfian(max(c.Last()+1, 1))}
}

// Next draws one item.
func (l *Latest) Next(r *rand.Rand) int64 {
	last := l.c.Last()
	if last < 0 {
		return 0
	}
	return last - l.z.NextN(r, last+1)
}

// Clone returns a copy with its own Zipfian state over the same counter.
func (l *Latest) Clone() *Latest { return &Latest{c: l.c, z: l.z.Clone()} }

// AckCounter is YCSB's AcknowledgedCounterGenerator: Next hands out insert numbers in order;
// Last is the highest number below which every number has been acknowledged, so readers never
// choose a key whose insert has not finished. It is safe for concurrent use (and for the
// simulator: its lock is never held across anything that waits).
type AckCounter struct {
	next    atomic.Int64
	limit   atomic.Int64
	mu      sync.Mutex
	pending map[int64]struct{}
}

// NewAckCounter returns a counter whose first Next is start and whose Last is start-1.
func NewAckCounter(start int64) *AckCounter {
	c := &AckCounter{pending: make(map[int64]struct{})}
	c.next.Store(start)
	c.limit.Store(start - 1)
	return c
}

// Next returns the next number.
func (c *AckCounter) Next() int64 { return c.next.Add(1) - 1 }

// Ack acknowledges v, a number Next returned.
func (c *AckCounter) Ack(v int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	limit := c.limit.Load()
	if v <= limit {
		return
	}
	c.pending[v] = struct{}{}
	for {
		if _, ok := c.pending[limit+1]; !ok {
			break
		}
		delete(c.pending, limit+1)
		limit++
	}
	c.limit.Store(limit)
}

// Last returns the highest number with every number up to it acknowledged.
func (c *AckCounter) Last() int64 { return c.limit.Load() }

// issued returns the number the next Next will return.
func (c *AckCounter) issued() int64 { return c.next.Load() }

// KeyName is YCSB's buildKeyName: "user" followed by the decimal key number, hashed with
// FNVHash64 unless ordered (so that consecutive inserts scatter over the key order), left-padded
// with zeros to zeroPadding digits.
func KeyName(keynum int64, zeroPadding int, ordered bool) string {
	return string(AppendKey(nil, keynum, zeroPadding, ordered))
}

// AppendKey appends KeyName(keynum, zeroPadding, ordered) to dst.
func AppendKey(dst []byte, keynum int64, zeroPadding int, ordered bool) []byte {
	if !ordered {
		keynum = FNVHash64(keynum)
	}
	dst = append(dst, "user"...)
	var digits [24]byte
	d := strconv.AppendInt(digits[:0], keynum, 10)
	for i := len(d); i < zeroPadding; i++ {
		dst = append(dst, '0')
	}
	return append(dst, d...)
}
