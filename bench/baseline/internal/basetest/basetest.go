// Package basetest holds what the baseline trees' tests (bench/baseline/...) share: the
// allocator options, a strict-mode local fabric formatted and holding one structure, and a
// check of one operation's round trips and verbs. It is for tests only (it asserts with
// testify and fails the test given); ds/internal/dstest serves ds/ the same way but cannot be
// imported from bench/.
package basetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

// AllocOptions are the allocator options of the baselines' tests: a lease long enough never to
// lapse in a test and a fast scan.
var AllocOptions = alloc.Options{Lease: 10 * time.Second, Refresh: time.Second, ScanInterval: time.Millisecond}

// LocalFabric starts a strict-mode local fabric from lo (64 MiB of memory per node unless lo
// says otherwise), formats its memory and creates one structure with create from the first
// compute node, with an allocator it closes after. It returns the fabric and the structure's
// root; at cleanup it asserts that strict mode saw no violation and closes the fabric.
func LocalFabric(t testing.TB, lo local.Options, create func(context.Context, farmem.Memory, *alloc.Allocator) (farmem.Addr, error)) (*local.Fabric, farmem.Addr) {
	t.Helper()
	lo.Strict = true
	if lo.MemorySize == 0 {
		lo.MemorySize = 64 << 20
	}
	f, err := local.New(lo)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.Zero(t, f.Violations(), "strict-mode violations")
		_ = f.Close()
	})
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

// Verbs counts one operation's verbs by kind.
type Verbs struct{ Read, Write, CAS uint64 }

// Cost runs f, an operation named name on m, and asserts its error (wantErr, or none) and, from
// m's Stats before and after, its round trips and verbs; it logs what it moved.
func Cost(t testing.TB, m farmem.Memory, name string, wantRTT uint64, want Verbs, f func() error, wantErr error) {
	t.Helper()
	before := m.Stats()
	err := f()
	if wantErr != nil {
		require.ErrorIs(t, err, wantErr, name)
	} else {
		require.NoError(t, err, name)
	}
	d := m.Stats().Sub(before)
	require.Equal(t, wantRTT, d.RoundTrips, "%s: round trips (%v)", name, d)
	got := Verbs{d.VerbsOf(farmem.OpRead), d.VerbsOf(farmem.OpWrite), d.VerbsOf(farmem.OpCAS)}
	require.Equal(t, want, got, "%s: verbs (%v)", name, d)
	t.Logf("%-16s %d round trips, %5d bytes in, %4d bytes out", name, d.RoundTrips, d.BytesIn, d.BytesOut)
}

// Parallel runs f(0), ..., f(n-1) at once in goroutines of their own and, once all have
// returned, asserts that none failed (naming the client that did).
func Parallel(t testing.TB, n int, f func(i int) error) {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = f(i) }()
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "client %d", i)
	}
}
