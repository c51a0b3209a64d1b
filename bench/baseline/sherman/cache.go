package sherman

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/farmem/farmem/farmem"
)

// CacheEntryOverhead is what a cached internal node costs beyond its keys and pointers: its
// address, level and sibling (24 bytes) and the index entry (about 16 bytes), as ds/hybrid
// charges its cached ART nodes (hybrid.CacheEntryOverhead), so the two caches are measured
// under one rule.
const CacheEntryOverhead = 40

// Cache is the compute-side cache of internal nodes, shared by every handle of one compute
// node: copies of internal nodes (all levels above the leaves, as read by walks), indexed per
// level by their low fence, so a lookup finds the lowest cached node whose fences cover a key
// (a leaf's parent when warm: the leaf's address with no round trip). Each copy holds the
// node's page (NodeSize bytes, as Sherman's cache holds internal pages) and is charged
// CacheEntryOverhead plus the page; CacheStats.Entries also reports the bytes of the keys and
// pointers in use (two fences, the first child and, per separator, the codec's Width and an
// 8-byte pointer: full keys, which is what Sherman's cache pays and Dolphin's does not). Past
// the budget the oldest copies are evicted first (FIFO; NewShermanCache's evicts as Sherman's
// does). A copy is
// never trusted past a leaf's fences: a leaf reached through a stale copy is checked and the
// walk goes right by sibling pointers. A Go mutex guards the index, never held across a verb.
type Cache struct {
	budget  int64
	ranged  *rangeIndex   // NewShermanCache's index by fence range (nil: one copy per node)
	parents bool          // NewShermanParentCache's: level-1 copies only, and the root's address
	root    atomic.Uint64 // NewShermanParentCache's root address (0: unknown)

	mu     sync.Mutex
	width  int // the codec's, set by the first put
	used   int64
	byAddr map[farmem.Addr]*node
	levels [][]*node // per level (index 0 is level 1), sorted by low fence
	fifo   []farmem.Addr

	hits, misses, evictions, drops atomic.Uint64
}

// NewCache returns a cache of at most budget bytes (0 caches nothing).
func NewCache(budget int64) *Cache {
	return &Cache{budget: max(budget, 0), byAddr: make(map[farmem.Addr]*node)}
}

// CacheStats are a cache's counters: Entries cached nodes charged Bytes within Budget; Hits
// and Misses lookups that found a covering node or none; Evictions copies dropped for the
// budget, Drops copies dropped as stale.
type CacheStats struct {
	Entries       int
	Bytes, Budget int64
	// InUse is what the cached copies' fences, separators and pointers take, overhead
	// included (the pages' unused room excluded).
	InUse int64
	// Superseded counts present copies of a node that has another present copy under other
	// fences (a copy from before the node split; NewShermanCache only).
	Superseded                     int
	Hits, Misses, Evictions, Drops uint64
}

// Stats returns the cache's counters.
func (c *Cache) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ranged != nil {
		return c.rangedStats()
	}
	var inUse int64
	for _, n := range c.byAddr {
		inUse += CacheEntryOverhead + int64(2*c.width+8) + int64(len(n.keys)*(c.width+8))
	}
	return CacheStats{Entries: len(c.byAddr), Bytes: c.used, Budget: c.budget, InUse: inUse, Hits: c.hits.Load(),
		Misses: c.misses.Load(), Evictions: c.evictions.Load(), Drops: c.drops.Load()}
}

// Close empties the cache. It is idempotent.
func (c *Cache) Close() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	c.byAddr, c.levels, c.fifo, c.used = make(map[farmem.Addr]*node), nil, nil, 0
	if c.ranged != nil {
		c.ranged = newRangeIndex()
	}
	c.mu.Unlock()
	return nil
}

func cost(n *node, _ int) int64 { return CacheEntryOverhead + int64(len(n.raw)) }

// lowLess orders fences with nil (minus infinity) first.
func lowCmp(a, b []byte) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return -1
	case b == nil:
		return 1
	}
	return bytes.Compare(a, b)
}

