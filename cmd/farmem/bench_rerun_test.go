package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/bench"
)

// A second bench on a region that holds its records runs without loading them; two processes'
// halves are loaded apart; a bad --process is a usage error.
func TestBenchRerunAndProcess(t *testing.T) {
	region := filepath.Join(t.TempDir(), "b.region")
	// 16 MiB nodes: process 1/2's two allocators load at once while one of them adopts the
	// record of its client id, which holds nearly all of both heaps as free blocks (the store's
	// Absorb gathered them into one client before it closed); the adopter sheds the whole
	// chunks to the pools (alloc's package doc, Handover), or the other allocator runs out.
	// Workload C (reads only): a run of A's updates in between fragments the heap so that few
	// chunks are whole, and then the other allocator can still run out, about 1 run in 25 (the
	// limit alloc's package doc states); this test is about the re-runs and the halves.
	args := func(extra ...string) []string {
		return append([]string{"bench", "--region", region, "--mem-size", "16MiB", "--records", "600",
			"--workload", "c", "--clients", "2", "--duration", "100ms", "--warmup", "0s", "--peers", "none"}, extra...)
	}
	out, errOut, code := cli(t, args("--process", "0/2")...)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, " load ")
	require.Contains(t, errOut, "created region")
	out, errOut, code = cli(t, args("--process", "0/2")...)
	require.Equal(t, 0, code, errOut)
	require.NotContains(t, out, " load ", "the records are there")
	require.Contains(t, errOut, "records 0..299 already")
	out, errOut, code = cli(t, args("--process", "1/2")...)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, " load ", "the other half is new")
	_, errOut, code = cli(t, args()...)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, "records 0..599 already")

	for _, p := range []string{"2/2", "x", "1/0", "-1/2"} {
		_, errOut, code := cli(t, args("--process", p)...)
		require.Equal(t, 2, code, "%s: %s", p, errOut)
		require.Contains(t, errOut, "--process")
	}
}

func TestFailuresCounted(t *testing.T) {
	require.NoError(t, failures([]*bench.Report{{Rows: []bench.Row{{Store: "s", Ops: 10}}}}))
	err := failures([]*bench.Report{{Rows: []bench.Row{
		{Store: "s", Phase: bench.PhaseRun, Ops: 90, Errors: 10, FirstError: "boom"},
		{Store: "p", Phase: bench.PhaseLoad, Error: "refused"},
	}}})
	require.ErrorContains(t, err, "10 of 100 operations failed (the first: s run: boom)")
	require.ErrorContains(t, err, "p  load did not complete: refused")
}
