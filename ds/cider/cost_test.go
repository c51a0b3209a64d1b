package cider_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/cider"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/sim"
)

// cost is the counted cost of one operation.
type cost struct {
	rtt                                uint64
	read, write, cas, mcas, faa, local uint64 // memory-node verbs by kind; local verbs (own region)
}

func costOf(d farmem.Stats) cost {
	mn := d.Verbs[farmem.TargetMemory]
	return cost{rtt: d.RoundTrips, read: mn[farmem.OpRead], write: mn[farmem.OpWrite], cas: mn[farmem.OpCAS],
		mcas: mn[farmem.OpMaskedCAS], faa: mn[farmem.OpFAA], local: d.VerbsTo(farmem.TargetLocal)}
}

// TestUncontendedCosts asserts the round trips and memory-node verbs of each operation on the
// pointer array, uncontended, as the package doc states them.
func TestUncontendedCosts(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		sync           syncKind
		update, delete cost
	}{
		// [write block, read pointer]; CAS.
		{optimistic, cost{rtt: 2, read: 1, write: 1, cas: 1}, cost{rtt: 2, read: 1, cas: 1}},
		// [write block, read pointer]; [CAS lock, read pointer]; CAS pointer; CAS unlock.
		{spin, cost{rtt: 4, read: 2, write: 1, cas: 3}, cost{rtt: 4, read: 2, cas: 3}},
		// [write block, read pointer]; enqueue; CAS pointer; release.
		{mcs, cost{rtt: 4, read: 1, write: 1, mcas: 1, cas: 2, local: 1}, cost{rtt: 4, read: 1, mcas: 1, cas: 2, local: 1}},
		// A cold key: as optimistic. A delete: read; closing enqueue; CAS pointer; release.
		{ciderAuto, cost{rtt: 2, read: 1, write: 1, cas: 1}, cost{rtt: 4, read: 1, mcas: 1, cas: 2, local: 1}},
		// read pointer; enqueue; [write block, CAS pointer]; release (two local reads: the
		// successor check of the holder and of the release).
		{ciderPess, cost{rtt: 4, read: 1, write: 1, mcas: 1, cas: 2, local: 2}, cost{rtt: 4, read: 1, mcas: 1, cas: 2, local: 1}},
	}
	for _, c := range cases {
		t.Run(string(c.sync), func(t *testing.T) {
			e := newLocalEnv(t, local.Options{}, 16, race.Params{})
			cl := e.open(t, 0, arrayKV, c.sync)
			require.NoError(t, cl.kv.Insert(ctx, 3, val(1, 8)))
			before := cl.m.Stats()
			require.NoError(t, cl.kv.Update(ctx, 3, val(2, 8)))
			require.Equal(t, c.update, costOf(cl.m.Stats().Sub(before)), "update: %v", cl.m.Stats().Sub(before))
			before = cl.m.Stats()
			require.NoError(t, cl.kv.Delete(ctx, 3))
			require.Equal(t, c.delete, costOf(cl.m.Stats().Sub(before)), "delete: %v", cl.m.Stats().Sub(before))
			// Search and insert do not depend on the synchronizer.
			before = cl.m.Stats()
			require.NoError(t, cl.kv.Insert(ctx, 3, val(3, 8)))
			require.Equal(t, cost{rtt: 1, write: 1, cas: 1}, costOf(cl.m.Stats().Sub(before)), "insert")
			before = cl.m.Stats()
			v, err := cl.kv.Search(ctx, 3)
			require.NoError(t, err)
			require.Equal(t, uint64(3), unval(v))
			require.Equal(t, cost{rtt: 2, read: 2}, costOf(cl.m.Stats().Sub(before)), "search")
		})
	}
}

// TestCombinedBatchCost lines up n pessimistic updates of one key behind a holder on the
// simulator and counts the batch: one KV block write and one pointer CAS for all n, the last
// writer's value in place, and exactly the verbs the package doc states.
func TestCombinedBatchCost(t *testing.T) {
	for _, st := range []structure{arrayKV, raceKV} {
		t.Run(string(st), func(t *testing.T) {
			const n = 6
			m := sim.ConnectX6()
			m.MemoryNodes, m.ComputeNodes, m.MemorySize = 2, 3, 4<<20
			e := newSimEnv(t, m, 1, 16, race.Params{MetaSize: 16})
			ctx := context.Background()
			var cs []*client
			var before farmem.Stats
			var sbefore cider.Stats
			e.do(func() {
				for i := range n {
					cs = append(cs, e.openHooked(t, i, st, ciderPess))
				}
				require.NoError(t, cs[0].kv.Insert(ctx, 5, val(1, 8)))
				// Warm every client up (its allocator's epoch announcement and chunks), one at a
				// time, so that only the batch is counted.
				for i, c := range cs {
					require.NoError(t, c.kv.Update(ctx, 5, val(uint64(10+i), 8)))
				}
				// The first holder waits until the others have queued behind it.
				// (It enqueues on the free lock, the only MaskedCAS of an update, and pauses there.)
				cs[0].hs.arm(anyEnqueue, func() { _ = cs[0].m.Runtime().Sleep(ctx, 200*time.Microsecond) })
				before, sbefore = e.s.Stats(), sumStats(cs)
				g := e.s.NewGroup()
				for i, c := range cs {
					g.Go(func() {
						_ = c.m.Runtime().Sleep(ctx, time.Duration(i)*20*time.Microsecond)
						require.NoError(t, c.kv.Update(ctx, 5, val(uint64(100+i), 8)))
					})
				}
				require.NoError(t, g.Wait())
				require.Empty(t, cs[0].hs.armed, "the first holder never enqueued")
			})
			d := e.s.Stats().Sub(before)
			s := sumStats(cs).Sub(sbefore)
			t.Logf("%v: %v; %+v", st, d, s)
			require.Equal(t, uint64(1), s.Batches)
			require.Equal(t, uint64(n), s.Batched, "batch size")
			require.Equal(t, uint64(1), s.Coordinator)
			require.Equal(t, uint64(n-2), s.Participant)
			require.Equal(t, uint64(1), s.Executor)
			require.Equal(t, uint64(1), s.CASes, "one pointer CAS for the batch")
			require.Equal(t, uint64(1), d.Verbs[farmem.TargetMemory][farmem.OpWrite], "one KV block write for the batch")
			mn := d.Verbs[farmem.TargetMemory]
			if st == arrayKV {
				// Each: read pointer, enqueue; the coordinator: read tail and pointer; the
				// executor: write block, CAS pointer; its release: CAS the lock word free.
				require.Equal(t, uint64(n+2), mn[farmem.OpRead])
				require.Equal(t, uint64(n), mn[farmem.OpMaskedCAS])
				require.Equal(t, uint64(2), mn[farmem.OpCAS])
				require.Zero(t, mn[farmem.OpFAA])
				require.Equal(t, uint64(2*n+5), d.VerbsTo(farmem.TargetMemory))
				// Links (n-1), Exec and Done (2 writes each), the chain (n-1 messages of 2).
				require.Equal(t, uint64(3*n+1), d.Verbs[farmem.TargetCompute][farmem.OpWrite])
			}
			e.do(func() {
				v, err := cs[0].kv.Search(ctx, 5)
				require.NoError(t, err)
				require.Equal(t, uint64(100+n-1), unval(v), "the last writer's value")
			})
		})
	}
}
