package race

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSplitSentinels: after splitSentinels, every combined bucket of a new half (a main bucket
// and its group's overflow bucket) holds a frozen slot, the moved (frozen) words are untouched,
// and a group gains at most one frozen empty slot, none where its overflow bucket already held
// a frozen word; for geometries and fill patterns from empty to full.
func TestSplitSentinels(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, g := range []geometry{newGeometry(1, 2, 0), newGeometry(8, 8, 16), newGeometry(64, 8, 16), newGeometry(5, 3, 8)} {
		for _, fill := range []float64{0, 0.05, 0.3, 0.7, 1} {
			slots := make([]byte, 8*g.nslots)
			moved := make([]Slot, g.nslots)
			for i := range moved {
				if rng.Float64() < fill {
					moved[i] = Slot(0x0101_0000_0000_0040|uint64(i)<<8) | SlotFrozen
					binary.LittleEndian.PutUint64(slots[8*i:], uint64(moved[i]))
				}
			}
			g.splitSentinels(slots)
			word := func(i uint64) Slot { return Slot(binary.LittleEndian.Uint64(slots[8*i:])) }
			for i := range g.nslots {
				if moved[i] != 0 {
					require.Equal(t, moved[i], word(i), "moved slot %d changed", i)
				} else if w := word(i); w != 0 {
					require.Equal(t, SlotFrozen, w, "slot %d", i)
				}
			}
			for grp := range g.groups {
				added, overflowHad := 0, false
				for i := grp * 3 * g.perB; i < (grp+1)*3*g.perB; i++ {
					if moved[i] == 0 && word(i) != 0 {
						added++
					}
					if i >= grp*3*g.perB+g.perB && i < grp*3*g.perB+2*g.perB && moved[i] != 0 {
						overflowHad = true
					}
				}
				require.LessOrEqual(t, added, 1, "group %d", grp)
				if overflowHad {
					require.Zero(t, added, "group %d: a sentinel beside a moved slot of its overflow bucket", grp)
				}
			}
			for mb := range 2 * g.groups {
				start := (mb/2)*3*g.perB + (mb%2)*g.perB
				frozen := false
				for i := start; i < start+2*g.perB; i++ {
					frozen = frozen || word(i).Frozen()
				}
				require.True(t, frozen, "geometry %+v, fill %.2f: combined bucket %d holds no frozen slot", g, fill, mb)
			}
		}
	}
}
