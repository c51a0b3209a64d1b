package sherman

import (
	"bytes"
	"math/rand/v2"
	"slices"

	"github.com/farmem/farmem/farmem"
)

// NewShermanCache returns a cache of at most budget bytes that holds its copies as Sherman's
// own index cache does (IndexCache over a skip list of CacheEntry{from, to, page} in the
// authors' code), where NewCache keeps one copy per node:
//
//   - A copy is filed under its node's fence range [low, high) and level, not its address.
//     Reading a node whose range a split has since narrowed files a second copy under the new
//     range; the copy from before the split stays, charged its page, until a lookup through
//     it fails (the walk drops it) or the budget evicts it. A lookup finds, per level, the
//     entry with the lowest high fence above the key (ties: the highest low fence), as
//     Sherman's skip list is ordered, and hits only if that entry's low fence is at or below
//     the key and its copy is present; so a copy from before a split is shadowed once both
//     halves are filed, still charged and never found. CacheStats.Superseded counts such
//     copies (several copies of one node).
//
//   - A level-1 copy (a leaf's parent, the level Sherman caches) filed while its range's
//     entry holds one is dropped and the present copy kept, as Sherman's add_to_cache does
//     when its skip-list insert conflicts: a present copy is replaced only after a lookup
//     through it fails. Above level 1, which Sherman does not cache (its walks start at the
//     root), the newer copy replaces the older: no lookup through an upper copy drops it,
//     so a kept stale copy there would stay for good and cost the walks through it sibling
//     hops Sherman's fresh root reads do not pay.
//
//   - A dropped or evicted copy leaves its entry (no bytes), as Sherman invalidates an entry
//     by clearing its page pointer and never removes the skip-list node: a lookup that finds
//     it misses.
//
//   - Copies are filed only from nodes a walk reads (Sherman adds a page in page_search), not
//     from the nodes a split or a separator's insertion writes.
//
//   - Past the budget, two present copies are drawn at random (with replacement, from the
//     random source of the handle whose filing went over: its fabric Runtime's, so a
//     simulated run is a function of its seed) and the one with fewer lookup hits since it
//     was filed is evicted (the second on a tie), as Sherman's evict_one compares two random
//     entries' index_cache_freq. Sherman draws an entry by a random key, so an entry's
//     chance follows the width of its range; here each present copy is equally likely (the
//     level-1 ranges of a dense key space are of like width; the upper levels' few copies
//     are drawn more often than by key).
//
// Each copy is charged CacheEntryOverhead plus its page, as NewCache's. This is the cache the
// Dolphin comparison gives the Sherman-like tree: Table II counts what it holds.
func NewShermanCache(budget int64) *Cache {
	c := NewCache(budget)
	c.ranged = newRangeIndex()
	return c
}

// rangeIndex is a Sherman-like cache's index: per level, entries sorted by (high fence
// ascending, plus infinity last; low fence descending, minus infinity last).
type rangeIndex struct {
	levels  [][]*rentry
	present []*rentry // the entries holding a copy, in no order (eviction's sample)
}

// rentry is one fence range's entry: its copy, or nil once dropped or evicted.
type rentry struct {
	level     int
	low, high []byte
	n         *node
	hits      uint64 // lookups that found this copy since it was filed
	pos       int    // index in present while n is not nil
}

// unfile clears e's copy (held, under mu).
func (r *rangeIndex) unfile(c *Cache, e *rentry) {
	c.used -= cost(e.n, 0)
	e.n = nil
	last := r.present[len(r.present)-1]
	r.present[e.pos], last.pos = last, e.pos
	r.present = r.present[:len(r.present)-1]
}

func newRangeIndex() *rangeIndex { return &rangeIndex{} }

// highCmp orders high fences with nil (plus infinity) last.
func highCmp(a, b []byte) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return 1
	case b == nil:
		return -1
	}
	return bytes.Compare(a, b)
}

// rangeCmp is the index's order: high ascending, then low descending.
func rangeCmp(aLow, aHigh, bLow, bHigh []byte) int {
	if c := highCmp(aHigh, bHigh); c != 0 {
		return c
	}
	return -lowCmp(aLow, bLow)
}

// firstAbove returns the index of lv's first entry whose high fence is above k.
func firstAbove(lv []*rentry, k []byte) int {
	i, _ := slices.BinarySearchFunc(lv, k, func(e *rentry, k []byte) int {
		if e.high != nil && bytes.Compare(e.high, k) <= 0 {
			return -1
		}
		return 1
	})
	return i
}

