package race

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// pickFree's fast path (free slots as bits of one word, the two combined buckets as ranges of
// positions of a whole view) chooses exactly the slot the walk of pickFreeSlow chooses, for
// every choice of the random pick: over random keys, geometries (the two buckets apart,
// overlapping or the same) and slot words (empty, taken, tentative, tombstones reusable or not,
// frozen).
func TestPickFreeMatchesSlowPath(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	rt := transport.NewWallRuntime(1)
	now := rt.Now()
	for trial := range 3000 {
		p := Params{Seed: r.Uint64(), FingerprintBits: 8}
		geo := newGeometry(uint64(1+r.IntN(6)), uint64(1+r.IntN(8)), 0)
		tab := &Table{geo: geo, rt: rt}
		var op opState
		key := []byte{byte(trial), byte(trial >> 8), byte(r.Uint32())}
		initOp(&p, &geo, &op, key)
		n := 2 * geo.perB
		var v view
		for j := range n {
			v.idx = append(v.idx, op.ranges[0]+j)
		}
		if !op.same {
			from := uint64(0)
			if end := op.ranges[0] + n; op.ranges[1] < end {
				from = end - op.ranges[1]
			}
			for j := from; j < n; j++ {
				v.idx = append(v.idx, op.ranges[1]+j)
			}
		}
		taken, err := MakeSlot(3, 64, farmem.MakeAddr(1, 4096))
		require.NoError(t, err)
		for range v.idx {
			var w Slot
			switch r.IntN(6) {
			case 0, 1:
				w = 0
			case 2:
				w = taken
			case 3:
				w = taken | SlotTentative
			case 4:
				w = MakeTombstone(now.Add(time.Duration(2*r.IntN(2)-1) * time.Hour)) // reusable long ago, or not for an hour
			case 5:
				w = SlotFrozen
			}
			if r.IntN(10) == 0 {
				w |= SlotFrozen
			}
			v.words = append(v.words, w)
		}
		var cFast, cSlow int
		cFast = -1
		_, nFast := tab.pickFree(&op, &v, func(c int) int { cFast = c; return 0 })
		cSlow = -1
		_, nSlow := tab.pickFreeSlow(&op, &v, func(c int) int { cSlow = c; return 0 })
		require.Equal(t, cSlow, cFast, "trial %d: free slots of the chosen bucket", trial)
		require.Equal(t, nSlow, nFast, "trial %d: the count reported", trial)
		for k := range max(cFast, 1) {
			fast, _ := tab.pickFree(&op, &v, func(int) int { return k })
			slow, _ := tab.pickFreeSlow(&op, &v, func(int) int { return k })
			require.Equal(t, slow, fast, "trial %d, choice %d: ranges %v same %v, words %v", trial, k, op.ranges, op.same, v.words)
		}
	}
}
