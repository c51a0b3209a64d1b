package kvstore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
	// objects are never reclaimed, and the run makes a few hundred.
	f, err := local.New(local.Options{Shape: local.Shape{MemoryNodes: 3, ComputeNodes: 2, MemorySize: 16 << 20, ClientsPerNode: 12, MaxHandlers: 2},
		DownTimeout: 20 * time.Millisecond, Tearing: true, Jitter: 5 * time.Microsecond, Seed: 11})
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	o := swarmOptions()
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
					d = 100 * time.Millisecond
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
