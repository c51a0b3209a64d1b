package far

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSWRecord: a record holds the value it was sealed with, untouched, between two copies of
// its version, for every value size up to a few words; it is valid as sealed, and invalid
// with either version word taken from the next version's record (what a load sees when a
// store overlaps it: the argument of the package doc is that every tear shows there).
func TestSWRecord(t *testing.T) {
	for n := 1; n <= 8*16; n++ {
		val := make([]byte, n)
		for i := range val {
			val[i] = byte(0xA0 + i)
		}
		seal := func(v uint64, fill byte) []byte {
			rec := bytes.Repeat([]byte{0xEE}, swRecordSize(n))
			for i := range val {
				rec[8+i] = val[i] ^ fill
			}
			swSeal(rec, n, v)
			return rec
		}
		a := seal(41, 0)
		require.Len(t, a, 8*(swWords(n)+2))
		require.True(t, swValid(a), "n=%d", n)
		require.Equal(t, val, a[8:8+n], "n=%d", n)
		require.Equal(t, make([]byte, len(a)-16-n), a[8+n:len(a)-8], "n=%d: padding zeroed", n)
		require.Equal(t, uint64(41), binary.LittleEndian.Uint64(a[:8]))
		require.Equal(t, uint64(41), binary.LittleEndian.Uint64(a[len(a)-8:]))

		b := seal(42, 0x5A)
		for _, w := range []int{0, len(a)/8 - 1} {
			torn := bytes.Clone(a)
			copy(torn[8*w:8*w+8], b[8*w:8*w+8])
			require.False(t, swValid(torn), "n=%d: version word %d of the next store was not caught", n, w)
		}
	}
}