// rangedLookup is lookup's rule for a Sherman-like cache (held, under mu).
func (c *Cache) rangedLookup(k []byte) *node {
	for _, lv := range c.ranged.levels {
		if i := firstAbove(lv, k); i < len(lv) {
			if e := lv[i]; e.n != nil && lowCmp(e.low, k) <= 0 {
				e.hits++
				c.hits.Add(1)
				return e.n
			}
		}
	}
	c.misses.Add(1)
	return nil
}

// rangedPut files copy n (held, under mu) of cs bytes, evicting with rng's draws.
func (c *Cache) rangedPut(n *node, cs int64, rng *rand.Rand) {
	r := c.ranged
	for len(r.levels) < n.level {
		r.levels = append(r.levels, nil)
	}
	lv := r.levels[n.level-1]
	i, found := slices.BinarySearchFunc(lv, n, func(e *rentry, n *node) int { return rangeCmp(e.low, e.high, n.low, n.high) })
	var e *rentry
	if found {
		e = lv[i]
		if e.n != nil && n.level == 1 {
			return // Sherman keeps the present copy of a range and drops the newer read
		}
		if e.n != nil {
			r.unfile(c, e)
		}
	} else {
		e = &rentry{level: n.level, low: n.low, high: n.high}
		r.levels[n.level-1] = slices.Insert(lv, i, e)
	}
	e.n, e.hits, e.pos = n, 0, len(r.present)
	r.present = append(r.present, e)
	c.used += cs
	for c.used > c.budget && len(r.present) > 0 {
		a, b := r.present[rng.IntN(len(r.present))], r.present[rng.IntN(len(r.present))]
		if a.hits < b.hits {
			b = a
		}
		r.unfile(c, b)
		c.evictions.Add(1)
	}
}

// rangedDrop forgets copy n if it is still its entry's (held, under mu).
func (c *Cache) rangedDrop(n *node) {
	if n.level < 1 || n.level > len(c.ranged.levels) {
		return
	}
	lv := c.ranged.levels[n.level-1]
	if i, found := slices.BinarySearchFunc(lv, n, func(e *rentry, n *node) int { return rangeCmp(e.low, e.high, n.low, n.high) }); found && lv[i].n == n {
		c.ranged.unfile(c, lv[i])
		c.drops.Add(1)
	}
}

// rangedCovering is covering's rule for a Sherman-like cache (held, under mu): the present
// level-1 copies tiling [from, to) from the one a lookup of from finds, skipping copies that
// overlap the tiles already taken (shadowed ones) and stopping at the first gap.
func (c *Cache) rangedCovering(from, to []byte, most int) []*node {
	if len(c.ranged.levels) == 0 {
		return nil
	}
	lv := c.ranged.levels[0]
	i := firstAbove(lv, from)
	if i == len(lv) || lv[i].n == nil || lowCmp(lv[i].low, from) > 0 {
		return nil
	}
	out := []*node{lv[i].n}
	for j := i + 1; j < len(lv) && len(out) < most; j++ {
		prev := out[len(out)-1]
		if prev.high == nil || (to != nil && bytes.Compare(prev.high, to) >= 0) {
			break
		}
		e := lv[j]
		switch c := lowCmp(e.low, prev.high); {
		case c < 0:
			continue // overlaps the tiles taken: a copy from before a split
		case c > 0:
			return out // a gap
		}
		if e.n == nil {
			continue // dropped: an older copy of a wider range may follow
		}
		out = append(out, e.n)
	}
	return out
}

// rangedStats is Stats for a Sherman-like cache (held, under mu).
func (c *Cache) rangedStats() CacheStats {
	st := CacheStats{Bytes: c.used, Budget: c.budget, Hits: c.hits.Load(), Misses: c.misses.Load(),
		Evictions: c.evictions.Load(), Drops: c.drops.Load()}
	copies := map[farmem.Addr]int{}
	for _, lv := range c.ranged.levels {
		for _, e := range lv {
			if e.n == nil {
				continue
			}
			st.Entries++
			st.InUse += CacheEntryOverhead + int64(2*c.width+8) + int64(len(e.n.keys)*(c.width+8))
			if copies[e.n.addr]++; copies[e.n.addr] > 1 {
				st.Superseded++
			}
		}
	}
	return st
}

// cachesWrites reports whether the tree files the nodes it writes (NewCache's) or only those
// it reads (NewShermanCache's).
func (c *Cache) cachesWrites() bool { return c != nil && c.ranged == nil }
