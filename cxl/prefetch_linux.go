package cxl

import (
	"context"
	"unsafe"

	"github.com/farmem/farmem/atomics"
	"github.com/farmem/farmem/farmem"
)

// Prefetch asks the CPU for the lines of [a, a+n) (at most prefetchMax bytes), as a hint: it
// reads and changes nothing, costs no verb and is not counted, never faults and ignores a
// range outside the region. A structure that learns an address some way ahead of the batch
// that will read it (ds/race: a key's buckets once its hash is known, a block once its slot
// word is) calls it at once, so that the cache misses overlap the work in between. Under the
// Uncached policy it does nothing (the batch's reads flush the lines first).
func (c *client) Prefetch(a farmem.Addr, n int) {
	node, off := a.Node(), a.Offset()
	if mem := c.m.mem; int(node) < len(mem) {
		// A memory node, the usual hint; mem[0], no node, has size 0.
		if s := &mem[node]; off < s.size && n > 0 && !c.f.uncached {
			atomics.Prefetch(unsafe.Add(s.base, off), uintptr(min(uint64(n), prefetchMax, s.size-off)))
		}
		return
	}
	c.prefetchCompute(node, off, n)
}

// Prefetch2 is Prefetch of [a, a+n) and then of [b, b+m), in one call: a structure that learns
// two addresses at once (ds/race: a cached key's slot and the head of the block it names) pays
// one call's overhead instead of two. The same hint, with the same limits.
func (c *client) Prefetch2(a farmem.Addr, n int, b farmem.Addr, m int) {
	if c.f.uncached {
		return
	}
	mem := c.m.mem
	if node, off := a.Node(), a.Offset(); int(node) < len(mem) {
		if s := &mem[node]; off < s.size && n > 0 {
			atomics.Prefetch(unsafe.Add(s.base, off), uintptr(min(uint64(n), prefetchMax, s.size-off)))
		}
	} else {
		c.prefetchCompute(node, off, n)
	}
	if node, off := b.Node(), b.Offset(); int(node) < len(mem) {
		if s := &mem[node]; off < s.size && m > 0 {
			atomics.Prefetch(unsafe.Add(s.base, off), uintptr(min(uint64(m), prefetchMax, s.size-off)))
		}
	} else {
		c.prefetchCompute(node, off, m)
	}
}

// prefetchCompute is Prefetch on a compute node's region.
func (c *client) prefetchCompute(node farmem.NodeID, off uint64, n int) {
	if s := c.m.seg(node); s != nil && off < s.size && n > 0 && !c.f.uncached {
		atomics.Prefetch(unsafe.Add(s.base, off), uintptr(min(uint64(n), prefetchMax, s.size-off)))
	}
}

// DoHinted is Do for a batch whose caller has already asked for the lines of its reads with
// Prefetch (a structure that learns a block's address some way ahead of the batch that reads
// it): the batch is checked, run and counted as Do does it, but its lines are not asked for a
// second time (on a cache-resident block the second set of prefetches is pure overhead, on a
// missing one each waits for a line already on its way). Lines not hinted are fetched by the
// ops themselves; nothing depends on the hint.
func (c *client) DoHinted(ctx context.Context, b *farmem.Batch) error {
	return c.do(ctx, b, false)
}
