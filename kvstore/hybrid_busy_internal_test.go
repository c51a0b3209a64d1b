package kvstore

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/hybrid"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/internal/dstest"
)

// TestHybridInsertRetriesBusyLeaf: an update paused while it holds its leaf's Spear count
// keeps the insert that must split the leaf from draining it (hybrid.ErrBusy after half the
// lease); once the pause ends, the store's insert tries again and succeeds instead of failing
// on a descheduled writer. The pause ends when the inserter has undone its first SMO, so the
// retry is exercised whatever the machine's speed.
func TestHybridInsertRetriesBusyLeaf(t *testing.T) {
	ctx := context.Background()
	f, root := dstest.Local(t, local.Options{Shape: local.Shape{ComputeNodes: 2}}, func(ctx context.Context, m farmem.Memory, a *alloc.Allocator) (farmem.Addr, error) {
		return hybrid.Create(ctx, m, a, hybrid.Params{LeafSlots: 8, BlockValues: true})
	})
	open := func(node int, wrap func(farmem.Memory) farmem.Memory) *hybridIndex {
		m, err := f.Open(ctx, f.Topology().ComputeNodes()[node])
		require.NoError(t, err)
		t.Cleanup(func() { _ = m.Close() })
		a, err := alloc.New(ctx, m, dstest.AllocOptions)
		require.NoError(t, err)
		t.Cleanup(func() { _ = a.Close() })
		tm := m
		if wrap != nil {
			tm = wrap(m)
		}
		tr, err := hybrid.Open(ctx, tm, a, root, hybrid.Options{Lease: 20 * time.Millisecond})
		require.NoError(t, err)
		return &hybridIndex{t: tr}
	}
	key := func(i uint64) []byte { return []byte{8, 8, 8, 8, 8, 8, 8, byte(i)} }

	// u: its update pauses right after the batch that took the leaf's Spear count.
	paused, resume := make(chan struct{}), make(chan struct{})
	var fired atomic.Bool
	u := open(0, func(m farmem.Memory) farmem.Memory {
		return &farmemtest.Interposer{Memory: m, After: func(_ context.Context, v farmemtest.Verb, _ uint64, err error) {
			if err != nil || v.Single {
				return
			}
			for _, op := range v.Batch.Ops {
				if op.Kind == farmem.OpFAA && op.Swap == 1 && !fired.Swap(true) {
					close(paused)
					<-resume
					return
				}
			}
		}}
	})
	// w: the inserter; the pause ends once w has undone an SMO it could not drain (its claim
	// given back by a CAS to zero).
	var undone sync.Once
	w := open(1, func(m farmem.Memory) farmem.Memory {
		return &farmemtest.Interposer{Memory: m, After: func(_ context.Context, v farmemtest.Verb, word uint64, err error) {
			if err == nil && v.Single {
				if op := v.Op(); op.Kind == farmem.OpCAS && op.Swap == 0 && op.Cmp>>48 != 0 && op.Cmp != ^uint64(0) && word == op.Cmp {
					undone.Do(func() { close(resume) })
				}
			}
		}}
	})
	for i := uint64(1); i <= 8; i++ {
		require.NoError(t, w.Insert(ctx, key(i), []byte{byte(i)}))
	}
	done := make(chan error, 1)
	go func() { done <- u.Update(ctx, key(1), []byte("updated")) }()
	<-paused
	before := w.t.Stats().DrainReads
	require.NoError(t, w.Insert(ctx, key(9), []byte{9}), "the insert tries again once the writer is back")
	require.Greater(t, w.t.Stats().DrainReads, before, "it drained")
	require.NoError(t, <-done)
	select {
	case <-resume:
	default:
		t.Fatal("the first SMO was not undone: the retry was not exercised")
	}
	for i := uint64(1); i <= 9; i++ {
		v, err := w.Get(ctx, key(i))
		require.NoError(t, err)
		if i == 1 {
			require.Equal(t, "updated", string(v))
		} else {
			require.Equal(t, []byte{byte(i)}, v)
		}
	}
}
