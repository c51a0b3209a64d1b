package flexcheck_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/kvstore"
	"github.com/farmem/farmem/sim"
)

// flexInvalSim opens a simulated cluster of 2 memory and 3 compute nodes, each compute node
// with maxHandlers handler clients, runs body inside it with a FlexKV store, and closes it.
func flexInvalSim(t *testing.T, maxHandlers int, body func(sm *sim.Sim, k *kvstore.FlexKV, s *kvstore.Store, open func(farmem.NodeID) *kvstore.Session)) {
	t.Helper()
	model := sim.ConnectX6()
	model.MemoryNodes, model.ComputeNodes, model.MemorySize = 2, 3, 64<<20
	model.ClientsPerNode, model.MaxHandlers = 12, maxHandlers
	sm := startSim(t, model, 7)
	sm.Run(func() {
		k := &kvstore.FlexKV{}
		s, err := kvstore.Open(context.Background(), sm, kvstore.Options{Index: k, Alloc: shortLeases})
		require.NoError(t, err)
		var closers []func()
		open := func(node farmem.NodeID) *kvstore.Session {
			m, err := sm.Open(context.Background(), node)
			require.NoError(t, err)
			ss, err := s.SessionOn(context.Background(), m)
			require.NoError(t, err)
			closers = append(closers, func() { _ = ss.Close(); _ = m.Close() })
			return ss
		}
		body(sm, k, s, open)
		for _, c := range closers {
			c()
		}
		require.NoError(t, s.Close())
	})
}

// cachePair reads key through ss until a read is served from the node's cache (no round
// trip): the node is then a sharer of the key.
func cachePair(t *testing.T, ss *kvstore.Session, key []byte, want uint64) {
	t.Helper()
	for range 8 * kvstore.FlushReads {
		before := ss.Stats()
		got, err := ss.Get(context.Background(), key)
		require.NoError(t, err)
		x, err := unval(got)
		require.NoError(t, err)
		require.Equal(t, want, x)
		if ss.Stats().Sub(before).RoundTrips == 0 {
			return
		}
	}
	t.Fatalf("key %q never cached", key)
}

// keysIn returns n keys of partition p (from index from on).
func keysIn(k *kvstore.FlexKV, p, n int, from uint64) []uint64 {
	var out []uint64
	for i := from; len(out) < n; i++ {
		if k.PartitionOf(key(i)) == p {
			out = append(out, i)
		}
	}
	return out
}

// TestFlexKVCrossInvalidationSim: two proxies, each caching pairs of keys the other proxies,
// are sent writes of those keys at the same instant, as many as each node has handlers, so
// every handler of both nodes serves a write that must invalidate the other node. No handler
// waits for another node's, so every write completes, through acknowledgements (no sharer
// waited out), well within the pair lease in virtual time, and the sharers then read the new
// values.
func TestFlexKVCrossInvalidationSim(t *testing.T) {
	t.Parallel()
	const handlers = 2
	flexInvalSim(t, handlers, func(sm *sim.Sim, k *kvstore.FlexKV, s *kvstore.Store, open func(farmem.NodeID) *kvstore.Session) {
		ctx := context.Background()
		nodes := sm.Topology().ComputeNodes()
		a, b := nodes[1], nodes[2]
		ka, kb := keysIn(k, 0, handlers, 0), keysIn(k, 1, handlers, 0)
		for _, i := range append(append([]uint64{}, ka...), kb...) {
			require.NoError(t, s.Insert(ctx, key(i), val(i, 32)))
		}
		require.NoError(t, s.HandOver(ctx, 0, a))
		require.NoError(t, s.HandOver(ctx, 1, b))
		require.Equal(t, a, k.Owner(nodes[0], 0))
		require.Equal(t, b, k.Owner(nodes[0], 1))
		onA, onB := open(a), open(b)
		writers := make([]*kvstore.Session, 2*handlers)
		for i := range writers {
			writers[i] = open(nodes[0])
		}
		for round := range uint64(3) {
			// b shares a's keys and a shares b's.
			for j := range handlers {
				cachePair(t, onB, key(ka[j]), round<<32|ka[j])
				cachePair(t, onA, key(kb[j]), round<<32|kb[j])
			}
			sa0, _ := k.Stats(a)
			sb0, _ := k.Stats(b)
			start := sm.Now()
			errs := make([]error, len(writers))
			ends := make([]farmem.Time, len(writers))
			require.NoError(t, sm.Parallel(len(writers), func(i int) {
				var kk uint64
				if i < handlers {
					kk = ka[i]
				} else {
					kk = kb[i-handlers]
				}
				errs[i] = writers[i].Update(ctx, key(kk), val((round+1)<<32|kk, 32))
				ends[i] = sm.Now()
			}), "round %d: the cross invalidations deadlocked", round)
			for i, err := range errs {
				require.NoError(t, err, "round %d writer %d", round, i)
				require.Less(t, ends[i].Sub(start), kvstore.DefaultPairLease/2,
					"round %d writer %d: completed by acknowledgements, not the lease", round, i)
			}
			sa1, _ := k.Stats(a)
			sb1, _ := k.Stats(b)
			require.Zero(t, sa1.AckTimeouts-sa0.AckTimeouts, "round %d", round)
			require.Zero(t, sb1.AckTimeouts-sb0.AckTimeouts, "round %d", round)
			require.GreaterOrEqual(t, sa1.Invalidations-sa0.Invalidations, uint64(handlers), "a dropped b's pairs, round %d", round)
			require.GreaterOrEqual(t, sb1.Invalidations-sb0.Invalidations, uint64(handlers), "b dropped a's pairs, round %d", round)
			t.Logf("round %d: %d cross-invalidating writes done in %v of virtual time", round, len(writers), sm.Now().Sub(start))
			for j := range handlers {
				for _, c := range []struct {
					ss *kvstore.Session
					k  uint64
				}{{onB, ka[j]}, {onA, kb[j]}} {
					got, err := c.ss.Get(ctx, key(c.k))
					require.NoError(t, err)
					x, _ := unval(got)
					require.Equal(t, (round+1)<<32|c.k, x, "round %d: no stale pair", round)
				}
			}
		}
	})
}

