package kvstore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/kvstore"
	"github.com/farmem/farmem/kvstore/kvstoretest"
)

// countingKV counts a store's operations and those that failed (any error but ErrNotFound
// and ErrExists, the answers of the key-value model).
type countingKV struct {
	kvstoretest.KV
	ops, failed *atomic.Int64
	last        *atomic.Value
}

func (c countingKV) note(err error) error {
	c.ops.Add(1)
	if err != nil && !errors.Is(err, kvstore.ErrNotFound) && !errors.Is(err, kvstore.ErrExists) {
		c.failed.Add(1)
		c.last.Store(err.Error())
	}
	return err
}

func (c countingKV) Get(ctx context.Context, key []byte) ([]byte, error) {
	v, err := c.KV.Get(ctx, key)
	return v, c.note(err)
}

func (c countingKV) Insert(ctx context.Context, key, value []byte) error {
	return c.note(c.KV.Insert(ctx, key, value))
}

func (c countingKV) Update(ctx context.Context, key, value []byte) error {
	return c.note(c.KV.Update(ctx, key, value))
}

func (c countingKV) Put(ctx context.Context, key, value []byte) error {
	return c.note(c.KV.Put(ctx, key, value))
}

func (c countingKV) Delete(ctx context.Context, key []byte) error {
	return c.note(c.KV.Delete(ctx, key))
}

// TestSwarmAdoptLincheckLocal: goroutines of two stores run the mixed workload on a local
// fabric with torn accesses and jitter while one replica's node restarts empty, both stores
// adopt it mid-run (repopulating it), and then another node (the home node, the first of the
// replicas) crashes: no operation fails, and the history is linearizable. The workload runs
// in rounds until the second crash is some way behind it.
func TestSwarmAdoptLincheckLocal(t *testing.T) {
	t.Parallel()
	// Eight client slots per compute node keep the objects (a lane per writer) small: deleted
	// objects are never reclaimed, and the run makes a few hundred. They fit in 2 MiB nodes
	// (the test passes on them); 4 MiB ones leave room, where larger ones cost seconds of the
	// race detector's shadow memory and of Restart zeroing node 3.
	f, err := local.New(local.Options{Shape: local.Shape{MemoryNodes: 3, ComputeNodes: 2, MemorySize: 4 << 20, ClientsPerNode: 12, MaxHandlers: 2},
		DownTimeout: 20 * time.Millisecond, Tearing: true, Jitter: 5 * time.Microsecond, Seed: 11})
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	// A small index (eight groups) keeps its repopulation short under the race detector.
	o := kvstore.Options{Alloc: quietAlloc, Index: kvstore.Swarm{Params: swarmParams, Index: race.Params{Groups: 8}}}
	stores := []*kvstore.Store{openStore(t, f, o), openStore(t, f, o)}
	rt := f.Runtime()
	h := kvModel.NewHistory(rt)
	ctx := context.Background()
	var ops, failed atomic.Int64
	var last atomic.Value
	var phase atomic.Int32 // 0 running, 1 restarted, 2 adopted, 3 crashed, 4 stop
	const perStore = 2
	n := len(stores) * perStore
	w := mix
	w.ops, w.unknown = 8, 1000
	done := make(chan error, 1)
	go func() {
		done <- farmemtest.Parallel(rt, n, func(g int) error {
			s := stores[g%len(stores)]
			rng := rt.NewRand()
			for round := 0; phase.Load() < 4; round++ {
				kv := countingKV{KV: s, ops: &ops, failed: &failed, last: &last}
				wl := kvstoretest.Workload{Keys: w.keys, Ops: w.ops, Get: w.get, Insert: w.insert, Update: w.update, Put: w.put,
					MaxVal: w.maxVal, Unknown: w.unknown}
				if err := wl.Run(ctx, kv, g+n*round, rng, h); err != nil {
					return err
				}
				// A pause between rounds, longer while the node is being adopted, leaves the
				// adoption some of the two cores (under the race detector, the index's
				// repopulation competes with every operation's replicated reads).
				d := 5 * time.Millisecond
				if phase.Load() == 1 {
					d = 20 * time.Millisecond
				}
				if err := rt.Sleep(ctx, d); err != nil {
					return err
				}
			}
			return nil
		})
	}()
	// until waits until the workload made k more operations.
	until := func(k int64) {
		want := ops.Load() + k
		for ops.Load() < want {
			select {
			case err := <-done:
				require.NoError(t, err)
				t.Fatal("the workload ended before the faults")
			case <-time.After(2 * time.Millisecond):
			}
		}
	}
	until(40)
	require.NoError(t, f.Restart(3))
	phase.Store(1)
	until(20)
	start := time.Now()
	before := ops.Load()
	for _, s := range stores {
		rep, err := s.Adopt(ctx, 3)
		require.NoError(t, err)
		require.Zero(t, rep.Lost)
	}
	t.Logf("both stores adopted node 3 in %v, %d operations meanwhile", time.Since(start), ops.Load()-before)
	phase.Store(2)
	until(40)
	require.NoError(t, f.Crash(1))
	phase.Store(3)
	atCrash := ops.Load()
	until(40)

	phase.Store(4)
	stop := time.Now()

	require.NoError(t, <-done)
	t.Logf("the last rounds took %v; %d ops after the second crash", time.Since(stop), ops.Load()-atCrash)
	require.Greater(t, ops.Load()-atCrash, int64(n), "operations ran after the second crash")
	sum, verdict := h.Verify()
	t.Logf("%v; %d operations, %d failed", sum, ops.Load(), failed.Load())
	if v := last.Load(); v != nil {
		t.Logf("last failure: %v", v)
	}
	require.Zero(t, failed.Load(), "failed operations")
	require.NoError(t, verdict)
	for _, s := range stores {
		for k := range w.keys {
			_, err := s.Get(ctx, kvstoretest.Key(k))
			if !errors.Is(err, kvstore.ErrNotFound) {
				require.NoError(t, err)
			}
		}
	}
	require.Equal(t, farmem.NodeUp, farmem.StatusOf(f, 3).State)
}

