package sherman

import (
	"context"

	"github.com/farmem/farmem/farmem"
)

// NewShermanParentCache returns NewShermanCache's cache restricted to what Sherman's own code
// caches (github.com/thustorage/Sherman, src/Tree.cpp and include/IndexCache.h): the pages of
// leaves' parents (level 1) only, filed when a walk reads one, and the root's address, which
// Sherman's compute nodes keep in a global (g_root_ptr, set by the NEW_ROOT message a root
// growth broadcasts). A Get or an Update whose leaf's parent is not cached walks from that
// root, reading every level above the leaf from far memory (Sherman's page_search on a cache
// miss), where NewShermanCache and NewCache also keep the upper levels and so send such a walk
// down from the lowest cached level.
//
// The root's address is learnt from the first walk that reads the root pointer, and replaced
// when a handle of this cache grows the root; another compute node's growth is learnt when a
// walk finds that the node at the kept address has a high fence (is no longer the root) and
// reads the pointer again. A stale address never gives a wrong answer: the walk goes right by
// sibling pointers, as from any node. A leaf (or a locked node) reached through a cached
// parent whose range it no longer covers drops the copy and walks from the root, as Sherman's
// search does, where the other caches go right by sibling pointers.
//
// The budget is Sherman's kIndexCacheSize in bytes, counted as NewShermanCache counts (a
// page plus CacheEntryOverhead per copy). Sherman's default is 1,000 MB (include/Common.h),
// fixed at compile time.
func NewShermanParentCache(budget int64) *Cache {
	c := NewShermanCache(budget)
	c.parents = true
	return c
}

// restarts reports whether a node reached through cached copy via that does not cover the
// key sends the walk back to the root (NewShermanParentCache: Sherman's search drops the
// stale entry and walks from the root) rather than right by sibling pointers.
func (c *Cache) restarts(via *node) bool { return via != nil && c != nil && c.parents }

// knowsRoot reports whether c keeps a root address (NewShermanParentCache's, once learnt).
func (c *Cache) knowsRoot() bool { return c != nil && c.parents && c.root.Load() != 0 }

// newRoot records a root grown by a handle of c's compute node (NewShermanParentCache only).
func (c *Cache) newRoot(a farmem.Addr) {
	if c != nil && c.parents {
		c.root.Store(uint64(a))
	}
}

// walkRoot returns the node a walk that found no cached parent starts from: the root
// pointer's target, read from far memory (one round trip) unless the cache keeps it and
// fresh is false. A read root's address is kept by a NewShermanParentCache.
func (t *Tree) walkRoot(ctx context.Context, fresh bool) (farmem.Addr, error) {
	c := t.cache
	if !fresh && c.knowsRoot() {
		return farmem.Addr(c.root.Load()), nil
	}
	r, err := t.rootPtr(ctx)
	if err != nil {
		return 0, err
	}
	c.newRoot(r)
	return r, nil
}

// NodeSize returns the tree's node bytes (Params.NodeSize).
func (t *Tree) NodeSize() int { return t.l.size }
