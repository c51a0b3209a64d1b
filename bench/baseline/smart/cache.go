package smart

import (
	"sync"
	"sync/atomic"
)

// CacheEntryOverhead is what a cached node costs beyond 8 bytes per slot of its class: its
// address, depth and prefix (24 bytes) and the map entry (about 16 bytes), the rule ds/hybrid
// charges its own copies by (hybrid.CacheEntryOverhead), so the caches are measured alike.
const CacheEntryOverhead = 40

// Cache is SMART's compute-side radix cache: copies of internal nodes at every depth, down to
// the nodes whose slots name the leaves (one 8-byte pointer per key), shared by every handle of
// one compute node and keyed by (depth, prefix). A lookup returns the deepest copy on a key's
// path, so a warm cache names a key's leaf with no round trip. Each copy is charged
// CacheEntryOverhead plus 8 bytes per slot of its node class (SMART's: 4, 8, 16, 32, 64, 128 or 256 children);
// past the budget the oldest copies go first (FIFO). A copy is never trusted for an absence
// or a dead leaf: the node is read again. A Go mutex guards the map, never held across a verb.
type Cache struct {
	budget int64

	mu   sync.Mutex
	used int64
	m    map[uint64]*node
	fifo []uint64

	hits, misses, evictions atomic.Uint64
}

// NewCache returns a cache of at most budget bytes (0 caches nothing).
func NewCache(budget int64) *Cache { return &Cache{budget: max(budget, 0), m: map[uint64]*node{}} }

// CacheStats are a cache's counters (as ds/hybrid's).
type CacheStats struct {
	Entries                 int
	Bytes, Budget           int64
	Hits, Misses, Evictions uint64
}

// Stats returns the cache's counters.
func (c *Cache) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return CacheStats{Entries: len(c.m), Bytes: c.used, Budget: c.budget, Hits: c.hits.Load(), Misses: c.misses.Load(), Evictions: c.evictions.Load()}
}

// Close empties the cache. It is idempotent.
func (c *Cache) Close() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	c.m, c.fifo, c.used = map[uint64]*node{}, nil, 0
	c.mu.Unlock()
	return nil
}

func ckey(depth int, prefix uint64) uint64 { return prefix | uint64(depth) }

func entryCost(n *node) int64 { return CacheEntryOverhead + 8*int64(classes[classOf(n.count())]) }

func (c *Cache) lookup(k uint64) *node {
	if c == nil || c.budget == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for d := 7; d >= 0; d-- {
		if n := c.m[ckey(d, k&prefixMask(d))]; n != nil {
			c.hits.Add(1)
			return n
		}
	}
	c.misses.Add(1)
	return nil
}

// lookupAt returns the deepest copy at depth at most d on k's path.
func (c *Cache) lookupAt(k uint64, d int) *node {
	if c == nil || c.budget == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for ; d >= 0; d-- {
		if n := c.m[ckey(d, k&prefixMask(d))]; n != nil {
			return n
		}
	}
	return nil
}

func (c *Cache) put(n *node) {
	if c == nil {
		return
	}
	cost := entryCost(n)
	if cost > c.budget {
		return
	}
	key := ckey(n.depth, n.prefix)
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.m[key]; old != nil {
		c.used -= entryCost(old)
	} else {
		if len(c.fifo) > 2*len(c.m)+64 {
			live := c.fifo[:0]
			for _, k := range c.fifo {
				if c.m[k] != nil {
					live = append(live, k)
				}
			}
			c.fifo = live
		}
		c.fifo = append(c.fifo, key)
	}
	c.m[key] = n
	c.used += cost
	for c.used > c.budget && len(c.fifo) > 0 {
		v := c.fifo[0]
		c.fifo = c.fifo[1:]
		if x := c.m[v]; x != nil {
			c.used -= entryCost(x)
			delete(c.m, v)
			c.evictions.Add(1)
		}
	}
}
