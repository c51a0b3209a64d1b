package race

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOwnerCases checks the owner rule's decision for each kind of header and move word.
func TestOwnerCases(t *testing.T) {
	const d = 2
	hdr := headerWord(d, 0b01)
	stay, leave := uint64(0b001), uint64(0b101) // first hashes: bit d 0 and 1, suffix 0b01
	for _, c := range []struct {
		hdr, move, h1 uint64
		want          ownership
	}{
		{hdr, 0, 0b10, ownsNot},                            // suffix differs
		{hdr, moveWord(d-1, moveBitsMask), leave, ownsAll}, // the previous split's word
		{hdr, moveWord(d, 0), leave, ownsAll},              // begun, nothing moved
		{hdr, moveWord(d, 1<<1), leave, ownsMixed},         // one region moved
		{hdr, moveWord(d, 1<<3), leave, ownsMixed},         // the other
		{hdr, moveWord(d, 1<<1|1<<3), leave, ownsMoved},    // both
		{hdr, moveWord(d, 1<<0|1<<2), leave, ownsAll},      // others moved
		{hdr, moveWord(d, moveBitsMask), stay, ownsAll},    // a staying key never leaves
		{hdr, moveWord(d+1, 0), leave, ownsTorn},           // the next split's word
		{hdr, moveWord(d+1, 0), stay, ownsTorn},
		{headerWord(0, 0), 0, leave, ownsAll}, // a fresh table at depth 0
		{headerWord(0, 0), moveWord(0, 1<<1), 0b1, ownsMixed},
		{headerWord(0, 0), moveWord(0, 1<<1), 0b0, ownsAll},
	} {
		require.Equal(t, c.want, owner(c.hdr, c.move, c.h1, 1, 3), "header %#x move %#x h1 %#b", c.hdr, c.move, c.h1)
	}
}

// TestOwnerTornReads replays a subtable's header and move words through a split at depth 2
// moved region by region, its end and the start of the next split, and checks every torn
// read: slots read at time ts, then the header at th and the move word at tm, both at or after
// ts, in either order. A decision that the subtable holds the key (ownsAll) must have been
// true at ts, and a mixed decision's unmoved region unmoved at ts; otherwise the lookup would
// use slots the subtable no longer held.
func TestOwnerTornReads(t *testing.T) {
	const d = 2
	const suffix = 0b01
	type state struct{ hdr, move uint64 }
	var hist []state
	at := func(h, m uint64) { hist = append(hist, state{h, m}) }
	at(headerWord(d, suffix), moveWord(d-1, moveBitsMask)) // the previous split's leftover
	at(headerWord(d, suffix), moveWord(d, 0))              // begin
	bits := uint64(0)
	for _, r := range []uint{0, 3, 1, 2} { // regions moved, in this order
		bits |= 1 << r
		at(headerWord(d, suffix), moveWord(d, bits))
	}
	at(headerWord(d+1, suffix), moveWord(d, bits)) // end: the header moves
	at(headerWord(d+1, suffix), moveWord(d+1, 0))  // the next split begins
	bits = 0
	for _, r := range []uint{3, 1} {
		bits |= 1 << r
		at(headerWord(d+1, suffix), moveWord(d+1, bits))
	}
	at(headerWord(d+2, suffix), moveWord(d+1, 1<<3|1<<1))
	keys := []struct {
		h1     uint64
		r1, r2 uint
	}{
		{0b0001, 1, 3}, {0b0101, 1, 3}, {0b1101, 1, 3}, {0b1001, 1, 3},
		{0b0101, 2, 2}, {0b1101, 0, 3}, {0b0101, 0, 2}, {0b1001, 3, 1},
	}
	checked := 0
	for _, k := range keys {
		for ts := range hist {
			truth := owner(hist[ts].hdr, hist[ts].move, k.h1, k.r1, k.r2)
			for th := ts; th < len(hist); th++ {
				for tm := ts; tm < len(hist); tm++ {
					o := owner(hist[th].hdr, hist[tm].move, k.h1, k.r1, k.r2)
					what := fmt.Sprintf("key %#b (regions %d, %d): slots at %d, header at %d, move at %d: %v, truth %v", k.h1, k.r1, k.r2, ts, th, tm, o, truth)
					switch o {
					case ownsAll:
						require.Equal(t, ownsAll, truth, what)
						checked++
					case ownsMixed:
						require.Contains(t, []ownership{ownsAll, ownsMixed}, truth, what)
						if truth == ownsMixed {
							require.Equal(t, moveBits(hist[ts].move)&(1<<k.r1|1<<k.r2), moveBits(hist[tm].move)&(1<<k.r1|1<<k.r2), what)
						}
						checked++
					}
				}
			}
		}
	}
	require.NotZero(t, checked)
}

// TestUnbornWord: the unborn word is frozen, tentative, empty, neither a tombstone nor
// committed, and no insert takes it.
func TestUnbornWord(t *testing.T) {
	w := unbornSlot
	require.True(t, w.Frozen())
	require.True(t, w.Tentative())
	require.True(t, w.Empty())
	require.False(t, w.Tombstone())
	require.False(t, w.Committed())
	require.Zero(t, w.ReusableAt())
	require.Equal(t, "unborn", w.String())
	tab := &Table{}
	require.False(t, tab.free(w, 1<<60))
}

// TestRegions: regions are groups up to maxRegions groups, and spread groups evenly beyond.
func TestRegions(t *testing.T) {
	g := newGeometry(4, 2, 0)
	require.Equal(t, uint64(4), g.regions())
	require.Equal(t, uint(2), g.regionOfSlot(2*6+3))
	g = newGeometry(64, 8, 0)
	require.Equal(t, uint64(maxRegions), g.regions())
	seen := make(map[uint]bool)
	for grp := range g.groups {
		r := g.regionOf(grp)
		require.Less(t, r, uint(maxRegions))
		seen[r] = true
	}
	require.Len(t, seen, maxRegions)
	require.Equal(t, uint(maxRegions-1), g.regionOfSlot(g.nslots-1))
}

// TestRegionSlots: regions' slot ranges tile a subtable, each slot in the range of its region.
func TestRegionSlots(t *testing.T) {
	for _, groups := range []uint64{1, 4, 55, 56, 57, 64, 100, 1 << 10} {
		g := newGeometry(groups, 2, 0)
		next := uint64(0)
		for r := range uint(g.regions()) {
			lo, hi := g.regionSlots(r)
			require.Equal(t, next, lo, "groups %d region %d", groups, r)
			require.Less(t, lo, hi, "groups %d region %d", groups, r)
			for i := lo; i < hi; i++ {
				require.Equal(t, r, g.regionOfSlot(i), "groups %d slot %d", groups, i)
			}
			next = hi
		}
		require.Equal(t, g.nslots, next, "groups %d", groups)
		require.Equal(t, uint64(1)<<g.regions()-1, g.allRegions())
	}
}
