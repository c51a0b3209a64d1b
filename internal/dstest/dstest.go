// Package dstest holds set-up shared by the tests of the structures in ds/ and of the baselines
// in bench/baseline: a formatted, strict-mode local fabric with one structure created on it. It is
// imported by test code only (_test.go files and test-support packages such as kvstoretest).
package dstest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

// AllocOptions are the allocator options the structures' tests run with: announcements
// refreshed once an hour under a two-hour lease, so that no pin of a test costs a round trip
// however slowly the machine runs it (with a refresh every second, a test that asserted an
// operation's exact round trips paid one more, a pin's announcement, when a loaded machine took
// over a second between the store's first pin and the operation), and a retired-block scan at
// most every millisecond. A lone writer still reuses what it retires (its own announcement is
// all that holds its blocks back); other retired blocks wait for the hour, so an allocation
// that runs out of room waits at most 10 s for them (ReclaimWait: the full wait would be four
// hours) and then fails with farmem.ErrNoSpace, as a test that fills its nodes expects. A test
// that waits out a lease or a pin budget derived from it uses ShortLeaseAllocOptions.
var AllocOptions = alloc.Options{Lease: 2 * time.Hour, Refresh: time.Hour, ScanInterval: time.Millisecond, ReclaimWait: 10 * time.Second}

// ShortLeaseAllocOptions are AllocOptions with a 10 s lease refreshed every second, for a test
// that waits out a lease or what derives from it (kvstore's pin budget, a quarter of the lease
// left after a refresh, which race's Repopulate sleeps), at the price of pins that refresh, a
// round trip, once a second.
var ShortLeaseAllocOptions = alloc.Options{Lease: 10 * time.Second, Refresh: time.Second, ScanInterval: time.Millisecond}

// StrictLocal starts a local fabric with lo and strict mode on (size bytes per memory node
// unless lo says otherwise). The test's cleanup requires no strict-mode violation and closes
// the fabric.
func StrictLocal(t testing.TB, lo local.Options, size uint64) *local.Fabric {
	t.Helper()
	lo.Strict = true
	if lo.MemorySize == 0 {
		lo.MemorySize = size
	}
	f, err := local.New(lo)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.Zero(t, f.Violations(), "strict-mode violations")
		_ = f.Close()
	})
	return f
}

// Local starts a local fabric with lo and strict mode on (8 MiB memory nodes unless lo says
// otherwise: a fabric's nodes are allocated whole, and the runtime zero-fills, page by page,
// nodes that reuse memory an earlier fabric freed), formats its allocators, and calls create
// with a client and allocator on the first compute node to build the structure under test,
// returning the fabric and create's root. The test's cleanup requires no strict-mode
// violation and closes the fabric.
func Local(t testing.TB, lo local.Options, create func(context.Context, farmem.Memory, *alloc.Allocator) (farmem.Addr, error)) (*local.Fabric, farmem.Addr) {
	t.Helper()
	f := StrictLocal(t, lo, 8<<20)
	ctx := context.Background()
	m, err := f.Open(ctx, f.Topology().ComputeNodes()[0])
	require.NoError(t, err)
	defer m.Close()
	require.NoError(t, alloc.FormatAll(ctx, m, alloc.FormatOptions{}))
	a, err := alloc.New(ctx, m, AllocOptions)
	require.NoError(t, err)
	defer a.Close()
	root, err := create(ctx, m, a)
	require.NoError(t, err)
	return f, root
}
