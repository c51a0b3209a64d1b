package hybrid_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/hybrid"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/internal/dstest"
)

// TestRoundTrips asserts each operation's round trips and verbs with a warm cache from
// m.Stats() deltas, and reports bytes per operation.
func TestRoundTrips(t *testing.T) {
	e := newEnv(t, local.Options{}, hybrid.Params{})
	cache := hybrid.NewCache(1 << 20)
	c := e.open(t, 0, hybrid.Options{Cache: cache})
	ctx := context.Background()

	type verbs struct{ read, write, cas, faa uint64 }
	cost := func(name string, wantRTT uint64, want verbs, f func() error, wantErr error) {
		t.Helper()
		d := dstest.Cost(t, c.m, name, f, wantErr)
		require.Equal(t, wantRTT, d.RoundTrips, "%s: round trips (%v)", name, d)
		got := verbs{d.VerbsOf(farmem.OpRead), d.VerbsOf(farmem.OpWrite), d.VerbsOf(farmem.OpCAS) + d.VerbsOf(farmem.OpMaskedCAS), d.VerbsOf(farmem.OpFAA)}
		require.Equal(t, want, got, "%s: verbs (%v)", name, d)
		t.Logf("%-22s %d round trips, %4d bytes in, %3d bytes out (%v)", name, d.RoundTrips, d.BytesIn, d.BytesOut, d)
	}
	const base = 0x0102030405060700
	// A leaf for the prefix, and a cached path to it.
	require.NoError(t, c.tree.Insert(ctx, key(base+1), 1))
	_, err := c.tree.Get(ctx, key(base+1))
	require.NoError(t, err)

	cost("get", hybrid.GetRoundTrips, verbs{read: 2}, func() error {
		v, err := c.tree.Get(ctx, key(base+1))
		require.Equal(t, uint64(1), v)
		return err
	}, nil)
	cost("get absent", hybrid.AbsentRoundTrips, verbs{read: 2}, func() error { _, err := c.tree.Get(ctx, key(base+2)); return err }, hybrid.ErrNotFound)
	cost("insert", hybrid.InsertRoundTrips, verbs{read: 2, write: 1, cas: 2, faa: 2}, func() error { return c.tree.Insert(ctx, key(base+2), 2) }, nil)
	cost("insert existing", hybrid.AbsentRoundTrips, verbs{read: 1, faa: 2}, func() error { return c.tree.Insert(ctx, key(base+2), 3) }, hybrid.ErrExists)
	cost("update", hybrid.UpdateRoundTrips, verbs{read: 1, write: 1, faa: 2}, func() error { return c.tree.Update(ctx, key(base+2), 4) }, nil)
	cost("update absent", hybrid.AbsentRoundTrips, verbs{read: 1, faa: 2}, func() error { return c.tree.Update(ctx, key(base+3), 4) }, hybrid.ErrNotFound)
	cost("delete", hybrid.DeleteRoundTrips, verbs{read: 1, cas: 1, faa: 2}, func() error { return c.tree.Delete(ctx, key(base+1)) }, nil)
	cost("delete absent", hybrid.AbsentRoundTrips, verbs{read: 1, faa: 2}, func() error { return c.tree.Delete(ctx, key(base+1)) }, hybrid.ErrNotFound)
	cost("get after update", hybrid.GetRoundTrips, verbs{read: 2}, func() error {
		v, err := c.tree.Get(ctx, key(base+2))
		require.Equal(t, uint64(4), v)
		return err
	}, nil)
	// A new 7-byte prefix under the cached root.
	cost("insert new leaf", hybrid.NewLeafRoundTrips, verbs{read: 1, write: 1, cas: 1}, func() error { return c.tree.Insert(ctx, key(0x0900000000000001), 9) }, nil)

	// A split by another client (same node, same cache would see it: use its own cache)
	// leaves c's cached special node stale: backtracking costs 3 round trips.
	const sp = 0x0a00000000000000
	other := e.open(t, 0, hybrid.Options{})
	for i := range uint64(64) {
		require.NoError(t, other.tree.Insert(ctx, key(sp+1+2*i), i))
	}
	require.NoError(t, other.tree.Insert(ctx, key(sp+200), 1)) // leaf full: a special node
	_, err = c.tree.Get(ctx, key(sp+200))
	require.NoError(t, err) // c caches the special node
	for i := range uint64(40) {
		require.NoError(t, other.tree.Insert(ctx, key(sp+0x42+2*i), i)) // splits the second leaf
	}
	census := audit(t, c)
	require.GreaterOrEqual(t, census.Special, 1)
	cost("get, stale special", hybrid.StaleSpecialRoundTrips, verbs{read: 5}, func() error {
		v, err := c.tree.Get(ctx, key(sp+0x43))
		require.Equal(t, uint64(0x21), v)
		return err
	}, nil)
	cost("get, refreshed", hybrid.GetRoundTrips, verbs{read: 2}, func() error { _, err := c.tree.Get(ctx, key(sp+0x43)); return err }, nil)
	leaves := len(audit(t, c).Leaves) - 2 // those under the special node
	cost("scan 256 keys' range", hybrid.ScanRoundTrips, verbs{read: 2 * uint64(leaves)}, func() error {
		ps, err := c.tree.Scan(ctx, sp, sp+256, 0)
		require.Len(t, ps, 64+1+40)
		return err
	}, nil)
	cost("scan, limit 10", hybrid.ScanRoundTrips, verbs{read: 2 * 2}, func() error {
		ps, err := c.tree.Scan(ctx, sp+0x41, sp+256, 10)
		require.Len(t, ps, 10)
		require.Equal(t, uint64(sp+0x41), ps[0].Key)
		return err
	}, nil)
	// Scan(100) at the paper's 50% fill, across two special nodes' ranges: one round of 2 to
	// 4 leaves (head and values each).
	const dense = 0x0b00000000000000
	for i := range uint64(512) {
		require.NoError(t, c.tree.Insert(ctx, key(dense+2*i+1), i))
	}
	for i := range uint64(512) {
		_, err := c.tree.Get(ctx, key(dense+2*i+1))
		require.NoError(t, err)
	}
	before := c.m.Stats()
	ps, err := c.tree.Scan(ctx, dense+200, dense+400, 0)
	require.NoError(t, err)
	require.Len(t, ps, 100)
	d := c.m.Stats().Sub(before)
	require.Equal(t, uint64(hybrid.ScanRoundTrips), d.RoundTrips, "scan 100: %v", d)
	require.GreaterOrEqual(t, d.VerbsOf(farmem.OpRead), uint64(2*2), "scan 100: %v", d)
	require.LessOrEqual(t, d.VerbsOf(farmem.OpRead), uint64(2*4), "scan 100: %v", d)
	t.Logf("scan 100 at 50%% fill: %d round trip, %d leaves, %d bytes in", d.RoundTrips, d.VerbsOf(farmem.OpRead)/2, d.BytesIn)
	t.Logf("cache: %+v", cache.Stats())
}

