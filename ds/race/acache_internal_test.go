package race

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestAddrCacheSets: keys sharing a set keep two entries; a new key goes to the first way and
// moves the first way's entry to the second, evicting the second's; a key kept again updates
// its own entry in place; drop removes only the key's own entry; a key taken and kept again
// leaves the other key of its set in place. A set is one cache line. A cache of size 0 keeps
// nothing.
func TestAddrCacheSets(t *testing.T) {
	op := func(h1, h2 uint64) *opState { return &opState{k: keyHash{h1: h1, h2: h2}} }
	// Three keys in set 5 (the second hash's high half), told apart by their tags (the first
	// hash's high half); a fourth in another set.
	a, b, c, d := op(1<<32, 5<<32), op(2<<32, 5<<32), op(3<<32, 5<<32), op(4<<32, 6<<32)
	var none addrCache
	none.keep(a, 0x100, 8, 3, 1)
	require.Nil(t, none.at(a))

	ac := addrCache{size: 8}
	require.Nil(t, ac.at(a), "nothing allocated before the first entry")
	ac.keep(a, 0x100, 8, 3, 1)
	ac.keep(b, 0x200, 8, 3, 2)
	ac.keep(d, 0x400, 8, 3, 4)
	require.Len(t, ac.sets, 4)
	require.Equal(t, uintptr(64), unsafe.Sizeof(acSet{}), "a set is one cache line")
	require.Zero(t, uintptr(unsafe.Pointer(&ac.sets[0]))%64, "sets are line-aligned")
	require.Equal(t, acEntry{word: 0x100, st: 8, idx: 3, tag: 1, stamp: 1, state: acLive}, *ac.at(a))
	require.Equal(t, acEntry{word: 0x200, st: 8, idx: 3, tag: 2, stamp: 2, state: acLive}, *ac.at(b))
	ac.keep(a, 0x180, 8, 3, 7) // in place: b stays
	require.Equal(t, Slot(0x180), ac.at(a).word)
	require.NotNil(t, ac.at(b))
	ac.keep(c, 0x300, 8, 3, 3) // c first, b second, a (second way since b came) evicted
	require.NotNil(t, ac.at(c))
	require.NotNil(t, ac.at(b))
	require.Nil(t, ac.at(a))
	require.NotNil(t, ac.at(d), "another set is untouched")
	ac.drop(c)
	require.Nil(t, ac.at(c))
	require.NotNil(t, ac.at(d))
	// An update takes its key's entry, then keeps the new one: the set's other key stays,
	// whichever way the taken entry was in.
	ac.keep(c, 0x300, 8, 3, 3) // [c b]
	for _, k := range []*opState{c, b, c, b} {
		e, _ := ac.take(k)
		require.NotZero(t, e.word)
		ac.keep(k, 0x500, 8, 3, 5)
		require.NotNil(t, ac.at(b), "b kept")
		require.NotNil(t, ac.at(c), "c kept")
	}
	ac.clear()
	require.Nil(t, ac.at(d))
}

// TestAddrCacheMisses: an entry's miss count survives take (history alone, which at does not
// return) and the keep after it; a keep over an entry naming another block counts a miss, over
// the same block takes one back; the count saturates at acMaxMisses and makes the entry
// volatile from acVolatile; drop forgets the history too.
func TestAddrCacheMisses(t *testing.T) {
	a := &opState{k: keyHash{h1: 1 << 32, h2: 5 << 32}}
	ac := addrCache{size: 8}
	ac.keep(a, 0x100, 8, 3, 1)
	misses := func() uint32 { return ac.find(a).misses() }
	require.Zero(t, misses())
	ac.keep(a, 0x200, 8, 3, 2) // another block
	require.Equal(t, uint32(1), misses())
	ac.keep(a, 0x200, 8, 3, 3) // the same address, another stamp: a reuse
	require.Equal(t, uint32(2), misses())
	require.True(t, ac.at(a).volatile())
	ac.keep(a, 0x300, 8, 3, 3)
	ac.keep(a, 0x400, 8, 3, 3)
	require.Equal(t, uint32(acMaxMisses), misses(), "saturates")
	ac.keep(a, 0x400, 8, 3, 3) // the same block
	require.Equal(t, uint32(acMaxMisses-1), misses())

	e, found := ac.take(a)
	require.Equal(t, Slot(0x400), e.word)
	require.Same(t, ac.find(a), found)
	require.Nil(t, ac.at(a), "taken: no block named")
	require.Equal(t, uint32(acMaxMisses-1), misses(), "the history stays")
	ac.miss(a, found, -1)
	ac.keep(a, 0x500, 8, 3, 5) // after history alone: carried, not counted again
	require.Equal(t, uint32(acMaxMisses-2), misses())
	require.False(t, ac.at(a).volatile())
	for range 5 {
		ac.at(a).count(-1)
	}
	require.Zero(t, misses(), "never below zero")
	ac.drop(a)
	require.Nil(t, ac.find(a))
}

