package race

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHashKeyIsHash64 checks that the one-pass hashKey gives what the table's layout was built
// on, hash64 under the seed and under seed^mulC, for keys of every length up to 80 bytes,
// taken at every offset of a larger buffer (the tail load reads before the tail).
func TestHashKeyIsHash64(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 128)
	for range 50 {
		for i := range buf {
			buf[i] = byte(rng.Uint32())
		}
		seed := rng.Uint64()
		for n := 0; n <= 80; n++ {
			for off := 0; off < 8; off++ {
				key := buf[off : off+n]
				got := hashKey(seed, key)
				require.Equal(t, hash64(seed, key), got.h1, "h1, %d bytes at %d", n, off)
				require.Equal(t, hash64(seed^mulC, key), got.h2, "h2, %d bytes at %d", n, off)
			}
		}
	}
}
