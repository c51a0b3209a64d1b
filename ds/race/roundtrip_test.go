package race_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem/local"
)

// placed returns a key (not among used) whose candidate main buckets are b1 and b2 (of
// 2*Groups, in hash order) and whose fingerprint is fp in tab, found by search: the hash is
// deterministic, and about one key in 2*Groups*2*Groups*256 fits.
func placed(t *testing.T, tab *race.Table, b1, b2 uint64, fp uint8, used map[string]bool) []byte {
	t.Helper()
	for i := range uint64(1 << 28) {
		k := []byte(fmt.Sprintf("key-%d", i))
		if used[string(k)] {
			continue
		}
		if g1, g2, gfp := race.Place(tab, k); g1 == b1 && g2 == b2 && gfp == fp {
			used[string(k)] = true
			return k
		}
	}
	t.Fatalf("no key placed at buckets %d, %d with fingerprint %#x", b1, b2, fp)
	return nil
}

// TestRoundTrips asserts the round-trip constants (and the atomics) of each operation,
// uncontended, with m.Stats() deltas, with and without a slot of another key holding the key's
// fingerprint.
func TestRoundTrips(t *testing.T) {
	const groups = 8
	e := newEnv(t, local.Options{}, race.Params{Groups: groups})
	c := e.open(t, 0, race.Options{})
	used := map[string]bool{}
	ctx := context.Background()

	// The keys first: searching for them takes a while under the race detector, and an
	// allocator whose announcement grew older than its Refresh meanwhile would spend a round
	// trip renewing it inside a measured operation.
	warm := placed(t, c.tab, 15, 15, 1, used)
	k1 := placed(t, c.tab, 2, 9, 0x42, used)
	same := placed(t, c.tab, 2, 9, 0x42, used)   // same buckets and fingerprint as k1, another key
	other := placed(t, c.tab, 4, 11, 0x42, used) // other buckets
	// Warm up the allocator (its first block claims a chunk) on buckets no other key uses.
	require.NoError(t, c.tab.Insert(ctx, warm, []byte("warm")))
	c.assertCost(t, "insert", race.InsertRoundTrips, 2, func() error { return c.tab.Insert(ctx, k1, []byte("v1")) }, nil)
	c.assertCost(t, "insert existing", race.InsertExistingRoundTrips, 0, func() error { return c.tab.Insert(ctx, k1, []byte("v1")) }, race.ErrExists)
	c.assertCost(t, "search", race.SearchRoundTrips, 0, func() error {
		v, err := c.tab.Search(ctx, k1)
		if err == nil && string(v) != "v1" {
			t.Fatalf("search found %q", v)
		}
		return err
	}, nil)
	c.assertCost(t, "search absent", race.SearchAbsentRoundTrips, 0, func() error { _, err := c.tab.Search(ctx, other); return err }, race.ErrNotFound)
	c.assertCost(t, "search absent, fp match", race.SearchAbsentRoundTrips+race.FingerprintMatchRoundTrips, 0, func() error { _, err := c.tab.Search(ctx, same); return err }, race.ErrNotFound)
	c.assertCost(t, "update", race.UpdateRoundTrips, 1, func() error { return c.tab.Update(ctx, k1, []byte("v2")) }, nil)
	c.assertCost(t, "update absent", race.AbsentRoundTrips, 0, func() error { return c.tab.Update(ctx, other, []byte("v2")) }, race.ErrNotFound)
	c.assertCost(t, "insert, fp match", race.InsertRoundTrips+race.FingerprintMatchRoundTrips, 2, func() error { return c.tab.Insert(ctx, same, []byte("s")) }, nil)
	c.assertCost(t, "delete", race.DeleteRoundTrips, 1, func() error { return c.tab.Delete(ctx, k1) }, nil)
	c.assertCost(t, "delete absent, fp match", race.AbsentRoundTrips+race.FingerprintMatchRoundTrips, 0, func() error { return c.tab.Delete(ctx, k1) }, race.ErrNotFound)
	v, err := c.tab.Search(ctx, same)
	require.NoError(t, err)
	require.Equal(t, "s", string(v))

	// A second handle on the same client, its allocator's announcement fresh.
	before := c.m.Stats()
	tab2, err := race.Open(ctx, c.m, c.a, e.root, race.Options{})
	require.NoError(t, err)
	require.Equal(t, uint64(race.OpenRoundTrips), c.m.Stats().Sub(before).RoundTrips, "open")
	require.NoError(t, tab2.Close())
}
