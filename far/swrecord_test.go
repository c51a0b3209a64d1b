package far

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSWRecord: a record opens to the value it was sealed with, for every value size up to a
// few words past a displaced-byte word boundary; a record with any one word taken from a
// record of the next version (any tear a concurrent store can cause) fails the check; and a
// stamped word from a version 256 stores away, framed by the right versions, passes it, which
// is the bound the package doc states for transports whose reads copy out of order.
func TestSWRecord(t *testing.T) {
	for n := 1; n <= 8*16; n++ {
		k, _ := swLayout(n)
		val := make([]byte, n)
		for i := range val {
			val[i] = byte(0xA0 + i) // top bytes nonzero, so displacement matters
		}
		seal := func(v uint64, fill byte) []byte {
			rec := make([]byte, swRecordSize(n))
			for i := range val {
				rec[8+i] = val[i] ^ fill
			}
			swSeal(rec, n, v)
			return rec
		}
		a := seal(41, 0)
		require.True(t, swOpen(bytes.Clone(a), k), "n=%d", n)
		opened := bytes.Clone(a)
		require.True(t, swOpen(opened, k))
		require.Equal(t, val, opened[8:8+n], "n=%d", n)
		require.Equal(t, uint64(41), binary.LittleEndian.Uint64(a[:8]))
		require.Equal(t, uint64(41), binary.LittleEndian.Uint64(a[len(a)-8:]))

		b := seal(42, 0x5A)
		for w := 0; w < len(a)/8; w++ {
			torn := bytes.Clone(a)
			copy(torn[8*w:8*w+8], b[8*w:8*w+8])
			require.False(t, swOpen(torn, k), "n=%d: word %d of the next version was not caught", n, w)
		}
		c := seal(41+256, 0x5A)
		aba := bytes.Clone(a)
		copy(aba[8:16], c[8:16])
		require.True(t, swOpen(aba, k), "n=%d: the stamp is a byte: a word 256 versions away matches", n)
	}
}
