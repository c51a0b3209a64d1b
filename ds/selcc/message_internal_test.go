package selcc

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
)

func TestInvalidationRoundTrip(t *testing.T) {
	v := invalidation{kind: peerWr, prio: 7, from: 3, gcl: GCL(farmem.MakeAddr(1, 4096)),
		flag: farmem.MakeAddr(farmem.ComputeID(3).Node(), 4096), data: farmem.MakeAddr(farmem.ComputeID(3).Node(), 1<<20), seq: 99}
	got, err := decodeInvalidation(v.encode())
	require.NoError(t, err)
	require.Equal(t, v, got)
}

// FuzzDecodeInvalidation: any bytes decode to a message or to an error wrapping ErrInvalid,
// never a panic; what decodes encodes back to the same bytes.
func FuzzDecodeInvalidation(f *testing.F) {
	f.Add(invalidation{kind: peerRd, seq: 1}.encode())
	f.Add([]byte{})
	f.Add(make([]byte, msgLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := decodeInvalidation(b)
		if err != nil {
			require.ErrorIs(t, err, farmem.ErrInvalid)
			return
		}
		require.Equal(t, b, v.encode())
	})
}