// TestRoundTripsBlockValues asserts the costs of values in blocks: Get 2 round trips (the
// leaf, the block), Update 2 (the block's write rides with the first), Insert 3, Delete 2.
func TestRoundTripsBlockValues(t *testing.T) {
	e := newEnv(t, local.Options{}, hybrid.Params{BlockValues: true})
	c := e.open(t, 0, hybrid.Options{Cache: hybrid.NewCache(1 << 20)})
	ctx := context.Background()
	cost := func(name string, wantRTT uint64, f func() error, wantErr error) {
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
		t.Logf("%-22s %d round trips, %4d bytes in, %4d bytes out (%v)", name, d.RoundTrips, d.BytesIn, d.BytesOut, d)
	}
	big := func(n int, b byte) []byte {
		v := make([]byte, n)
		for i := range v {
			v[i] = b + byte(i)
		}
		return v
	}
	const base = 0x0102030405060700
	require.NoError(t, c.tree.InsertBytes(ctx, key(base+1), big(100, 1)))
	_, err := c.tree.GetBytes(ctx, key(base+1))
	require.NoError(t, err)
	cost("get 100B", hybrid.GetBytesRoundTrips, func() error {
		v, err := c.tree.GetBytes(ctx, key(base+1))
		require.Equal(t, big(100, 1), v)
		return err
	}, nil)
	cost("insert 1000B", hybrid.InsertRoundTrips, func() error { return c.tree.InsertBytes(ctx, key(base+2), big(1000, 2)) }, nil)
	cost("update 1000B", hybrid.UpdateBytesRoundTrips, func() error { return c.tree.UpdateBytes(ctx, key(base+2), big(1000, 3)) }, nil)
	cost("get 1000B", hybrid.GetBytesRoundTrips, func() error {
		v, err := c.tree.GetBytes(ctx, key(base+2))
		require.Equal(t, big(1000, 3), v)
		return err
	}, nil)
	cost("delete", hybrid.DeleteRoundTrips, func() error { return c.tree.Delete(ctx, key(base+2)) }, nil)
	cost("get deleted", hybrid.AbsentRoundTrips, func() error { _, err := c.tree.GetBytes(ctx, key(base+2)); return err }, hybrid.ErrNotFound)
	cost("insert existing", hybrid.AbsentRoundTrips, func() error { return c.tree.InsertBytes(ctx, key(base+1), big(8, 0)) }, hybrid.ErrExists)
	require.ErrorIs(t, c.tree.Insert(ctx, key(base+3), 1), farmem.ErrInvalid)
	require.ErrorIs(t, c.tree.InsertBytes(ctx, key(base+3), make([]byte, hybrid.MaxValue+1)), farmem.ErrInvalid)
	require.NoError(t, c.tree.InsertBytes(ctx, key(base+3), make([]byte, hybrid.MaxValue)))
	require.NoError(t, c.tree.InsertBytes(ctx, key(base+4), nil))
	v, err := c.tree.GetBytes(ctx, key(base+4))
	require.NoError(t, err)
	require.Empty(t, v)
}

