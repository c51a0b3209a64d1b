package kvstore_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/kvstore"
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

// key returns the key of index i: "key" and 8 big-endian bytes.
func key(i uint64) []byte {
	b := make([]byte, 11)
	copy(b, "key")
	binary.BigEndian.PutUint64(b[3:], i)
	return b
}

// val returns a value of n bytes (at least 8) carrying v in its first 8.
func val(v uint64, n int) []byte {
	b := make([]byte, max(n, 8))
	binary.LittleEndian.PutUint64(b, v)
	for i := 8; i < len(b); i++ {
		b[i] = byte(v) ^ byte(i)
	}
	return b
}

// unval returns the v a value of val carries, checking the rest of it.
func unval(b []byte) (uint64, error) {
	if len(b) < 8 {
		return 0, fmt.Errorf("value of %d bytes", len(b))
	}
	v := binary.LittleEndian.Uint64(b)
	for i := 8; i < len(b); i++ {
		if b[i] != byte(v)^byte(i) {
			return 0, fmt.Errorf("value %d corrupt at byte %d", v, i)
		}
	}
	return v, nil
}

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
