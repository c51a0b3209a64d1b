package main

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every combination of --index, --sync and --replicas that kvstore's options matrix allows runs
// through `farmem bench` over cxl: it loads every record and runs workload A (an update mix,
// so every synchronizer changes pointers) with no failed operation, and names its synchronizer.
func TestBenchEveryAllowedCombination(t *testing.T) {
	combos := matrixCombos()
	require.Len(t, combos, 19, "the matrix changed: update this test and the README's tables")
	for _, c := range combos {
		t.Run(strings.ReplaceAll(c.String(), " ", ""), func(t *testing.T) {
			t.Parallel()
			// FlexKV and its baseline keep three copies of each KV block in the symmetric
			// area, which updates fill until their epochs let the blocks be reused. (Every
			// combination passes on a quarter of these sizes; the region is allocated in
			// full, so larger ones cost their size in page faults.)
			size, clients := "4MiB", "2"
			if c.idx.name == "flexkv" || c.idx.name == "aceso" {
				size = "12MiB"
			}
			if c.idx.name == "swarm" {
				// Every object keeps a lane of record buffers per possible writer on each
				// replica (ds/maxreg), sized for the workload's values.
				size = "16MiB"
			}
			if c.idx.name == "blink" {
				// One client: over cxl the race detector reports SELCC's frame fields
				// (ds/selcc Guard.Write against Unlock), which a latch in the cxl region
				// guards, as racing between two clients of one node.
				clients = "1"
			}
			// A 40 ms window can pass with no operation completed when the machine deschedules
			// the process for all of it: the run is repeated once with ten times the window.
			var run []string
			for _, d := range []string{"40ms", "400ms"} {
				args := []string{"bench", "--transport", "cxl", "--mem-nodes", "3", "--mem-size", size, "--records", "200",
					"--workload", "a", "--set", "keyformat=binary64", "--clients", clients, "--duration", d, "--warmup", "0s",
					"--peers", "none", "--index", c.idx.name, "--sync", c.sync, "--replicas", strconv.Itoa(max(1, c.idx.replicas))}
				if c.idx.name == "swarm" {
					args = append(args, "--set", "valuesize=64")
				}
				out, errOut, code := cli(t, args...)
				require.Equal(t, 0, code, "%v\n%s\n%s", c, out, errOut)
				require.Contains(t, out, "sync "+c.sync)
				load := benchRow(out, "kvstore/cxl", "load")
				require.NotNil(t, load, out)
				require.Equal(t, []string{"200", "0"}, load[4:6], "every record loaded")
				run = benchRow(out, "kvstore/cxl", "run")
				require.NotNil(t, run, out)
				if run[4] != "0" {
					break
				}
			}
			ops, err := strconv.Atoi(run[4])
			require.NoError(t, err, "%v", run)
			require.Positive(t, ops)
			require.Equal(t, "0", run[5], "no failed ops")
		})
	}
}

// A combination the matrix refuses fails before any run, saying why.
func TestBenchRefusedCombination(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--index", "hybrid", "--sync", "none"},
		{"--index", "blink", "--sync", "optimistic"},
		{"--index", "race", "--sync", "mcs", "--replicas", "3"},
		{"--index", "aceso", "--kv-cache=false"},
	} {
		all := append([]string{"bench", "--transport", "local", "--mem-nodes", "3", "--mem-size", "8MiB", "--records", "10",
			"--duration", "10ms", "--warmup", "0s", "--peers", "none"}, args...)
		out, errOut, code := cli(t, all...)
		require.NotEqual(t, 0, code, "%v\n%s", args, out)
		require.Regexp(t, "refuses|keeps no KV cache", errOut, "%v", args)
	}
}

// --matrix prints one row per allowed combination and workload (here E on sim, briefly): runs
// on the ordered kinds, a dash on the others; inspect then describes a store's configuration.
func TestBenchMatrixAndInspect(t *testing.T) {
	t.Parallel()
	out, errOut, code := cli(t, "bench", "--matrix", "--transport", "sim", "--mem-nodes", "3", "--mem-size", "32MiB",
		"--records", "200", "--workload", "e", "--clients", "4", "--duration", "50us", "--warmup", "20us")
	require.Equal(t, 0, code, "%s\n%s", out, errOut)
	rows := 0
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 5 || f[3] != "e" {
			continue
		}
		rows++
		ordered := f[0] == "hybrid" || f[0] == "blink"
		if !ordered {
			require.Equal(t, "-", f[4], l)
			continue
		}
		ops, err := strconv.ParseFloat(f[4], 64)
		require.NoError(t, err, l)
		require.Positive(t, ops, l)
	}
	require.Equal(t, 19, rows, out)
	_, errOut, code = cli(t, "bench", "--matrix", "--index", "race")
	require.Equal(t, 2, code, "--matrix with --index is a usage error")
	require.Contains(t, errOut, "--index")

	region := filepath.Join(t.TempDir(), "blink.region")
	out, errOut, code = cli(t, "bench", "--region", region, "--mem-size", "32MiB", "--records", "100", "--index", "blink",
		"--workload", "c", "--clients", "1", "--duration", "10ms", "--warmup", "0s", "--peers", "none")
	require.Equal(t, 0, code, "%s\n%s", out, errOut)
	out, errOut, code = cli(t, "inspect", "--region", region)
	require.Equal(t, 0, code, "%s\n%s", out, errOut)
	require.Regexp(t, `index\s+blink \(scans: yes\)`, out)
	require.Regexp(t, `sync\s+none`, out)
	require.Regexp(t, `compute-side cache\s+SELCC`, out)
}
