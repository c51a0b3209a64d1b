package sim

import (
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestWheelTieOrder checks the wheel's buckets against the rule they implement: simultaneous
// events leave in the order of a swap-remove of a seeded random element from an array kept in
// push order, whatever the interleaving of pushes and pops.
func TestWheelTieOrder(t *testing.T) {
	rnd := rand.New(rand.NewPCG(7, 8))
	var q evQueue
	q.rng = 12345
	model := map[uint64][]uint64{} // bucket time -> args in push order
	rng := q.rng
	draw := func(n int) int {
		rng ^= rng >> 12
		rng ^= rng << 25
		rng ^= rng >> 27
		return int(((rng * 2685821657736338717) >> 32) * uint64(n) >> 32)
	}
	var arg uint64
	for round := range 20000 {
		if q.n == 0 || rnd.IntN(3) != 0 {
			// Push at the cursor or a few instants later, often onto a nonempty bucket.
			rel := q.cursor + uint64(rnd.IntN(4))
			arg++
			q.pushWheel(rel, evArrive, unsafe.Pointer(&round), arg)
			model[rel] = append(model[rel], arg)
			continue
		}
		at, _, _, got := q.pop()
		bk := model[at]
		require.NotEmpty(t, bk, "popped at %d from an empty bucket", at)
		for tm, b := range model {
			require.False(t, tm < at && len(b) > 0, "popped at %d before %d", at, tm)
		}
		i := 0
		if len(bk) > 1 {
			i = draw(len(bk))
		}
		require.Equal(t, bk[i], got)
		bk[i] = bk[len(bk)-1]
		model[at] = bk[:len(bk)-1]
	}
}
