package kvstore_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/kvstore"
)

// TestRoundTrips asserts the round-trip constants per operation, uncontended, with Stats
// deltas, both on a Session and through the Store's pool (which adds none), for every
// synchronizer: Optimistic's pointer changes are lock-free; see lockCosts for the others.
func TestRoundTrips(t *testing.T) {
	t.Parallel()
	for _, name := range kvstore.SyncNames() {
		t.Run(name, func(t *testing.T) { roundTrips(t, name) })
	}
}

// lockCosts are the round trips (through the slot's lookup, and through the session's address
// cache when the key's slot and block share a memory node) and CASes of the operations whose
// pointer change takes a lock, by synchronizer, uncontended: a lock's acquisition (a CAS) and
// its release (a MaskedCAS for the MCS lock, a CAS for the spinlock) add 2 round trips to
// Optimistic's. CIDER runs updates of a key without contention optimistically and takes the
// lock for deletes.
var lockCosts = map[string]map[string][3]uint64{
	"cider": {"delete": {kvstore.LockedDeleteRoundTrips, kvstore.LockedCachedDeleteRoundTrips, 2}},
	"mcs": {
		"update":      {kvstore.LockedUpdateRoundTrips, kvstore.LockedCachedUpdateRoundTrips, 2},
		"put present": {kvstore.LockedUpdateRoundTrips, kvstore.LockedCachedUpdateRoundTrips, 2},
		"delete":      {kvstore.LockedDeleteRoundTrips, kvstore.LockedCachedDeleteRoundTrips, 2},
	},
	"spin": {
		"update":      {kvstore.LockedUpdateRoundTrips, kvstore.LockedCachedUpdateRoundTrips, 3},
		"put present": {kvstore.LockedUpdateRoundTrips, kvstore.LockedCachedUpdateRoundTrips, 3},
		"delete":      {kvstore.LockedDeleteRoundTrips, kvstore.LockedCachedDeleteRoundTrips, 3},
	},
}

