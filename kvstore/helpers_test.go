package kvstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/kvstore"
	"github.com/farmem/farmem/kvstore/kvstoretest"
)

// quietAlloc are allocator options under which a test's pins cost no round trip (announcements
// are refreshed once a second) and leases outlast any test.
var quietAlloc = alloc.Options{Lease: 10 * time.Second, Refresh: time.Second, ScanInterval: time.Millisecond}

// newLocal starts a local fabric with strict mode on; the cleanup checks it saw no plain write
// over an atomic word.
func newLocal(t testing.TB, lo local.Options) *local.Fabric {
	t.Helper()
	lo.Strict = true
	if lo.MemorySize == 0 {
		lo.MemorySize = 32 << 20
	}
	f, err := local.New(lo)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.Zero(t, f.Violations(), "strict-mode violations")
		_ = f.Close()
	})
	return f
}

// openStore opens a store on f and closes it at cleanup.
func openStore(t testing.TB, f farmem.Fabric, o kvstore.Options) *kvstore.Store {
	t.Helper()
	s, err := kvstore.Open(context.Background(), f, o)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// key returns the key of index i: "key" and 8 big-endian bytes (kvstoretest.Key).
func key(i uint64) []byte { return kvstoretest.Key(i) }

// val returns a value of n bytes (at least 8) carrying v in its first 8 (kvstoretest.Val).
func val(v uint64, n int) []byte { return kvstoretest.Val(v, n) }

// unval returns the v a value of val carries, checking the rest of it (kvstoretest.Unval).
func unval(b []byte) (uint64, error) { return kvstoretest.Unval(b) }

// heapUsed returns the bytes handed out from the heaps of every memory node (bump pointers).
func heapUsed(t testing.TB, ctx context.Context, m farmem.Memory) uint64 {
	t.Helper()
	var n uint64
	for _, id := range m.Topology().MemoryNodes() {
		h, err := alloc.Open(ctx, m, id)
		require.NoError(t, err)
		n += min(h.Bump, h.HeapLimit) - h.HeapBase
	}
	return n
}
