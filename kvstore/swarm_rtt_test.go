package kvstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/kvstore"
)

// TestSwarmInsertDeleteRoundTrips asserts a SWARM-KV Insert's and Delete's round trips
// exactly (uncontended, every node up, three replicas), through the store and a session, and
// where they go, step by step (the steps' sums must be the operations' totals):
//
//   - Insert 15: the object's symmetric block carved from the allocator's current chunk (0: with
//     a lane per compute node an object is a few KiB; a claim of a new chunk, 2 round trips with
//     replicated metadata, comes once per chunk and not in these inserts), the object's format (6: each replica's lock words
//     zeroed, then each replica's In-n-Out header and words, one replica after the other), the
//     register's Open (maxreg.OpenReplicatedRoundTrips), its first write
//     (maxreg.ReplicatedWriteRoundTrips), the life word's replicated plain write (1) and the
//     index's replicated insert (race.ReplicatedInsertRoundTrips).
//   - Delete 10: the life word's CAS ALIVE to DEAD (3: a replicated atomic is 2, and the first
//     one a handle makes on a word retries its lock round once), the tombstone (1), the CAS
//     DEAD to UNLINKED (2) and the index's replicated conditional removal of the entry naming
//     the object (race.ReplicatedDeleteIfRoundTrips).
func TestSwarmInsertDeleteRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// No faults here: a down timeout a loaded machine cannot reach, so that no verb delayed
	// by the scheduler counts as a node down (and its retry as round trips).
	f := newSwarmLocal(t, local.Options{DownTimeout: 5 * time.Second})
	o := swarmOptions()
	o.MaxClients = 1
	s := openStore(t, f, o)
	v := []byte("a value of some thirty bytes..")
	require.NoError(t, s.Insert(ctx, []byte("warm"), v)) // the allocator's first chunk
	_, _, err := kvstore.SwarmInsertDeleteSteps(ctx, s, []byte("warm steps"), v)
	require.NoError(t, err)

	const replicas = 3
	wantIns := []kvstore.SwarmStep{{"allocate", 0}, {"format", 2 * replicas}, {"open", maxreg.OpenReplicatedRoundTrips},
		{"write", maxreg.ReplicatedWriteRoundTrips}, {"life word", 1}, {"index insert", race.ReplicatedInsertRoundTrips}}
	wantDel := []kvstore.SwarmStep{{"life word ALIVE to DEAD", 3}, {"tombstone", 1}, {"life word DEAD to UNLINKED", 2},
		{"index delete", race.ReplicatedDeleteIfRoundTrips}}
	sum := func(steps []kvstore.SwarmStep) (n uint64) {
		for _, st := range steps {
			n += st.RoundTrips
		}
		return n
	}
	const insertRT, deleteRT = 15, 10
	require.Equal(t, uint64(insertRT), sum(wantIns))
	require.Equal(t, uint64(deleteRT), sum(wantDel))

	// A client descheduled past a lease (the registers' is 1 ms) starts that step over, a
	// few round trips more: what is asserted is the cost of an operation no lapse touched, so
	// one that met a lapse (SwarmLapses moved) is run again, with another key.
	unlapsed := func(via any, what string, op func(attempt int)) {
		for attempt := range 5 {
			before, err := kvstore.SwarmLapses(ctx, via)
			require.NoError(t, err)
			op(attempt)
			after, err := kvstore.SwarmLapses(ctx, via)
			require.NoError(t, err)
			if after == before {
				return
			}
			t.Logf("%s, attempt %d: %d lease lapses; run again", what, attempt, after-before)
		}
		t.Fatalf("%s: a lease lapsed in each of 5 attempts", what)
	}
	var ins, del []kvstore.SwarmStep
	unlapsed(s, "steps", func(attempt int) {
		var err error
		ins, del, err = kvstore.SwarmInsertDeleteSteps(ctx, s, []byte(fmt.Sprint("steps", attempt)), v)
		require.NoError(t, err)
	})
	require.Equal(t, wantIns, ins, "insert's steps")
	require.Equal(t, wantDel, del, "delete's steps")

	check := func(name string, via kv, stats func() farmem.Stats) {
		for i := range 3 {
			var ins, del farmem.Stats
			unlapsed(via, fmt.Sprint(name, " insert and delete ", i), func(attempt int) {
				k := []byte(fmt.Sprint(name, i, "/", attempt))
				before := stats()
				require.NoError(t, via.Insert(ctx, k, v))
				ins = stats().Sub(before)
				before = stats()
				require.NoError(t, via.Delete(ctx, k))
				del = stats().Sub(before)
			})
			require.Equal(t, uint64(insertRT), ins.RoundTrips, "%s insert %d (%v)", name, i, ins)
			require.Equal(t, uint64(deleteRT), del.RoundTrips, "%s delete %d (%v)", name, i, del)
		}
	}
	check("store", s, s.Stats)
	ss, err := s.Session(ctx) // the store's one client, until closed
	require.NoError(t, err)
	check("session", ss, ss.Stats)
	require.NoError(t, ss.Close())
}
