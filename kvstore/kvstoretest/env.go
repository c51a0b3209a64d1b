package kvstoretest

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/internal/dstest"
	"github.com/farmem/farmem/kvstore"
	"github.com/farmem/farmem/sim"
)

// The fixtures below are what the store's test packages share (kvstore's own tests and those
// split off from them, such as kvstore/replcheck): a strict local fabric, a store closed at
// cleanup, a simulator closed at cleanup, and the answers every store must give.

// QuietAlloc are allocator options under which a test's pins cost no round trip (announcements
// are refreshed once an hour) and leases outlast any test (dstest.AllocOptions).
var QuietAlloc = dstest.AllocOptions

// ShortLeaseAlloc are allocator options for a test that waits out a lease or the pin budget
// derived from it (an adoption's Repopulate sleeps one): dstest.ShortLeaseAllocOptions.
var ShortLeaseAlloc = dstest.ShortLeaseAllocOptions

// NewLocal starts a local fabric with strict mode on (and 32 MiB per memory node unless lo
// says otherwise); the cleanup checks it saw no plain write over an atomic word, then closes it.
func NewLocal(t testing.TB, lo local.Options) *local.Fabric {
	t.Helper()
	return dstest.StrictLocal(t, lo, 32<<20)
}

// OpenStore opens a store on f and closes it at cleanup, requiring that both succeed.
func OpenStore(t testing.TB, f farmem.Fabric, o kvstore.Options) *kvstore.Store {
	t.Helper()
	s, err := kvstore.Open(context.Background(), f, o)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// StartSim starts a simulated cluster of model with seed, closed when the test ends.
func StartSim(t testing.TB, model sim.Model, seed uint64) *sim.Sim {
	t.Helper()
	sm, err := sim.New(model, seed)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sm.Close() })
	return sm
}

// Scanner is what a *kvstore.Store and a *kvstore.Session have in common: KV and Scan.
type Scanner interface {
	KV
	Scan(ctx context.Context, from, to []byte, limit int) ([]kvstore.Pair, error)
}

// Semantics checks each operation's answers on a key no one else touches ("semantics/" and
// tag) of a store without an ordered index: absent, inserted, refused a second insert,
// updated, put while present and while absent, deleted, an empty value, and Scan refused with
// kvstore.ErrNoOrderedIndex.
func Semantics(t testing.TB, s Scanner, tag string) {
	t.Helper()
	ctx := context.Background()
	k := []byte("semantics/" + tag)
	_, err := s.Get(ctx, k)
	require.ErrorIs(t, err, kvstore.ErrNotFound)
	require.ErrorIs(t, s.Update(ctx, k, []byte("x")), kvstore.ErrNotFound)
	require.ErrorIs(t, s.Delete(ctx, k), kvstore.ErrNotFound)
	require.NoError(t, s.Insert(ctx, k, []byte("one")))
	require.ErrorIs(t, s.Insert(ctx, k, []byte("two")), kvstore.ErrExists)
	v, err := s.Get(ctx, k)
	require.NoError(t, err)
	require.Equal(t, "one", string(v))
	require.NoError(t, s.Update(ctx, k, []byte("three")))
	v, _ = s.Get(ctx, k)
	require.Equal(t, "three", string(v))
	require.NoError(t, s.Put(ctx, k, []byte("four"))) // present: updates
	v, _ = s.Get(ctx, k)
	require.Equal(t, "four", string(v))
	require.NoError(t, s.Delete(ctx, k))
	_, err = s.Get(ctx, k)
	require.ErrorIs(t, err, kvstore.ErrNotFound)
	require.NoError(t, s.Put(ctx, k, []byte("five"))) // absent: inserts
	v, _ = s.Get(ctx, k)
	require.Equal(t, "five", string(v))
	require.NoError(t, s.Put(ctx, k, nil)) // an empty value is a value
	v, err = s.Get(ctx, k)
	require.NoError(t, err)
	require.Empty(t, v)
	_, err = s.Scan(ctx, nil, nil, 10)
	require.ErrorIs(t, err, kvstore.ErrNoOrderedIndex)
	require.ErrorIs(t, err, farmem.ErrNotSupported)
}

// ShortLeases are allocator options with leases short enough that a paused client outlives its
// own: others reuse what it read, and its operations must notice and retry. Retired blocks are
// scanned for every 250 µs, so they come back within a few operations.
var ShortLeases = alloc.Options{Lease: 5 * time.Millisecond, Refresh: 500 * time.Microsecond, ScanInterval: 250 * time.Microsecond}

// HeapUsed returns the bytes handed out from the heaps of every memory node (their bump
// pointers), read through m.
func HeapUsed(t testing.TB, ctx context.Context, m farmem.Memory) uint64 {
	t.Helper()
	var n uint64
	for _, id := range m.Topology().MemoryNodes() {
		h, err := alloc.Open(ctx, m, id)
		require.NoError(t, err)
		n += min(h.Bump, h.HeapLimit) - h.HeapBase
	}
	return n
}

// stressEnv names the environment setting StressScale reads.
const stressEnv = "KVSTORE_STRESS"

// StressScale returns the factor by which a stress run multiplies the store's checks' rounds
// and operation counts: the integer above 1 in the environment setting stressEnv names, or 1.
func StressScale() int {
	if n, err := strconv.Atoi(os.Getenv(stressEnv)); err == nil && n > 1 {
		return n
	}
	return 1
}
