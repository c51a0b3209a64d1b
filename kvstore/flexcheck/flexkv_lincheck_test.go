package flexcheck_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/kvstore"
	"github.com/farmem/farmem/kvstore/kvstoretest"
	"github.com/farmem/farmem/sim"
)

// flexMix is read-mostly on a few hot keys, so that pairs get cached and invalidations race
// reads, with inserts and deletes so that blocks and (under a short delete lease) slots are
// reused while addresses to them are cached.
var flexMix = kvstoretest.Workload{Keys: 6, Ops: 200, Get: 70, Insert: 8, Update: 8, Put: 6, MaxVal: 64, Unknown: 4}

// flexKind is the kind the lincheck runs use: 4 partitions, small subtables (inserts fill
// buckets, so full proxied partitions are handed back and split), a small cache (evictions),
// a short delete lease (slots reused during the run), a short pair lease (cached pairs expire
// into addresses, and writes whose acknowledgements are slow commit at their deadline).
func flexKind() *kvstore.FlexKV {
	k := &kvstore.FlexKV{CacheEntries: 4, PairLease: time.Millisecond}
	k.Params.InitialDepth, k.Params.Groups, k.Params.SlotsPerBucket, k.Params.FingerprintBits = 2, 1, 2, 2
	k.Options.DeleteLease, k.Options.ClockSkew = 300*time.Microsecond, 20*time.Microsecond
	return k
}

// migrate hands partitions over at random (to a proxy or back to the memory nodes) until stop
// is set, and returns how many hand-overs moved a partition.
func migrate(ctx context.Context, rt farmem.Runtime, s *kvstore.Store, k *kvstore.FlexKV, nodes []farmem.NodeID, stop *atomic.Bool, pause time.Duration) (int, error) {
	rng := rt.NewRand()
	moved := 0
	for !stop.Load() {
		p := rng.IntN(k.Partitions())
		to := farmem.NodeID(0)
		if c := rng.IntN(len(nodes) + 1); c < len(nodes) {
			to = nodes[c]
		}
		switch err := s.HandOver(ctx, p, to); {
		case err == nil:
			moved++
		case errors.Is(err, kvstore.ErrHandOver):
		default:
			return moved, err
		}
		if err := rt.Sleep(ctx, pause); err != nil {
			return moved, err
		}
	}
	return moved, nil
}

// lincheckFlex runs w on sessions spread over every compute node of f (and the store's pool)
// while partitions migrate, and returns the verdict.
func lincheckFlex(t *testing.T, f farmem.Fabric, k *kvstore.FlexKV, s *kvstore.Store, w kvstoretest.Workload, workers int, pause time.Duration) error {
	t.Helper()
	rt := f.Runtime()
	ctx := context.Background()
	nodes := f.Topology().ComputeNodes()
	h := kvModel.NewHistory(rt)
	var stop atomic.Bool
	var left atomic.Int32
	left.Store(int32(workers))
	moved := 0
	err := farmemtest.Parallel(rt, workers+1, func(g int) error {
		if g == workers {
			var err error
			moved, err = migrate(ctx, rt, s, k, nodes, &stop, pause)
			return err
		}
		defer func() {
			if left.Add(-1) == 0 {
				stop.Store(true)
			}
		}()
		rng := rt.NewRand()
		if g%4 == 3 {
			return w.Run(ctx, s, g, rng, h)
		}
		ss, end, err := openSession(ctx, f, s, nodes[g%len(nodes)])
		if err != nil {
			return err
		}
		defer end()
		return w.Run(ctx, ss, g, rng, h)
	})
	require.NoError(t, err)
	var st kvstore.FlexStats
	for _, n := range nodes {
		x, _ := k.Stats(n)
		st.KVHits += x.KVHits
		st.AddrHits += x.AddrHits
		st.AddrStale += x.AddrStale
		st.Invalidations += x.Invalidations
		st.Refused += x.Refused
		st.AckTimeouts += x.AckTimeouts
		st.Commits += x.Commits
		st.Shortcuts += x.Shortcuts
	}
	sum, verdict := h.Verify()
	t.Logf("%v; %d hand-overs; kv hits %d, addr hits %d, stale addrs %d, invalidations %d, refused installs %d, ack timeouts %d, proxy commits %d, writes through cached slots %d",
		sum, moved, st.KVHits, st.AddrHits, st.AddrStale, st.Invalidations, st.Refused, st.AckTimeouts, st.Commits, st.Shortcuts)
	require.Positive(t, moved, "partitions migrated under load")
	require.Positive(t, st.Commits, "proxies committed writes")
	require.Positive(t, st.KVHits, "pairs were served from caches")
	return verdict
}

// TestFlexKVLinearizable: local fabric, tearing, jitter and strict mode (the cleanup checks no
// plain write landed on a word being CASed), partitions migrating under load.
func TestFlexKVLinearizable(t *testing.T) {
	t.Parallel()
	for seed := range uint64(2) {
		f := newLocal(t, local.Options{Shape: local.Shape{MemoryNodes: 2, ComputeNodes: 3}, Tearing: true, Jitter: 5 * time.Microsecond, Seed: seed + 1})
		k := flexKind()
		s := openStore(t, f, kvstore.Options{Index: k, Alloc: quietAlloc})
		w := flexMix
		w.Ops *= stressScale()
		require.NoError(t, lincheckFlex(t, f, k, s, w, 9, 200*time.Microsecond), "seed %d", seed+1)
	}
}

// flexSim runs the migrating lincheck on a simulated cluster of 2 memory and 3 compute nodes
// and returns its verdict and a digest of the run (virtual end time and fabric counts).
func flexSim(t *testing.T, seed uint64) (error, string) {
	model := sim.ConnectX6()
	model.MemoryNodes, model.ComputeNodes, model.MemorySize = 2, 3, 64<<20
	model.Tearing, model.Jitter = true, 300*time.Nanosecond
	sm := startSim(t, model, seed)
	var verdict error
	var digest string
	sm.Run(func() {
		k := flexKind()
		s, err := kvstore.Open(context.Background(), sm, kvstore.Options{Index: k, Alloc: shortLeases})
		require.NoError(t, err)
		w := flexMix
		w.Ops *= stressScale()
		verdict = lincheckFlex(t, sm, k, s, w, 9, 50*time.Microsecond)
		digest = fmt.Sprintf("%v %v", sm.Now(), sm.Stats())
		require.NoError(t, s.Close())
	})
	return verdict, digest
}

// TestFlexKVSimDeterministic: one seed, one run.
func TestFlexKVSimDeterministic(t *testing.T) {
	t.Parallel()
	_, a := flexSim(t, 5)
	_, b := flexSim(t, 5)
	require.Equal(t, a, b)
}

// TestFlexKVLinearizableSim: the same on the simulator (deterministic, virtual time), with
// the allocator's short leases, so blocks are reused soon after they are replaced.
func TestFlexKVLinearizableSim(t *testing.T) {
	t.Parallel()
	for seed := range uint64(2 * stressScale()) {
		verdict, _ := flexSim(t, seed+1)
		require.NoError(t, verdict, "seed %d", seed+1)
	}
}

// TestAcesoLinearizable: the baseline (address caches over RACE on the memory nodes, CIDER
// synchronizing updates) on a local fabric with tearing and strict mode.
func TestAcesoLinearizable(t *testing.T) {
	t.Parallel()
	w := flexMix
	w.Ops *= stressScale()
	k := flexKind()
	k.NoProxy = true
	require.NoError(t, kvstoretest.LincheckLocal(t, w, 1, 8, 21, kvstore.Options{Index: k}))
}
