package generator

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// Binary64 keys are the big-endian encoding of the key number plus one: nonzero, below 2^63,
// and in key-number order bytewise, so ordered inserts (consecutive key numbers) produce
// increasing keys; the key number comes back out.
func TestBinary64Keys(t *testing.T) {
	k, err := AppendBinary64Key(nil, 0)
	require.NoError(t, err)
	require.Equal(t, []byte{0, 0, 0, 0, 0, 0, 0, 1}, k, "key number 0 is the integer 1, big-endian")
	k, err = AppendBinary64Key([]byte("p"), 0x0102030405060708)
	require.NoError(t, err)
	require.Equal(t, []byte{'p', 1, 2, 3, 4, 5, 6, 7, 9}, k, "appended after dst, big-endian")
	k, err = AppendBinary64Key(nil, MaxBinary64KeyNum)
	require.NoError(t, err)
	require.Equal(t, uint64(math.MaxInt64), binary.BigEndian.Uint64(k), "the largest key is 2^63-1")
	for _, bad := range []int64{-1, math.MaxInt64, math.MinInt64} {
		_, err := AppendBinary64Key(nil, bad)
		require.Error(t, err, "%d", bad)
	}

	// Consecutive key numbers, from 0 and around byte carries, give strictly increasing keys.
	r := rand.New(rand.NewPCG(1, 2))
	starts := []int64{0, 250, 65530, 1<<32 - 3, 1<<40 - 2}
	for range 20 {
		starts = append(starts, r.Int64N(MaxBinary64KeyNum-100))
	}
	for _, s := range starts {
		var prev []byte
		for kn := s; kn < s+10; kn++ {
			k, err := AppendBinary64Key(nil, kn)
			require.NoError(t, err)
			require.Len(t, k, Binary64Len)
			v := binary.BigEndian.Uint64(k)
			require.NotZero(t, v)
			require.Less(t, v, uint64(1)<<63)
			require.Equal(t, uint64(kn)+1, v, "the key number itself, not its hash")
			if prev != nil {
				require.Equal(t, 1, bytes.Compare(k, prev), "key %d after key %d", kn, kn-1)
			}
			back, ok := Binary64KeyNum(k)
			require.True(t, ok)
			require.Equal(t, kn, back)
			prev = k
		}
	}
	// Bytewise order is key-number order for any two key numbers.
	for range 1000 {
		a, b := r.Int64N(MaxBinary64KeyNum), r.Int64N(MaxBinary64KeyNum)
		ka, _ := AppendBinary64Key(nil, a)
		kb, _ := AppendBinary64Key(nil, b)
		want := 0
		if a < b {
			want = -1
		} else if a > b {
			want = 1
		}
		require.Equal(t, want, bytes.Compare(ka, kb), "%d vs %d", a, b)
	}
	for _, bad := range [][]byte{nil, {1}, make([]byte, 8), {0x80, 0, 0, 0, 0, 0, 0, 0}, make([]byte, 9)} {
		_, ok := Binary64KeyNum(bad)
		require.False(t, ok, "%x", bad)
	}
}
