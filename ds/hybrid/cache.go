package hybrid

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/nodestate"
)

// Cache is the compute-side radix cache: copies of ART nodes (down to the special nodes),
// shared by every handle of one compute node, keyed by (depth, the key's first depth bytes).
// A lookup probes from depth 7 upwards and returns the deepest copy, so a warm cache jumps
// straight to a key's special node (or to the ordinary node its leaf hangs from).
//
// Budget: each copy is charged CacheEntryOverhead plus 8 bytes per slot it holds; past the
// budget the oldest copies are evicted first (FIFO, as the artifact). A budget of 0 caches
// nothing. A copy is never trusted for an answer: a child it names is validated when read
// (a node's depth and full prefix, a leaf's dead bit, key range and reverse pointer), and a
// copy that misses a child is re-read. Copies are replaced, never mutated, so readers hold no
// lock; a Go mutex guards only the map, and is never held across a verb.
type Cache struct {
	budget int64

	mu   sync.Mutex
	used int64
	m    map[uint64]*node
	fifo []uint64

	hits, misses, evictions, drops atomic.Uint64
}

// CacheEntryOverhead is what a cached node costs beyond 8 bytes per slot: its address, depth,
// type and prefix (24 bytes) and the map entry (about 16 bytes).
const CacheEntryOverhead = 40

// NewCache returns a cache of at most budget bytes (0: caches nothing).
func NewCache(budget int64) *Cache {
	return &Cache{budget: max(budget, 0), m: make(map[uint64]*node)}
}

// OpenCaches opens one Cache of budget bytes per compute node of nodes, as per-node state
// (farmem/nodestate, in farmem.OwnerHybrid's block; it registers no handler). Each handle
// then takes its node's cache: set.Get(m.Info().Node).
func OpenCaches(ctx context.Context, f farmem.Fabric, nodes []farmem.NodeID, budget int64) (*nodestate.Set[*Cache], error) {
	return nodestate.Open(ctx, f, nodes, farmem.OwnerHybrid, func(ctx context.Context, env *nodestate.Env) (*Cache, error) {
		return NewCache(budget), nil
	})
}

// Close empties the cache. It is idempotent.
func (c *Cache) Close() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	c.m, c.fifo, c.used = make(map[uint64]*node), nil, 0
	c.mu.Unlock()
	return nil
}

// CacheStats are a cache's counters.
type CacheStats struct {
	// Entries is the number of cached nodes; Bytes what they are charged, within Budget.
	Entries       int
	Bytes, Budget int64
	// Hits and Misses count lookups that found a node on the key's path or none; Evictions
	// copies dropped for the budget; Drops copies dropped as stale (a child's reverse pointer
	// named another slot).
	Hits, Misses, Evictions, Drops uint64
}

// Stats returns the cache's counters.
func (c *Cache) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return CacheStats{Entries: len(c.m), Bytes: c.used, Budget: c.budget, Hits: c.hits.Load(),
		Misses: c.misses.Load(), Evictions: c.evictions.Load(), Drops: c.drops.Load()}
}

func cacheKey(depth int, prefix uint64) uint64 { return prefix | uint64(depth) }

func entryCost(n *node) int64 { return CacheEntryOverhead + 8*int64(len(n.slots)) }

// lookup returns the deepest cached node on k's path, or nil.
func (c *Cache) lookup(k uint64) *node {
	if c == nil || c.budget == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for d := 7; d >= 0; d-- {
		if n := c.m[cacheKey(d, k&prefixMask(d))]; n != nil {
			c.hits.Add(1)
			return n
		}
	}
	c.misses.Add(1)
	return nil
}

// put caches n (a fresh copy), replacing an older copy of the same node.
func (c *Cache) put(n *node) {
	cost := entryCost(n)
	if c == nil || cost > c.budget {
		return
	}
	key := cacheKey(n.depth, n.prefix)
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.m[key]; old != nil {
		c.used -= entryCost(old)
	} else {
		if len(c.fifo) > 2*len(c.m)+64 { // forget keys of dropped copies
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
		victim := c.fifo[0]
		c.fifo = c.fifo[1:]
		if v := c.m[victim]; v != nil {
			c.used -= entryCost(v)
			delete(c.m, victim)
			c.evictions.Add(1)
		}
	}
}

// drop forgets n's copy if it is still the cached one.
func (c *Cache) drop(n *node) {
	if c == nil || n == nil {
		return
	}
	key := cacheKey(n.depth, n.prefix)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m[key] == n {
		delete(c.m, key)
		c.used -= entryCost(n)
		c.drops.Add(1)
		// Its fifo key stays; eviction skips keys with no entry or re-adds are charged anew.
	}
}