// TestFlexKVSlowOrLostAckSim: a sharer caches a pair, then its link to the proxy is delayed
// (slow invalidation and acknowledgement) or cut (both lost) while another node updates the
// key, and the sharer keeps reading. A read that began after the update returned never sees
// the old value; with the link delayed the update waits for the acknowledgement, with it cut
// the update commits at its deadline (the sharer's pair lease run out), counted as an
// acknowledgement timeout.
func TestFlexKVSlowOrLostAckSim(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		cut  bool
	}{{"slow", false}, {"lost", true}} {
		t.Run(c.name, func(t *testing.T) {
			flexInvalSim(t, 2, func(sm *sim.Sim, k *kvstore.FlexKV, s *kvstore.Store, open func(farmem.NodeID) *kvstore.Session) {
				ctx := context.Background()
				nodes := sm.Topology().ComputeNodes()
				w, p, sh := nodes[0], nodes[1], nodes[2]
				const i = 3
				part := k.PartitionOf(key(i))
				require.NoError(t, s.Insert(ctx, key(i), val(1, 32)))
				require.NoError(t, s.HandOver(ctx, part, p))
				reader, writer := open(sh), open(w)
				cachePair(t, reader, key(i), 1)
				const delay = 40 * time.Microsecond
				if c.cut {
					require.NoError(t, sm.CutLink(sh, p))
				} else {
					require.NoError(t, sm.DelayLink(sh, p, delay))
				}
				st0, _ := k.Stats(p)
				type read struct {
					start, end farmem.Time
					v          uint64
					err        error
				}
				var reads []read
				var wStart, wEnd farmem.Time
				var written bool
				g := sm.NewGroup()
				g.Go(func() {
					wStart = sm.Now()
					require.NoError(t, writer.Update(ctx, key(i), val(2, 32)))
					wEnd, written = sm.Now(), true
					if c.cut {
						require.NoError(t, sm.HealLink(sh, p))
					}
				})
				g.Go(func() {
					for post := 0; post < 10; {
						r := read{start: sm.Now()}
						if written && r.start > wEnd {
							post++
						}
						rctx, cancel := sm.Runtime().WithTimeout(ctx, 50*time.Millisecond)
						got, err := reader.Get(rctx, key(i))
						cancel()
						r.end, r.err = sm.Now(), err
						if err == nil {
							r.v, r.err = unval(got)
						}
						reads = append(reads, r)
						// Often enough that some read falls before the invalidation reaches the
						// sharer (the write commits as soon as the acknowledgement is in).
						require.NoError(t, sm.Runtime().Sleep(ctx, 10*time.Microsecond))
					}
				})
				require.NoError(t, g.Wait())
				st1, _ := k.Stats(p)
				took := wEnd.Sub(wStart)
				t.Logf("update took %v of virtual time; %d reads by the sharer; ack timeouts %d", took, len(reads), st1.AckTimeouts-st0.AckTimeouts)
				var during, after int
				for _, r := range reads {
					if r.err != nil {
						t.Logf("read %+v", r)
						continue // a failed read returns no value, stale or not
					}
					switch {
					case r.start > wEnd:
						require.Equal(t, uint64(2), r.v, "a read begun after the update returned: %+v (update [%v, %v])", r, wStart, wEnd)
						after++
					case r.v == 1 && r.start > wStart:
						during++
					default:
						require.Contains(t, []uint64{1, 2}, r.v)
					}
				}
				require.Positive(t, after, "reads after the update were checked")
				require.Positive(t, during, "the sharer read its pair while the update was pending")
				if c.cut {
					require.Equal(t, uint64(1), st1.AckTimeouts-st0.AckTimeouts, "the lost acknowledgement was waited out")
					require.GreaterOrEqual(t, took, kvstore.DefaultPairLease/2, "not before the pair's lease ran out")
					require.Less(t, took, kvstore.DefaultPairLease+10*time.Millisecond)
				} else {
					require.Zero(t, st1.AckTimeouts-st0.AckTimeouts, "the slow acknowledgement arrived")
					require.GreaterOrEqual(t, took, 2*delay, "the update waited for the invalidation and its acknowledgement")
					require.Less(t, took, kvstore.DefaultPairLease/2)
				}
				got, err := reader.Get(ctx, key(i))
				require.NoError(t, err)
				x, _ := unval(got)
				require.Equal(t, uint64(2), x, fmt.Sprintf("%s: the sharer reads the update", c.name))
			})
		})
	}
}
