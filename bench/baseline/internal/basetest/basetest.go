// Package basetest holds what the baseline trees' tests (bench/baseline/...) share beyond
// internal/dstest's fabric set-up: a check of one operation's round trips and verbs and one
// operation mix for linearizability checks, and the check that cache visits pay the simulator's
// local-access price. It is for tests only (it asserts with testify and fails the test given).
package basetest

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
)

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

// RequireCacheVisitsCharged asserts the baselines' rule for their caches in the simulator:
// warm(t, access, budget) returns the virtual time of a warm Get and of a warm scan on a model
// whose local access costs access, with a cache of budget bytes. With a cache, a local access
// dearer by 1ms makes each exactly 1ms slower (one charged cache visit each); with a budget of
// 0 it changes nothing.
func RequireCacheVisitsCharged(t *testing.T, base time.Duration, warm func(t *testing.T, access time.Duration, budget int64) (get, scan time.Duration)) {
	t.Helper()
	get, scan := warm(t, base, 1<<20)
	slowGet, slowScan := warm(t, base+time.Millisecond, 1<<20)
	require.Equal(t, time.Millisecond, slowGet-get, "warm Get: %v, with a 1ms dearer local access: %v", get, slowGet)
	require.Equal(t, time.Millisecond, slowScan-scan, "warm scan: %v, with a 1ms dearer local access: %v", scan, slowScan)
	get0, scan0 := warm(t, base, 0)
	slowGet0, slowScan0 := warm(t, base+time.Millisecond, 0)
	require.Equal(t, get0, slowGet0)
	require.Equal(t, scan0, slowScan0)
}