// TestAddrCacheRate: the handle's stale rate crosses one half after about 44 stale
// observations in a row (1-(63/64)^n), so that useful turns false, and back after as many
// fresh ones; it stays within [0, acRateOne).
func TestAddrCacheRate(t *testing.T) {
	var ac addrCache
	require.True(t, ac.useful())
	n := 0
	for ac.useful() {
		ac.observe(true)
		n++
		require.Less(t, n, 100)
	}
	require.InDelta(t, 44, n, 1)
	for range 1000 {
		ac.observe(true)
	}
	require.Less(t, ac.stale, uint32(acRateOne))
	n = 0
	for !ac.useful() {
		ac.observe(false)
		n++
	}
	require.InDelta(t, 44, n, 2)
}

// TestAddrCacheEarly: the buckets are asked for first once more than a quarter of recent
// operations needed the lookup (some 18 lookups in a row from none), never while the cache
// holds nothing, and no longer once entries answer again.
func TestAddrCacheEarly(t *testing.T) {
	var ac addrCache
	for range 100 {
		ac.lookedUp(true)
	}
	require.False(t, ac.early(), "an empty cache: nothing to overlap")
	ac = addrCache{sets: make([]acSet, 4)}
	require.False(t, ac.early())
	n := 0
	for !ac.early() {
		ac.lookedUp(true)
		n++
		require.Less(t, n, 100)
	}
	require.InDelta(t, 19, n, 1)
	for range 1000 {
		ac.lookedUp(true)
	}
	n = 0
	for ac.early() {
		ac.lookedUp(false)
		n++
		require.Less(t, n, 200)
	}
	require.InDelta(t, 89, n, 2)
}

// TestAddrCacheHolds: an entry found earlier in an operation serves miss and keepAt while it
// is still the key's; after a clear (a node adoption) they search the set again, as keep does.
func TestAddrCacheHolds(t *testing.T) {
	a := &opState{k: keyHash{h1: 1 << 32, h2: 5 << 32}}
	b := &opState{k: keyHash{h1: 2 << 32, h2: 5 << 32}} // a's set, another tag
	ac := addrCache{size: 8}
	ac.keep(a, 0x100, 8, 3, 1)
	ac.keep(b, 0x200, 8, 4, 2) // [b a]
	_, found := ac.take(a)
	require.Same(t, ac.find(a), found)
	require.True(t, found.holds(a))
	require.False(t, found.holds(b), "another key's tag")
	require.False(t, (*acEntry)(nil).holds(a))
	ac.miss(a, found, +1)
	require.Equal(t, uint32(1), ac.find(a).misses())
	ac.keepAt(a, found, 0x300, 8, 3, 3)
	require.Equal(t, Slot(0x300), ac.at(a).word)
	require.Equal(t, Slot(0x200), ac.at(b).word, "b kept")

	// A clear empties the entry found: keepAt then places the key's entry as keep would.
	_, found = ac.take(a)
	ac.clear()
	require.False(t, found.holds(a))
	ac.miss(a, found, +1) // no entry: nothing counted
	require.Nil(t, ac.find(a))
	ac.keepAt(a, found, 0x400, 8, 3, 4)
	require.Equal(t, Slot(0x400), ac.at(a).word)
	require.Zero(t, ac.find(a).misses())
}
