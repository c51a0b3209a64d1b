package sherman

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
)

// page returns a level-1 copy of the node at a covering [low, high) (nil: unbounded), a
// 1 KB page as the cache holds it.
func page(a farmem.Addr, low, high []byte) *node {
	return &node{addr: a, level: 1, low: low, high: high, vals: []uint64{uint64(a) + 1}, raw: make([]byte, DefaultNodeSize)}
}

func kb(b byte) []byte { return []byte{b} }

// TestShermanCacheKeepsSupersededCopies checks the Sherman-like cache's filing by fence
// range: a node's copy from before its split serves its range until a half is filed, then
// stays charged beside the halves' copies, shadowed, and a dropped entry makes its range miss.
func TestShermanCacheKeepsSupersededCopies(t *testing.T) {
	c := NewShermanCache(1 << 20)
	per := int64(CacheEntryOverhead + DefaultNodeSize)
	whole := page(1, nil, kb(100))
	c.put(whole, 8)
	require.Same(t, whole, c.lookup(kb(30)), "the copy from before the split serves both halves")
	require.Same(t, whole, c.lookup(kb(70)))
	right := page(2, kb(50), kb(100))
	c.put(right, 8)
	require.Same(t, right, c.lookup(kb(70)))
	require.Nil(t, c.lookup(kb(30)), "the right half's entry is found first (Sherman's order): the left half misses")

	left := page(1, nil, kb(50)) // node 1 read again after its split
	c.put(left, 8)
	require.Same(t, left, c.lookup(kb(30)))
	require.Same(t, right, c.lookup(kb(70)))
	st := c.Stats()
	require.Equal(t, 3, st.Entries, "the copy from before the split is kept")
	require.Equal(t, 1, st.Superseded)
	require.Equal(t, 3*per, st.Bytes)
	require.Equal(t, []*node{left, right}, c.covering(kb(10), kb(90), 64), "the shadowed copy is not part of a scan's tiling")

	c.drop(right, 8)
	require.Nil(t, c.lookup(kb(70)), "a dropped entry misses: the wider copy behind it is not found")
	require.Equal(t, 2*per, c.Stats().Bytes)
	require.Equal(t, []*node{left}, c.covering(kb(10), kb(90), 64))
	right2 := page(2, kb(50), kb(100))
	c.put(right2, 8)
	require.Same(t, right2, c.lookup(kb(70)), "a read files the range again")
	require.Nil(t, c.lookup(kb(100)), "no copy covers the range past the fences")

	fresh := page(1, nil, kb(50))
	c.put(fresh, 8)
	require.Same(t, fresh, c.lookup(kb(30)), "a copy of the same range replaces the older one")
	require.Equal(t, 3*per, c.Stats().Bytes)
}

// TestShermanCacheEvictsFIFO checks the budget: copies are evicted oldest first, and an
// evicted entry misses.
func TestShermanCacheEvictsFIFO(t *testing.T) {
	per := int64(CacheEntryOverhead + DefaultNodeSize)
	c := NewShermanCache(2 * per)
	a, b, d := page(1, nil, kb(10)), page(2, kb(10), kb(20)), page(3, kb(20), nil)
	c.put(a, 8)
	c.put(b, 8)
	c.put(d, 8)
	st := c.Stats()
	require.Equal(t, 2, st.Entries)
	require.Equal(t, uint64(1), st.Evictions)
	require.Nil(t, c.lookup(kb(5)))
	require.Same(t, b, c.lookup(kb(15)))
	require.Same(t, d, c.lookup(kb(200)))
	require.NoError(t, c.Close())
	require.Zero(t, c.Stats().Entries)
	require.Nil(t, c.lookup(kb(15)))
}
