package blink

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
)

func leafOf(n int, vlen int) *node {
	l := &node{inf: true, right: 7}
	for i := range n {
		l.keys = append(l.keys, fmt.Appendf(nil, "user%06d", i*3))
		l.vals = append(l.vals, make([]byte, vlen))
		l.vals[i][0] = byte(i)
	}
	return l
}

func TestNodeRoundTrip(t *testing.T) {
	l := leafOf(5, 9)
	l.inf, l.high = false, []byte("zz")
	b := make([]byte, 512)
	k := l.encode(b)
	require.Equal(t, l.size(), k)
	got, err := decode(b)
	require.NoError(t, err)
	for i, off := range got.voff { // each value where the line holds it
		require.Equal(t, l.vals[i], b[off:off+len(l.vals[i])], "value %d", i)
	}
	got.voff = nil
	require.Equal(t, l, got)

	in := &node{level: 2, inf: true, keys: [][]byte{[]byte("b"), []byte("dd")}, kids: []uint64{1, 2, 3}}
	k = in.encode(b)
	require.Equal(t, in.size(), k)
	got, err = decode(b)
	require.NoError(t, err)
	require.Equal(t, in, got)
	require.Equal(t, uint64(1), got.child([]byte("a")))
	require.Equal(t, uint64(2), got.child([]byte("b")))
	require.Equal(t, uint64(2), got.child([]byte("c")))
	require.Equal(t, uint64(3), got.child([]byte("dd")))

	_, err = decode(make([]byte, 64))
	require.ErrorIs(t, err, ErrCorrupt)
	b[2] = 200 // more entries than the body holds
	_, err = decode(b[:40])
	require.ErrorIs(t, err, ErrCorrupt)
}

func TestSplitLeaf(t *testing.T) {
	for _, line := range []int{256, 512, 2048} {
		mk, mkv := Limits(line)
		l := leafOf(0, 0)
		// Fill with largest entries until over the line, as an insert would.
		for i := 0; l.size() <= line; i++ {
			l.keys = append(l.keys, fmt.Appendf(nil, "%0*d", mk, i))
			l.vals = append(l.vals, make([]byte, mkv-mk))
		}
		old := len(l.keys)
		r, sep := l.split()
		require.LessOrEqual(t, l.size(), line, "left half of %d", line)
		require.LessOrEqual(t, r.size(), line, "right half of %d", line)
		require.Equal(t, old, len(l.keys)+len(r.keys))
		require.Equal(t, sep, r.keys[0])
		require.Equal(t, sep, l.high)
		require.True(t, r.inf)
		require.Equal(t, uint64(7), r.right)
		require.False(t, l.covers(sep))
		require.True(t, l.covers(l.keys[len(l.keys)-1]))
	}
}

// TestSplitMixed overflows leaves of random entry sizes within Limits by one entry and checks
// that both halves fit.
func TestSplitMixed(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, line := range []int{256, 512, 2048, 4096} {
		mk, mkv := Limits(line)
		for range 2000 {
			l := &node{high: bytes.Repeat([]byte{0xff}, mk)}
			for i := 0; l.size() <= line; i++ {
				kl := 1 + rng.IntN(mk)
				if kl < 5 {
					kl = 5
				}
				vl := rng.IntN(mkv - kl + 1)
				if rng.IntN(2) == 0 {
					vl = mkv - kl
				}
				l.keys = append(l.keys, fmt.Appendf(nil, "%0*d", kl, i))
				l.vals = append(l.vals, make([]byte, vl))
			}
			sort.Slice(l.keys, func(i, j int) bool { return bytes.Compare(l.keys[i], l.keys[j]) < 0 })
			r, sep := l.split()
			// The left half's high key is the separator, at most a key's length.
			require.LessOrEqual(t, len(sep), mk)
			require.LessOrEqual(t, l.size(), line, "left half of %d", line)
			require.LessOrEqual(t, r.size(), line, "right half of %d", line)
			require.NotEmpty(t, l.keys)
			require.NotEmpty(t, r.keys)
		}
	}
}

func TestSplitInternal(t *testing.T) {
	in := &node{level: 1, high: []byte("zzz")}
	in.kids = []uint64{100}
	for i := range 9 {
		in.keys = append(in.keys, fmt.Appendf(nil, "k%02d", i))
		in.kids = append(in.kids, uint64(101+i))
	}
	r, sep := in.split()
	require.Equal(t, len(in.keys)+1, len(in.kids))
	require.Equal(t, len(r.keys)+1, len(r.kids))
	require.Equal(t, 9, len(in.keys)+len(r.keys)+1, "one key pushed up")
	require.Equal(t, sep, in.high)
	require.Equal(t, []byte("zzz"), r.high)
	// The pushed-up key's right child leads the right half.
	require.Equal(t, in.kids[len(in.kids)-1]+1, r.kids[0])
}