// TestSwarmHealUnformatted: a key is inserted while node 3 hangs (its replica of the new object
// is never formatted), updated once node 3 is back, and node 2 crashes: a second store, which
// opens the object afresh from nodes 1 and 3, formats node 3's replica from node 1 (heal) and
// reads the latest value; the key keeps working.
func TestSwarmHealUnformatted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newSwarmLocal(t, local.Options{Shape: local.Shape{MemorySize: 4 << 20}})
	s := openStore(t, f, swarmOptions())
	require.NoError(t, s.Insert(ctx, key(0), val(0, 16)))
	require.NoError(t, f.Hang(3))
	require.NoError(t, s.Insert(ctx, key(1), val(1, 16)))
	require.NoError(t, f.Resume(3))
	addrs, err := kvstore.SwarmObjectAddrs(ctx, s, key(1))
	require.NoError(t, err)
	m, err := f.Open(ctx, f.Hosted()[0])
	require.NoError(t, err)
	defer m.Close()
	hdr := make([]byte, 8)
	require.NoError(t, m.Read(ctx, addrs[2], hdr))
	require.Equal(t, make([]byte, 8), hdr, "node 3's replica was not formatted")
	require.NoError(t, s.Update(ctx, key(1), val(11, 16)))
	// The index's words written while node 3 hung (the key's entry and block, the object's life
	// word) reach it through the replicated memory's catch-up copies, one per batch the
	// writing handle runs once node 3 answers again: run some.
	for i := range 200 {
		_, err := s.Get(ctx, key(100+uint64(i%4)))
		require.ErrorIs(t, err, kvstore.ErrNotFound)
		time.Sleep(100 * time.Microsecond)
	}
	require.NoError(t, f.Crash(2))
	s2 := openStore(t, f, swarmOptions())
	got, err := s2.Get(ctx, key(1))
	require.NoError(t, err)
	require.Equal(t, val(11, 16), got)
	require.NoError(t, m.Read(ctx, addrs[2], hdr))
	require.NotEqual(t, make([]byte, 8), hdr, "healed")
	require.NoError(t, s2.Update(ctx, key(1), val(12, 16)))
	for _, st := range []*kvstore.Store{s, s2} {
		got, err = st.Get(ctx, key(1))
		require.NoError(t, err)
		require.Equal(t, val(12, 16), got)
		got, err = st.Get(ctx, key(0))
		require.NoError(t, err)
		require.Equal(t, val(0, 16), got)
	}
}
