package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/kvstore"
)

// TestIndexSwarmOption: --index swarm is replicated on 3 nodes by default, takes --set
// replicas=5, and refuses 1 with a message saying why.
func TestIndexSwarmOption(t *testing.T) {
	k, err := indexByName("swarm")
	require.NoError(t, err)
	_, ok := k.kind().(kvstore.Swarm)
	require.True(t, ok)
	require.Equal(t, 3, k.replicas)
	require.True(t, k.replicated)
	k5, rest, err := k.withOptions([]string{"replicas=5", "recordcount=10", "valuesize=64"})
	require.NoError(t, err)
	require.Equal(t, multiFlag{"recordcount=10", "valuesize=64"}, rest)
	require.Equal(t, 5, k5.replicas)
	require.Equal(t, 65, k5.kind().(kvstore.Swarm).Params.ValueSize, "objects sized for the workload's values and the marker byte")
	_, _, err = k.withOptions([]string{"replicas=1"})
	require.ErrorContains(t, err, "3, 5 or 7")
}

// TestBenchSwarm: `farmem bench --index swarm --set replicas=3` runs on the default fabric
// (a cxl region) with three memory nodes, and on local.
func TestBenchSwarm(t *testing.T) {
	t.Parallel() // its runs last set times, which overlap with other tests' instead of adding to them
	if testing.Short() {
		t.Skip("runs the benchmark")
	}
	for _, tr := range []string{"cxl", "local"} {
		args := []string{"bench", "--index", "swarm", "--set", "replicas=3", "--mem-nodes", "3", "--mem-size", "32MiB",
			"--records", "100", "--set", "valuesize=64", "--workload", "b", "--clients", "2", "--duration", "200ms", "--warmup", "50ms", "--peers", "none"}
		if tr != "cxl" {
			args = append(args, "--transport", tr)
		}
		out, errOut, code := cli(t, args...)
		require.Equal(t, 0, code, "%s: %s", tr, errOut)
		rows := 0
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "kvstore/") && strings.Contains(l, " run ") {
				f := strings.Fields(l)
				require.Equal(t, "0", f[5], "%s: no failed ops: %s", tr, l)
				rows++
			}
		}
		require.Positive(t, rows, "%s: a run row: %s", tr, out)
		t.Logf("%s:\n%s", tr, out)
	}
}
