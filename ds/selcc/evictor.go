package selcc

import (
	"context"
	"time"
)

// The background evictor (§5.2): the paper's eviction workers watch the length of the free
// list and, when it falls below a threshold L, release L − l_f least-recently-used frames in
// batches grouped into one work request per memory node, so that a miss normally finds a
// free frame and pays no eviction on its critical path. Here a client that takes a frame and
// leaves fewer than L = min(2·EvictBatch, Frames/8) free starts one evictor (at most one runs per node, on
// the node's own client, in a goroutine the fabric schedules); it evicts batches of up to
// EvictBatch victims, one round trip each, until L frames are free, and ends. A miss that finds
// no free frame at all (the evictor fell behind) still evicts a batch itself.

// lowWater is the free-list length L below which the background evictor runs: two batches,
// but at most an eighth of the frames, so that the evictor of a small cache does not keep
// emptying it (0 turns the evictor off: misses evict for themselves).
func (n *node) lowWater() int { return min(2*n.c.opts.EvictBatch, n.c.opts.Frames/8) }

// freeLen returns the free list's length.
func (n *node) freeLen() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.free)
}

// kickEvictor starts the background evictor if the free list is below the low-water mark and
// none runs (nor the node is closing).
func (n *node) kickEvictor() {
	if n.freeLen() >= n.lowWater() || n.closing.Load() || !n.evicting.CompareAndSwap(false, true) {
		return
	}
	n.m.Runtime().Go(n.evictLoop)
}

// evictLoop is the background evictor's body; it owns n.m while n.evicting is set.
func (n *node) evictLoop() {
	defer n.evicting.Store(false)
	ctx := context.Background()
	for !n.closing.Load() {
		short := n.lowWater() - n.freeLen()
		if short <= 0 {
			return
		}
		vs := n.victims(min(short, n.c.opts.EvictBatch))
		if len(vs) == 0 {
			return
		}
		before := n.stats.evicted.Load()
		if err := n.evict(ctx, n.m, vs); err != nil {
			return // a peer or this node is down: misses evict for themselves
		}
		if n.stats.evicted.Load() == before {
			return // every victim was in use: leave it to the misses
		}
	}
}

// stopEvictor keeps the evictor from starting again and waits until a running one ended (it
// uses the node's own client, which Close needs).
func (n *node) stopEvictor() {
	n.closing.Store(true)
	rt := n.m.Runtime()
	for n.evicting.Load() {
		if rt.Sleep(context.Background(), time.Microsecond) != nil {
			return
		}
	}
}
