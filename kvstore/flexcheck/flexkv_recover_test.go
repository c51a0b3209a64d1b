package flexcheck_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/kvstore"
)

// opSpan is one operation's key, partition, virtual span and error.
type opSpan struct {
	part       int
	write      bool
	start, end farmem.Time
	err        error
}

// spanKV records the span of every operation it passes to kv.
type spanKV struct {
	kv
	rt  farmem.Runtime
	k   *kvstore.FlexKV
	mu  *sync.Mutex
	out *[]opSpan
}

func (s spanKV) rec(key []byte, write bool, f func() error) error {
	start := s.rt.Now()
	err := f()
	if errors.Is(err, kvstore.ErrNotFound) || errors.Is(err, kvstore.ErrExists) {
		err = nil
	}
	s.mu.Lock()
	*s.out = append(*s.out, opSpan{part: s.k.PartitionOf(key), write: write, start: start, end: s.rt.Now(), err: err})
	s.mu.Unlock()
	return err
}

func (s spanKV) Get(ctx context.Context, key []byte) (v []byte, err error) {
	_ = s.rec(key, false, func() error { v, err = s.kv.Get(ctx, key); return err })
	return v, err
}
func (s spanKV) Insert(ctx context.Context, key, value []byte) (err error) {
	_ = s.rec(key, true, func() error { err = s.kv.Insert(ctx, key, value); return err })
	return err
}
func (s spanKV) Update(ctx context.Context, key, value []byte) (err error) {
	_ = s.rec(key, true, func() error { err = s.kv.Update(ctx, key, value); return err })
	return err
}
func (s spanKV) Put(ctx context.Context, key, value []byte) (err error) {
	_ = s.rec(key, true, func() error { err = s.kv.Put(ctx, key, value); return err })
	return err
}
func (s spanKV) Delete(ctx context.Context, key []byte) (err error) {
	_ = s.rec(key, true, func() error { err = s.kv.Delete(ctx, key); return err })
	return err
}

// TestFlexKVDeadProxySim: a proxy's compute node crashes mid-run under a lincheck with proxying
// and KV caching (its own clients crash with it). The history, ended by a read of every key
// from a survivor (an acknowledged write lost would contradict them), linearizes; the
// coordinator recovered each partition the dead node proxied; and the survivors' operations on
// those partitions are held no longer than the stated bound of virtual time after the crash:
// ProxyLease + fence delay (3 skews + down timeout) + a down timeout (a pause, an in-flight
// call failing) + 2 ms (backoffs and hand-over work), plus four down timeouts when the node
// hangs (calls to it time out instead of failing at once, and a commit in flight sends four).
func TestFlexKVDeadProxySim(t *testing.T) {
	t.Parallel()
	for seed := range uint64(stressScale()) {
		deadProxySim(t, seed+1, false)
	}
}

// TestFlexKVHungProxySim: the same with the proxy's node hung instead of crashed, and resumed
// after the longest recovery: the zombie proxy (its handlers and clients frozen mid-operation,
// then running on) lands no write-through past its fence, serves nothing with its revoked
// lease, and its clients learn the new routes; the history linearizes. A partition no
// survivor needed through the proxy during the hang is not recovered: the proxy renews its
// lease when it comes back and serves on.
func TestFlexKVHungProxySim(t *testing.T) {
	t.Parallel()
	for seed := range uint64(stressScale()) {
		deadProxySim(t, seed+1, true)
	}
}