func roundTrips(t *testing.T, syncName string) {
	sy, err := kvstore.SyncByName(syncName)
	require.NoError(t, err)
	f := newLocal(t, local.Options{Shape: local.Shape{MemoryNodes: 2, ComputeNodes: 2}})
	s := openStore(t, f, kvstore.Options{Alloc: quietAlloc, MaxClients: 1, Sync: sy})
	ctx := context.Background()
	ss, err := s.Session(ctx)
	require.NoError(t, err)
	// Another Store of the same fabric finds where keys live (s's one client is busy).
	peek := openStore(t, f, kvstore.Options{Alloc: quietAlloc, Sync: sy})

	// A step of a key the handle's address cache holds, whose slot and block share a memory
	// node (Locate tells, before the step), costs cached round trips (0: as rtt).
	type step struct {
		name             string
		rtt, cached, cas uint64
		key              string
		op               func(kv) error
		err              error
	}
	v := []byte("value")
	steps := []step{
		{"insert", kvstore.InsertRoundTrips, 0, 2, "", func(s kv) error { return s.Insert(ctx, []byte("alpha"), v) }, nil},
		{"insert existing", kvstore.InsertExistingRoundTrips, 0, 0, "", func(s kv) error { return s.Insert(ctx, []byte("alpha"), v) }, kvstore.ErrExists},
		// The session inserted alpha: its address cache names the block (GetRoundTrips, the
		// first Get of a key the session has not touched: TestCachedGetSeesOtherWriters).
		{"get", kvstore.CachedGetRoundTrips, 0, 0, "", func(s kv) error { _, err := s.Get(ctx, []byte("alpha")); return err }, nil},
		{"get absent", kvstore.GetAbsentRoundTrips, 0, 0, "", func(s kv) error { _, err := s.Get(ctx, []byte("beta")); return err }, kvstore.ErrNotFound},
		// The session's entry of alpha spares an update its lookup (if alpha's slot and block
		// share a memory node) and names its new block after it.
		{"update", kvstore.UpdateRoundTrips, kvstore.CachedUpdateRoundTrips, 1, "alpha", func(s kv) error { return s.Update(ctx, []byte("alpha"), v) }, nil},
		{"get after update", kvstore.CachedGetRoundTrips, 0, 0, "", func(s kv) error { _, err := s.Get(ctx, []byte("alpha")); return err }, nil},
		{"update absent", kvstore.AbsentRoundTrips, 0, 0, "", func(s kv) error { return s.Update(ctx, []byte("beta"), v) }, kvstore.ErrNotFound},
		{"put present", kvstore.UpdateRoundTrips, kvstore.CachedUpdateRoundTrips, 1, "alpha", func(s kv) error { return s.Put(ctx, []byte("alpha"), v) }, nil},
		{"put absent", kvstore.PutAbsentRoundTrips, 0, 2, "", func(s kv) error { return s.Put(ctx, []byte("beta"), v) }, nil},
		// put absent inserted beta: the session's entry of it.
		{"delete", kvstore.DeleteRoundTrips, kvstore.CachedDeleteRoundTrips, 1, "beta", func(s kv) error { return s.Delete(ctx, []byte("beta")) }, nil},
		{"delete absent", kvstore.AbsentRoundTrips, 0, 0, "", func(s kv) error { return s.Delete(ctx, []byte("beta")) }, kvstore.ErrNotFound},
		{"scan", kvstore.ScanRoundTrips, 0, 0, "", func(s kv) error { _, err := s.Scan(ctx, nil, nil, 1); return err }, kvstore.ErrNoOrderedIndex},
	}
	// Warm the client's allocator (its first block claims a chunk) on a key of its own.
	require.NoError(t, ss.Insert(ctx, []byte("warm"), v))
	for _, via := range []struct {
		name  string
		s     kv
		stats func() farmem.Stats
	}{{"session", ss, ss.Stats}, {"store", s, s.Stats}} {
		cachedSteps := 0
		for _, st := range steps {
			if o, ok := lockCosts[syncName][st.name]; ok {
				st.rtt, st.cached, st.cas = o[0], o[1], o[2]
			}
			if st.key != "" {
				loc, err := peek.Locate(ctx, []byte(st.key))
				require.NoError(t, err)
				if loc.Slot.Node() == loc.Block.Node() {
					st.rtt = st.cached
					cachedSteps++
				}
			}
			before := via.stats()
			err := st.op(via.s)
			if st.err != nil {
				require.ErrorIs(t, err, st.err, "%s %s", via.name, st.name)
			} else {
				require.NoError(t, err, "%s %s", via.name, st.name)
			}
			d := via.stats().Sub(before)
			require.Equal(t, st.rtt, d.RoundTrips, "%s %s: round trips (%v)", via.name, st.name, d)
			require.Equal(t, st.cas, d.VerbsOf(farmem.OpCAS), "%s %s: CASes (%v)", via.name, st.name, d)
			require.Zero(t, d.VerbsOf(farmem.OpFAA), "%s %s: FAAs (%v)", via.name, st.name, d)
			t.Logf("%-8s %-16s %v", via.name, st.name, d)
		}
		require.NotZero(t, cachedSteps, "%s: no change met its slot and block on one node", via.name)
		require.NoError(t, via.s.Delete(ctx, []byte("alpha")))
		if via.name == "session" {
			require.NoError(t, ss.Close()) // the store's operations now use its client
		}
	}
	require.Equal(t, 1, s.Clients())
}

// TestCachedGetSeesOtherWriters: a session's Get answered from its address cache never returns
// a value another session replaced or deleted: the stale entry costs one round trip, then the
// Get reads the slot.
func TestCachedGetSeesOtherWriters(t *testing.T) {
	f := newLocal(t, local.Options{Shape: local.Shape{MemoryNodes: 2, ComputeNodes: 2}})
	s := openStore(t, f, kvstore.Options{Alloc: quietAlloc})
	ctx := context.Background()
	r, err := s.Session(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	w, err := s.Session(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	k := []byte("k")
	require.NoError(t, w.Put(ctx, k, []byte("one")))
	get := func(want string, rtt uint64) {
		t.Helper()
		before := r.Stats()
		got, err := r.Get(ctx, k)
		if want == "" {
			require.ErrorIs(t, err, kvstore.ErrNotFound)
		} else {
			require.NoError(t, err)
			require.Equal(t, want, string(got))
		}
		require.Equal(t, rtt, r.Stats().Sub(before).RoundTrips)
	}
	get("one", kvstore.GetRoundTrips)
	get("one", kvstore.CachedGetRoundTrips)
	require.NoError(t, w.Put(ctx, k, []byte("two")))
	get("two", kvstore.CachedGetRoundTrips+kvstore.GetRoundTrips)
	get("two", kvstore.CachedGetRoundTrips)
	require.NoError(t, w.Delete(ctx, k))
	get("", kvstore.CachedGetRoundTrips+kvstore.GetAbsentRoundTrips)
}
