package alloc

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// chunkFree agrees with a map of the same counts through random adds, subs and dels spread
// over several pages, and each visits exactly the nonzero chunks in ascending order.
func TestChunkFreeMatchesMap(t *testing.T) {
	const base, chunk = 1 << 20, 64 << 10
	f := newChunkFree(base, chunk)
	want := map[uint64]uint64{}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		c := base + uint64(r.IntN(3*chunkFreePage))*chunk
		n := uint64(r.IntN(4096))
		switch r.IntN(5) {
		case 0, 1, 2:
			f.add(c, n)
			if n > 0 {
				want[c] += n
			}
		case 3:
			f.sub(c, n)
			if want[c] <= n {
				delete(want, c)
			} else {
				want[c] -= n
			}
		case 4:
			f.del(c)
			delete(want, c)
		}
		require.Equal(t, want[c], f.get(c))
	}
	require.Equal(t, len(want), f.len())
	last := uint64(0)
	seen := 0
	f.each(func(c, n uint64) {
		require.Greater(t, c+1, last)
		last = c + 1
		require.Equal(t, want[c], n, "chunk %#x", c)
		seen++
	})
	require.Equal(t, len(want), seen)
	require.Zero(t, f.get(base+uint64(10*chunkFreePage)*chunk), "a chunk beyond every page")
}
