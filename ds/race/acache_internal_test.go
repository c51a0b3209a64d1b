package race

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAddrCacheSets: keys sharing a set keep two entries; a new key goes to the first way and
// moves the first way's entry to the second, evicting the second's; a key kept again updates
// its own entry in place; drop removes only the key's own entry. A cache of size 0 keeps
// nothing.
func TestAddrCacheSets(t *testing.T) {
	op := func(h1, h2 uint64) *opState { return &opState{k: keyHash{h1: h1, h2: h2}} }
	// Three keys in set 5 (the second hash's high half), told apart by their tags (the first
	// hash's high half); a fourth in another set.
	a, b, c, d := op(1<<32, 5<<32), op(2<<32, 5<<32), op(3<<32, 5<<32), op(4<<32, 6<<32)
	var none addrCache
	none.keep(a, 0x100, 8, 1)
	require.Nil(t, none.at(a))

	ac := addrCache{size: 8}
	require.Nil(t, ac.at(a), "nothing allocated before the first entry")
	ac.keep(a, 0x100, 8, 1)
	ac.keep(b, 0x200, 8, 2)
	ac.keep(d, 0x400, 8, 4)
	require.Len(t, ac.entries, 8)
	require.Equal(t, acEntry{word: 0x100, slot: 8, tag: 1, stamp: 1}, *ac.at(a))
	require.Equal(t, acEntry{word: 0x200, slot: 8, tag: 2, stamp: 2}, *ac.at(b))
	ac.keep(a, 0x180, 8, 7) // in place: b stays
	require.Equal(t, Slot(0x180), ac.at(a).word)
	require.NotNil(t, ac.at(b))
	ac.keep(c, 0x300, 8, 3) // c first, b second, a (second way since b came) evicted
	require.NotNil(t, ac.at(c))
	require.NotNil(t, ac.at(b))
	require.Nil(t, ac.at(a))
	require.NotNil(t, ac.at(d), "another set is untouched")
	ac.drop(c)
	require.Nil(t, ac.at(c))
	require.NotNil(t, ac.at(d))
	ac.clear()
	require.Nil(t, ac.at(d))
}
