package sherman

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

// TestHandedRoundTrips holds a leaf's lock with one client while another client of the same
// compute node updates a key of that leaf: the second queues locally, is handed the lock
// without a CAS, and its update costs HandedRoundTrips.
func TestHandedRoundTrips(t *testing.T) {
	lo := local.Options{Strict: true}
	lo.MemorySize = 16 << 20
	f, err := local.New(lo)
	require.NoError(t, err)
	defer f.Close()
	ctx := context.Background()
	node := f.Topology().ComputeNodes()[0]
	open := func() farmem.Memory {
		m, err := f.Open(ctx, node)
		require.NoError(t, err)
		t.Cleanup(func() { _ = m.Close() })
		return m
	}
	m0 := open()
	require.NoError(t, alloc.FormatAll(ctx, m0, alloc.FormatOptions{}))
	a0, err := alloc.New(ctx, m0, alloc.Options{Lease: 10 * time.Second, Refresh: time.Second})
	require.NoError(t, err)
	defer a0.Close()
	root, err := Create(ctx, m0, a0, Params{})
	require.NoError(t, err)
	cache, locks := NewCache(1<<20), NewLockTable()
	tr := func() (*Tree, farmem.Memory) {
		m := open()
		a, err := alloc.New(ctx, m, alloc.Options{Lease: 10 * time.Second, Refresh: time.Second})
		require.NoError(t, err)
		t.Cleanup(func() { _ = a.Close() })
		x, err := Open(ctx, m, a, root, Options{Cache: cache, Locks: locks})
		require.NoError(t, err)
		return x, m
	}
	ta, _ := tr()
	tb, mb := tr()
	k := binary.BigEndian.AppendUint64(nil, 5)
	for i := range uint64(200) { // leaves under a root: the root is cached
		require.NoError(t, ta.Insert(ctx, binary.BigEndian.AppendUint64(nil, 2*i+1), 1))
	}
	_, err = tb.Get(ctx, k)
	require.NoError(t, err)
	leaf, err := ta.lockedLeaf(ctx, k) // a holds the leaf's lock
	require.NoError(t, err)
	before := mb.Stats()
	done := make(chan error, 1)
	go func() { done <- tb.Update(ctx, k, 2) }()
	require.Eventually(t, func() bool {
		locks.mu.Lock()
		defer locks.mu.Unlock()
		e := locks.m[leaf.addr]
		return e != nil && len(e.waiters) == 1
	}, 10*time.Second, time.Millisecond)
	require.NoError(t, ta.release(ctx, leaf.addr, &farmem.Batch{}, true))
	require.NoError(t, <-done)
	d := mb.Stats().Sub(before)
	require.Equal(t, uint64(HandedRoundTrips), d.RoundTrips, "%v", d)
	require.Zero(t, d.VerbsOf(farmem.OpCAS)-1, "one CAS: the release, no lock CAS (%v)", d)
	require.Equal(t, uint64(1), tb.Stats().Handovers)
	v, err := ta.Get(ctx, k)
	require.NoError(t, err)
	require.Equal(t, uint64(2), v)
}