func deadProxySim(t *testing.T, seed uint64, hang bool) {
	sm := crashSim(t, seed)
	sm.Run(func() {
		ctx := context.Background()
		rt := sm.Runtime()
		nodes := sm.Topology().ComputeNodes()
		coord, live, dead := nodes[0], nodes[1], nodes[2]
		k := flexKind()
		k.ProxyLease = 2 * time.Millisecond
		s, err := kvstore.Open(ctx, sm, kvstore.Options{Index: k, Alloc: shortLeases, Nodes: []farmem.NodeID{coord, live}})
		require.NoError(t, err)
		// The partitions of the workload's keys: all but one on the doomed node, that one on a
		// survivor.
		parts := map[int]bool{}
		for i := range flexMix.Keys {
			parts[k.PartitionOf(key(i))] = true
		}
		owned := map[int]bool{}
		kept := -1
		for p := range k.Partitions() {
			switch {
			case !parts[p]:
			case kept < 0:
				kept = p
				require.NoError(t, s.HandOver(ctx, p, live))
			default:
				owned[p] = true
				require.NoError(t, s.HandOver(ctx, p, dead))
			}
		}
		require.NotEmpty(t, owned)

		h := kvModel.NewHistory(rt)
		var mu sync.Mutex
		var spans []opSpan
		var crashAt farmem.Time
		const workers = 9
		w := flexMix
		w.Ops = 600
		var left atomic.Int32
		left.Store(workers)
		var moved, refused int
		err = farmemtest.Parallel(rt, workers+2, func(g int) error {
			if g == workers+1 {
				// The survivor's partition keeps migrating among the survivors and the
				// memory nodes, before and after the crash (then only hand-overs to the
				// memory nodes can skip the dead node; others roll back).
				rng := rt.NewRand()
				to := []farmem.NodeID{0, coord, live}
				for left.Load() > 0 {
					switch err := s.HandOver(ctx, kept, to[rng.IntN(len(to))]); {
					case err == nil:
						moved++
					case errors.Is(err, kvstore.ErrHandOver):
						refused++
					default:
						return err
					}
					if err := rt.Sleep(ctx, 200*time.Microsecond); err != nil {
						return err
					}
				}
				return nil
			}
			if g == workers {
				if err := rt.Sleep(ctx, 500*time.Microsecond); err != nil {
					return err
				}
				crashAt = rt.Now()
				for p := range owned {
					// An insert into a full proxied partition may have handed it back already.
					if k.Owner(coord, p) != dead {
						delete(owned, p)
					}
				}
				if !hang {
					return sm.Crash(dead)
				}
				if err := sm.Hang(dead); err != nil {
					return err
				}
				// Resumed once the recovery is certainly over.
				if err := rt.Sleep(ctx, 4*sm.Topology().DownTimeout+k.ProxyLease); err != nil {
					return err
				}
				return sm.Resume(dead)
			}
			defer left.Add(-1)
			node := nodes[g%len(nodes)]
			ss, end, err := openSession(ctx, sm, s, node)
			if err != nil {
				return err
			}
			defer end()
			ww := w
			if node == dead && !hang {
				ww.Unknown = 1 // its ops fail from the crash on
				return ww.Run(ctx, ss, g, rt.NewRand(), h)
			}
			if node == dead {
				ww.Unknown = 50
				return ww.Run(ctx, ss, g, rt.NewRand(), h)
			}
			ww.Unknown = 50
			return ww.Run(ctx, spanKV{kv: ss, rt: rt, k: k, mu: &mu, out: &spans}, g, rt.NewRand(), h)
		})
		require.NoError(t, err)
		sum := endWithReads(t, ctx, s, h, workers, seed)

		st, _ := k.Stats(coord)
		if hang {
			zs, _ := k.Stats(dead)
			ls, _ := k.Stats(live)
			t.Logf("seed %d: the zombie proxy refused %d index RPCs for want of its lease; kv hits on survivors %d", seed, zs.LeaseRefused, st.KVHits+ls.KVHits)
		}
		recovered := 0
		for p := range owned {
			o := k.Owner(coord, p)
			if hang && o == dead {
				// No survivor's call to it timed out long enough for its lease to be fenced
				// before it came back: it renewed its lease and proxies on.
				require.Equal(t, dead, k.Owner(live, p))
				continue
			}
			require.Equal(t, farmem.NodeID(0), o, "partition %d back on the memory nodes", p)
			require.Equal(t, farmem.NodeID(0), k.Owner(live, p))
			recovered++
		}
		require.NotEmpty(t, owned, "the dead node proxied partitions when it crashed")
		require.Equal(t, uint64(recovered), st.Recoveries, "each recovered partition recovered once")
		if !hang {
			require.Equal(t, len(owned), recovered, "every dead partition recovered")
		}

		// Resumption: no operation on a dead partition begun after the crash is held past the
		// bound (one begun later takes at most opSlack: a few round trips, backoffs and a
		// pending write's wait for its sharers), none begun after the bound fails, and each
		// partition is written again.
		bound := k.ProxyLease + 3*k.Options.ClockSkew + 2*sm.Topology().DownTimeout + 2*time.Millisecond
		if hang {
			// A hung node is found down only when a call to it times out, and the recovery's
			// pause drains a commit in flight whose four sends each time out.
			bound += 4 * sm.Topology().DownTimeout
		}
		const opSlack = 2 * time.Millisecond
		var failed, after int
		for p := range owned {
			var first farmem.Time
			var held time.Duration
			for _, sp := range spans {
				if sp.part != p || sp.start < crashAt {
					continue
				}
				after++
				resumed := max(sp.start, crashAt.Add(bound))
				require.LessOrEqual(t, sp.end, resumed.Add(opSlack), "partition %d: an operation begun %v after the crash ended %v after it", p, sp.start.Sub(crashAt), sp.end.Sub(crashAt))
				held = max(held, sp.end.Sub(sp.start))
				if sp.err != nil {
					failed++
					require.Less(t, sp.start, crashAt.Add(bound), "an operation begun after the bound failed: %v", sp.err)
					continue
				}
				if sp.write && (first == 0 || sp.end < first) {
					first = sp.end
				}
			}
			require.NotZero(t, first, "partition %d written again (crash at %v, end %v, %d ops after, %d failed, %v)", p, crashAt, rt.Now(), after, failed, st)
			t.Logf("seed %d: partition %d: bound %v; longest operation begun after the crash %v; first write again %v after it", seed, p, bound, held, first.Sub(crashAt))
		}
		t.Logf("seed %d: %v; survivors' ops on the dead partitions after the crash: %d, failed %d; hand-overs %d (%d by the migrator, %d rolled back), recoveries %d of %d partitions",
			seed, sum, after, failed, st.HandOvers, moved, refused, st.Recoveries, len(owned))
		require.Positive(t, moved, "the survivor's partition migrated")
		// (Writes of a partition on the memory nodes may wait out a dead client's tentative
		// insert or split lock: the run can go on for race.Options.Lease.)
		ls, _ := k.Stats(live)
		t.Logf("seed %d: ran until %v after the crash; writes settled on the memory nodes after their proxy failed: %d", seed, rt.Now().Sub(crashAt), st.Settled+ls.Settled)

		if err := s.Close(); err != nil {
			require.False(t, hang, "%v", err)
			require.ErrorIs(t, err, farmem.ErrNodeDown, "only the dead node's state cannot be released")
		}
	})
}
