package replcheck_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/kvstore"
)

// TestReplicatedRoundTrips measures, in one run, each store operation on a Session,
// uncontended, with every node up, on the unreplicated store (r = 1) and on one whose metadata
// and RACE index are replicated on three nodes (r = 3), both on three memory nodes with the
// optimistic synchronizer; asserts the round trips (kvstore's constants for r = 1, race's
// Replicated ones for r = 3) and logs round trips, verbs and bytes per operation with the
// ratio r = 3 / r = 1.
func TestReplicatedRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	type step struct {
		name       string
		rtt1, rtt3 uint64
		op         func(kv) error
		err        error
	}
	v := []byte("a value of some thirty bytes..")
	steps := []step{
		{"insert", kvstore.InsertRoundTrips, race.ReplicatedInsertRoundTrips, func(s kv) error { return s.Insert(ctx, []byte("alpha"), v) }, nil},
		{"get", kvstore.GetRoundTrips, race.ReplicatedSearchRoundTrips, func(s kv) error { _, err := s.Get(ctx, []byte("alpha")); return err }, nil},
		{"get absent", kvstore.GetAbsentRoundTrips, race.ReplicatedSearchAbsentRoundTrips, func(s kv) error { _, err := s.Get(ctx, []byte("beta")); return err }, kvstore.ErrNotFound},
		{"update", kvstore.UpdateRoundTrips, race.ReplicatedUpdateRoundTrips, func(s kv) error { return s.Update(ctx, []byte("alpha"), v) }, nil},
		{"put present", kvstore.UpdateRoundTrips, race.ReplicatedUpdateRoundTrips, func(s kv) error { return s.Put(ctx, []byte("alpha"), v) }, nil},
		{"put absent", kvstore.PutAbsentRoundTrips, race.ReplicatedSearchAbsentRoundTrips + race.ReplicatedInsertRoundTrips, func(s kv) error { return s.Put(ctx, []byte("beta"), v) }, nil},
		{"delete", kvstore.DeleteRoundTrips, race.ReplicatedDeleteRoundTrips, func(s kv) error { return s.Delete(ctx, []byte("beta")) }, nil},
	}
	measure := func(r int) []farmem.Stats {
		f, err := local.New(local.Options{Shape: local.Shape{MemoryNodes: 3, ComputeNodes: 1, MemorySize: 8 << 20}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = f.Close() })
		// No address cache on either (a replicated table keeps none): each step compares one
		// protocol (the unreplicated store's cache would answer the Get after its own insert
		// in one round trip).
		s := openStore(t, f, kvstore.Options{Replicas: r, Alloc: quietAlloc, MaxClients: 1, Sync: kvstore.Optimistic,
			Index: kvstore.Race{Params: race.Params{Groups: 2}, Options: race.Options{AddressCache: -1}}})
		require.Equal(t, r, race.IndexReplicasOf(s.Descriptor().Roots[0]), "index replicas")
		ss, err := s.Session(ctx)
		require.NoError(t, err)
		defer ss.Close()
		// Warm the client's allocator (its first block claims a chunk) on a key of its own.
		require.NoError(t, ss.Insert(ctx, []byte("warm"), v))
		var out []farmem.Stats
		for _, st := range steps {
			before := ss.Stats()
			err := st.op(ss)
			if st.err != nil {
				require.ErrorIs(t, err, st.err, "r = %d %s", r, st.name)
			} else {
				require.NoError(t, err, "r = %d %s", r, st.name)
			}
			d := ss.Stats().Sub(before)
			want := st.rtt1
			if r > 1 {
				want = st.rtt3
			}
			require.Equal(t, want, d.RoundTrips, "r = %d %s: round trips (%v)", r, st.name, d)
			out = append(out, d)
		}
		return out
	}
	one, three := measure(1), measure(3)
	ratio := func(a, b uint64) string { return fmt.Sprintf("%.1fx", float64(b)/float64(max(a, 1))) }
	var b strings.Builder
	fmt.Fprintf(&b, "%-12s %17s %17s %21s\n", "op (r=1/r=3)", "round trips", "verbs", "bytes out+in")
	for i, st := range steps {
		a, c := one[i], three[i]
		ab, cb := a.BytesOut+a.BytesIn, c.BytesOut+c.BytesIn
		fmt.Fprintf(&b, "%-12s %3d/%3d %7s %4d/%4d %6s %6d/%6d %6s\n", st.name,
			a.RoundTrips, c.RoundTrips, ratio(a.RoundTrips, c.RoundTrips),
			a.TotalVerbs(), c.TotalVerbs(), ratio(a.TotalVerbs(), c.TotalVerbs()),
			ab, cb, ratio(ab, cb))
	}
	t.Logf("per operation, unreplicated (r = 1) against metadata and index on 3 nodes (r = 3):\n%s", b.String())
}
