package main

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// Workload E over --index blink on default (string) keys: the store loads every record and
// runs scans with no errors.
func TestBenchWorkloadEBlink(t *testing.T) {
	t.Parallel() // its runs last set times, which overlap with other tests' instead of adding to them
	out, errOut, code := cli(t, "bench", "--transport", "local", "--mem-size", "64MiB", "--records", "500",
		"--workload", "e", "--index", "blink", "--clients", "2", "--duration", "150ms", "--warmup", "0s")
	require.Equal(t, 0, code, "%s\n%s", out, errOut)
	load := benchRow(out, "kvstore/local", "load")
	require.NotNil(t, load, out)
	require.Equal(t, []string{"500", "0"}, load[4:6], "every record loaded")
	run := benchRow(out, "kvstore/local", "run")
	require.NotNil(t, run, out)
	ops, err := strconv.Atoi(run[4])
	require.NoError(t, err, "%v", run)
	require.Positive(t, ops)
	require.Equal(t, "0", run[5], "no failed ops")
}