// A reader of block values that finds a key committed in the leaf's head but its value word
// already cleared (a delete landed between the two reads of its batch) reports the key absent:
// the delete came first. The reader's view is forged by changing what it read.
func TestBlockValueClearedMidRead(t *testing.T) {
	e := newEnv(t, local.Options{}, hybrid.Params{LeafSlots: 8, BlockValues: true})
	ctx := context.Background()
	w := e.open(t, 0, hybrid.Options{})
	const k = 0x0b0b0b0b0b0b0b01
	require.NoError(t, w.tree.InsertBytes(ctx, key(k), []byte("value of k")))
	require.NoError(t, w.tree.InsertBytes(ctx, key(k+1), []byte("value of k+1")))
	r := e.openWith(t, 1, hybrid.Options{}, func(m farmem.Memory) farmem.Memory {
		return &farmemtest.Interposer{Memory: m, After: func(_ context.Context, v farmemtest.Verb, _ uint64, err error) {
			ops := v.Batch.Ops
			if err == nil && len(ops) == 2 && ops[0].Kind == farmem.OpRead && ops[1].Kind == farmem.OpRead && len(ops[1].Buf) == 8*8+8 {
				clear(ops[1].Buf[:8]) // slot 0's value word: k's
			}
		}}
	})
	_, err := r.tree.GetBytes(ctx, key(k))
	require.ErrorIs(t, err, hybrid.ErrNotFound)
	ps, err := r.tree.ScanBytes(ctx, k, k+2, 0)
	require.NoError(t, err)
	require.Len(t, ps, 1)
	require.Equal(t, uint64(k+1), ps[0].Key)
	require.Equal(t, "value of k+1", string(ps[0].Value))
}
