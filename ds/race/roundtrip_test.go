package race_test

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

// rawHash makes a key's hashes its own first 16 bytes, so a test places keys exactly.
func rawHash(key []byte) (uint64, uint64) {
	var b [16]byte
	copy(b[:], key)
	return binary.LittleEndian.Uint64(b[:8]), binary.LittleEndian.Uint64(b[8:])
}

// placed returns a key whose first candidate bucket is main bucket b1 and second b2 (of 2*groups),
// with fingerprint fp (8 bits) and a tag telling keys apart.
func placed(groups int, b1, b2 uint64, fp uint8, tag byte) []byte {
	// reduce(x, n) = x*n >> 32: the smallest x with reduce(x, n) == b is ceil(b<<32 / n).
	n := uint64(2 * groups)
	x1 := (b1<<32 + n - 1) / n
	x2 := (b2<<32 + n - 1) / n
	k := make([]byte, 17)
	binary.LittleEndian.PutUint64(k[:8], x1<<32)
	binary.LittleEndian.PutUint64(k[8:], uint64(fp)<<56|x2)
	k[16] = tag
	return k
}

// TestRoundTrips asserts the round trips (and the atomics) of each operation, uncontended, with
// m.Stats() deltas: Search 2 (1 for a key no slot's fingerprint matches), Insert 3 (4 when a
// slot of another key has its fingerprint), Update 3, Delete 3.
func TestRoundTrips(t *testing.T) {
	const groups = 8
	e := newEnv(t, local.Options{}, race.Params{Groups: groups})
	c := e.open(t, 0, race.Options{})
	race.SetHashForTest(c.tab, rawHash)
	ctx := context.Background()

	cost := func(name string, wantRTT, wantCAS uint64, f func() error, wantErr error) {
		t.Helper()
		before := c.m.Stats()
		err := f()
		if wantErr != nil {
			require.ErrorIs(t, err, wantErr, name)
		} else {
			require.NoError(t, err, name)
		}
		d := c.m.Stats().Sub(before)
		require.Equal(t, wantRTT, d.RoundTrips, "%s: round trips (%v)", name, d)
		require.Equal(t, wantCAS, d.VerbsOf(farmem.OpCAS)+d.VerbsOf(farmem.OpMaskedCAS), "%s: atomics (%v)", name, d)
		require.Zero(t, d.VerbsOf(farmem.OpFAA), "%s: FAAs (%v)", name, d)
		t.Logf("%-28s %v", name, d)
	}
	// Warm up the allocator (its first block claims a chunk) on buckets no other key uses.
	require.NoError(t, c.tab.Insert(ctx, placed(groups, 15, 15, 1, 0), []byte("warm")))

	k1 := placed(groups, 2, 9, 0x42, 1)
	same := placed(groups, 2, 9, 0x42, 2)   // same buckets and fingerprint as k1, another key
	other := placed(groups, 4, 11, 0x42, 3) // other buckets
	cost("insert", 3, 2, func() error { return c.tab.Insert(ctx, k1, []byte("v1")) }, nil)
	cost("insert existing", 2, 0, func() error { return c.tab.Insert(ctx, k1, []byte("v1")) }, race.ErrExists)
	cost("search", 2, 0, func() error {
		v, err := c.tab.Search(ctx, k1)
		if err == nil && string(v) != "v1" {
			t.Fatalf("search found %q", v)
		}
		return err
	}, nil)
	cost("search absent", 1, 0, func() error { _, err := c.tab.Search(ctx, other); return err }, race.ErrNotFound)
	cost("search absent, fp match", 2, 0, func() error { _, err := c.tab.Search(ctx, same); return err }, race.ErrNotFound)
	cost("update", 3, 1, func() error { return c.tab.Update(ctx, k1, []byte("v2")) }, nil)
	cost("update absent", 1, 0, func() error { return c.tab.Update(ctx, other, []byte("v2")) }, race.ErrNotFound)
	cost("insert, fp match", 4, 2, func() error { return c.tab.Insert(ctx, same, []byte("s")) }, nil)
	cost("delete", 3, 1, func() error { return c.tab.Delete(ctx, k1) }, nil)
	cost("delete absent, fp match", 2, 0, func() error { return c.tab.Delete(ctx, k1) }, race.ErrNotFound)
	v, err := c.tab.Search(ctx, same)
	require.NoError(t, err)
	require.Equal(t, "s", string(v))
}
