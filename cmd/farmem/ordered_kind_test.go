package main

import (
	"strconv"
	"testing"

	"github.com/farmem/farmem/kvstore/kvstoretest"
	"github.com/stretchr/testify/require"
)

// An ordered kind added to the --index table runs workload E on the store, on a real fabric
// and on the simulator, under both key formats, and the run names the index.
func TestBenchOrderedIndexPlugsIn(t *testing.T) {
	saved := indexKinds
	t.Cleanup(func() { indexKinds = saved })
	indexKinds = append(indexKinds[:len(indexKinds):len(indexKinds)], indexKind{name: "heap-ordered", ordered: true,
		about: "a test's ordered index on the heap",
		kind:  kvstoretest.HeapOrdered})

	for _, format := range []string{"string", "binary64"} {
		out, errOut, code := cli(t, "bench", "--transport", "local", "--mem-size", "32MiB", "--records", "400",
			"--workload", "e", "--index", "heap-ordered", "--set", "keyformat="+format, "--peers", "none",
			"--clients", "2", "--duration", "150ms", "--warmup", "0s")
		require.Equal(t, 0, code, "%s\n%s", out, errOut)
		require.Contains(t, out, "index heap-ordered")
		require.Equal(t, []string{"400", "0"}, benchRow(out, "kvstore/local", "load")[4:6])
		run := benchRow(out, "kvstore/local", "run")
		require.NotNil(t, run, out)
		ops, err := strconv.Atoi(run[4])
		require.NoError(t, err, "%v", run)
		require.Positive(t, ops)
		require.Equal(t, "0", run[5], "no failed scans or inserts")
		require.NotContains(t, errOut, "needs an ordered index")
	}

	out, errOut, code := cli(t, "bench", "--transport", "sim", "--mem-size", "32MiB", "--records", "300",
		"--workload", "e", "--index", "heap-ordered", "--clients", "2", "--duration", "100us", "--warmup", "0s")
	require.Equal(t, 0, code, "%s\n%s", out, errOut)
	run := benchRow(out, "kvstore/sim", "run")
	require.NotNil(t, run, out)
	require.NotEqual(t, "unsupported", run[4])
	require.Equal(t, "0", run[5])

	// The hash store's note names the ordered kinds there are.
	_, errOut, code = cli(t, "bench", "--transport", "local", "--mem-size", "32MiB", "--records", "300",
		"--workload", "e", "--peers", "none", "--clients", "1", "--duration", "50ms", "--warmup", "0s")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "choose one with --index: hybrid, blink, heap-ordered")
}