// lookup returns the lowest-level cached internal node covering k, or nil.
func (c *Cache) lookup(k []byte) *node {
	if c == nil || c.budget == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ranged != nil {
		return c.rangedLookup(k)
	}
	for _, lv := range c.levels {
		i, _ := slices.BinarySearchFunc(lv, k, func(n *node, k []byte) int {
			if lowCmp(n.low, k) <= 0 {
				return -1
			}
			return 1
		})
		if i > 0 && !lv[i-1].beyond(k) {
			c.hits.Add(1)
			return lv[i-1]
		}
	}
	c.misses.Add(1)
	return nil
}

// put caches a fresh copy of internal node n, replacing an older copy of it; rng is the
// filing handle's random source (NewShermanCache's eviction draws from it).
func (c *Cache) put(n *node, width int, rng *rand.Rand) {
	if c == nil || n.leaf() || (c.parents && n.level != 1) {
		return
	}
	cs := cost(n, width)
	if cs > c.budget {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.width = width
	if c.ranged != nil {
		c.rangedPut(n, cs, rng)
		return
	}
	if old := c.byAddr[n.addr]; old != nil {
		c.remove(old, width)
	} else {
		c.fifo = append(c.fifo, n.addr)
	}
	for len(c.levels) < n.level {
		c.levels = append(c.levels, nil)
	}
	lv := c.levels[n.level-1]
	i, found := slices.BinarySearchFunc(lv, n, func(a, b *node) int { return lowCmp(a.low, b.low) })
	if found { // another node with the same low fence (a stale root's): replace it
		delete(c.byAddr, lv[i].addr)
		c.used -= cost(lv[i], width)
		lv[i] = n
	} else {
		lv = slices.Insert(lv, i, n)
	}
	c.levels[n.level-1] = lv
	c.byAddr[n.addr] = n
	c.used += cs
	for c.used > c.budget && len(c.fifo) > 0 {
		victim := c.fifo[0]
		c.fifo = c.fifo[1:]
		if v := c.byAddr[victim]; v != nil {
			c.remove(v, width)
			c.evictions.Add(1)
		}
	}
}

// remove unlinks n (held, under mu).
func (c *Cache) remove(n *node, width int) {
	delete(c.byAddr, n.addr)
	c.used -= cost(n, width)
	lv := c.levels[n.level-1]
	if i, found := slices.BinarySearchFunc(lv, n, func(a, b *node) int { return lowCmp(a.low, b.low) }); found && lv[i] == n {
		c.levels[n.level-1] = slices.Delete(lv, i, i+1)
	}
}

// drop forgets n's copy if it is still the cached one.
func (c *Cache) drop(n *node, width int) {
	if c == nil || n == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ranged != nil {
		c.rangedDrop(n)
		return
	}
	if c.byAddr[n.addr] == n {
		c.remove(n, width)
		c.drops.Add(1)
	}
}

// covering returns the cached level-1 copies whose ranges meet [from, to) in key order,
// stopping at the first gap (nil to: unbounded, at most max copies).
func (c *Cache) covering(from, to []byte, most int) []*node {
	if c == nil || c.budget == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ranged != nil {
		return c.rangedCovering(from, to, most)
	}
	if len(c.levels) == 0 {
		return nil
	}
	lv := c.levels[0]
	i, _ := slices.BinarySearchFunc(lv, from, func(n *node, k []byte) int {
		if lowCmp(n.low, k) <= 0 {
			return -1
		}
		return 1
	})
	if i == 0 || lv[i-1].beyond(from) {
		return nil
	}
	out := []*node{lv[i-1]}
	for j := i; j < len(lv) && len(out) < most; j++ {
		prev := out[len(out)-1]
		if prev.high == nil || (to != nil && bytes.Compare(prev.high, to) >= 0) || !bytes.Equal(prev.high, lv[j].low) {
			break
		}
		out = append(out, lv[j])
	}
	return out
}
