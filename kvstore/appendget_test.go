package kvstore_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/cxl"
	"github.com/farmem/farmem/kvstore"
)

// AppendGet appends to the caller's buffer, leaves it as it was for an absent key, and reads
// with no allocation once the buffer has room (on cxl, whose verbs allocate nothing).
func TestAppendGet(t *testing.T) {
	ctx := context.Background()
	s := cxlStore(t)
	const n = 64
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = key(uint64(i))
		require.NoError(t, s.Insert(ctx, keys[i], val(uint64(i), 100)))
	}

	got, err := s.AppendGet(ctx, []byte("prefix:"), keys[3])
	require.NoError(t, err)
	require.Equal(t, append([]byte("prefix:"), val(3, 100)...), got)
	got, err = s.AppendGet(ctx, []byte("prefix:"), []byte("absent"))
	require.ErrorIs(t, err, kvstore.ErrNotFound)
	require.Equal(t, []byte("prefix:"), got)

	ss, err := s.Session(ctx)
	require.NoError(t, err)
	defer ss.Close()
	buf := make([]byte, 0, 256)
	for i := range keys {
		want, err := ss.Get(ctx, keys[i])
		require.NoError(t, err)
		got, err := ss.AppendGet(ctx, buf[:0], keys[i])
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	i := 0
	allocs := testing.AllocsPerRun(200, func() {
		var err error
		buf, err = ss.AppendGet(ctx, buf[:0], keys[i%n])
		if err != nil {
			t.Fatal(err)
		}
		i++
	})
	require.Zero(t, allocs, "allocations per AppendGet into a reused buffer")
}

// Uncontended Put, Delete and Insert allocate nothing either (on cxl, with the default
// synchronizer, whose Delete goes through the queue lock): AllocsPerRun's integer average, so
// the allocator's occasional bookkeeping does not count.
func TestWritesAllocateNothing(t *testing.T) {
	ctx := context.Background()
	s := cxlStore(t)
	ss, err := s.Session(ctx)
	require.NoError(t, err)
	defer ss.Close()
	const n = 64
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = key(uint64(i))
		require.NoError(t, ss.Insert(ctx, keys[i], val(uint64(i), 100)))
	}
	v := val(7, 100)
	i := 0
	allocs := testing.AllocsPerRun(200, func() {
		if err := ss.Put(ctx, keys[i%n], v); err != nil {
			t.Fatal(err)
		}
		i++
	})
	require.Zero(t, allocs, "allocations per Put of a present key")
	allocs = testing.AllocsPerRun(200, func() {
		k := keys[i%n]
		if err := ss.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
		if err := ss.Insert(ctx, k, v); err != nil {
			t.Fatal(err)
		}
		i++
	})
	require.Zero(t, allocs, "allocations per Delete and Insert")
}

// cxlStore opens a store with the default options on a fresh cxl region of one 32 MiB memory
// node, all closed at cleanup.
func cxlStore(t *testing.T) *kvstore.Store {
	t.Helper()
	r, err := cxl.Create("", cxl.Options{Shape: cxl.Shape{MemoryNodes: 1, MemorySize: 32 << 20}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	f, err := r.Attach(cxl.OpenOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	s, err := kvstore.Open(context.Background(), f, kvstore.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}
