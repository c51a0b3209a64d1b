package sherman

import (
	"math/rand/v2"
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
	c.put(whole, 8, nil)
	require.Same(t, whole, c.lookup(kb(30)), "the copy from before the split serves both halves")
	require.Same(t, whole, c.lookup(kb(70)))
	right := page(2, kb(50), kb(100))
	c.put(right, 8, nil)
	require.Same(t, right, c.lookup(kb(70)))
	require.Nil(t, c.lookup(kb(30)), "the right half's entry is found first (Sherman's order): the left half misses")

	left := page(1, nil, kb(50)) // node 1 read again after its split
	c.put(left, 8, nil)
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
	c.put(right2, 8, nil)
	require.Same(t, right2, c.lookup(kb(70)), "a read files the range again")
	require.Nil(t, c.lookup(kb(100)), "no copy covers the range past the fences")

	fresh := page(1, nil, kb(50))
	c.put(fresh, 8, nil)
	require.Same(t, left, c.lookup(kb(30)), "a present copy of the same range is kept, the newer read dropped (Sherman's add_to_cache)")
	require.Equal(t, 3*per, c.Stats().Bytes)

	// Above level 1 (which Sherman does not cache) a newer copy of a range replaces the older:
	// no lookup through an upper copy drops it, so a kept stale copy would stay for good.
	up := page(9, nil, nil)
	up.level = 2
	c.put(up, 8, nil)
	up2 := page(9, nil, nil)
	up2.level = 2
	c.put(up2, 8, nil)
	require.Same(t, up2, c.lookup(kb(200)), "no level-1 copy covers 200: the level-2 copy, the newer")
	require.Equal(t, 4*per, c.Stats().Bytes)
}

// TestShermanCacheEvictsWithinBudget checks the budget: a filing past it evicts one copy, an
// evicted entry misses, and Close empties the cache.
func TestShermanCacheEvictsWithinBudget(t *testing.T) {
	per := int64(CacheEntryOverhead + DefaultNodeSize)
	rng := rand.New(rand.NewPCG(1, 2))
	c := NewShermanCache(2 * per)
	a, b, d := page(1, nil, kb(10)), page(2, kb(10), kb(20)), page(3, kb(20), nil)
	c.put(a, 8, rng)
	c.put(b, 8, rng)
	c.put(d, 8, rng)
	st := c.Stats()
	require.Equal(t, 2, st.Entries)
	require.Equal(t, 2*per, st.Bytes)
	require.Equal(t, uint64(1), st.Evictions)
	missed := 0
	for _, k := range [][]byte{kb(5), kb(15), kb(200)} {
		if c.lookup(k) == nil {
			missed++
		}
	}
	require.Equal(t, 1, missed, "the evicted copy's range misses")
	require.NoError(t, c.Close())
	require.Zero(t, c.Stats().Entries)
	require.Nil(t, c.lookup(kb(15)))
}

// TestShermanCacheEvictsLessUsedOfTwo checks the budget's eviction as Sherman's IndexCache
// does it: two present copies sampled at random (from the source the filing handle passes,
// so a simulated run is a function of its seed), the one with fewer lookup hits since it was
// filed evicted. Half of 100 copies, the oldest half, are hit before 50 more are filed: FIFO
// would evict every one of them; sampling keeps most (a hot copy goes only when both samples
// draw hot copies, about a quarter of the draws at first).
func TestShermanCacheEvictsLessUsedOfTwo(t *testing.T) {
	per := int64(CacheEntryOverhead + DefaultNodeSize)
	run := func(seed uint64) (hotLeft int, evicted []byte) {
		rng := rand.New(rand.NewPCG(seed, 7))
		c := NewShermanCache(100 * per)
		key := func(i int) []byte { return []byte{byte(i >> 8), byte(i)} }
		for i := range 100 {
			c.put(page(farmem.Addr(i+1), key(i), key(i+1)), 8, rng)
		}
		for i := range 50 {
			require.NotNil(t, c.lookup(key(i)))
		}
		for i := 100; i < 150; i++ {
			c.put(page(farmem.Addr(i+1), key(i), key(i+1)), 8, rng)
		}
		require.Equal(t, uint64(50), c.Stats().Evictions)
		require.Equal(t, 100, c.Stats().Entries)
		for i := range 150 {
			if c.lookup(key(i)) == nil {
				evicted = append(evicted, byte(i))
			} else if i < 50 {
				hotLeft++
			}
		}
		return hotLeft, evicted
	}
	hot, ev := run(1)
	require.GreaterOrEqual(t, hot, 30, "hot copies kept (FIFO keeps none)")
	_, ev2 := run(1)
	require.Equal(t, ev, ev2, "same source, same evictions")
}
