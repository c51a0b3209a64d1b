package main

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// benchRow returns the fields of the table row of store's phase, or nil.
func benchRow(out, store, phase string) []string {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) > 5 && f[0] == store && f[2] == phase {
			return f
		}
	}
	return nil
}

// Workload E through the command, under both key formats: rows for the ordered Go map and
// (when installed) redis with its sorted-set index, with operations and no errors, and for
// the hash store a row and notes saying it needs an ordered index; the exit code is 0, since
// the peers ran.
func TestBenchWorkloadE(t *testing.T) {
	t.Parallel() // its runs last set times, which overlap with other tests' instead of adding to them
	_, redisErr := exec.LookPath("redis-server")
	for _, format := range []string{"string", "binary64"} {
		t.Run(format, func(t *testing.T) {
			out, errOut, code := cli(t, "bench", "--transport", "local", "--mem-size", "32MiB", "--records", "500",
				"--workload", "e", "--index", "race", "--set", "keyformat="+format,
				"--clients", "2", "--duration", "150ms", "--warmup", "0s")
			require.Equal(t, 0, code, "%s\n%s", out, errOut)
			peers := []string{"gomap/btree"}
			if redisErr == nil {
				peers = append(peers, "redis/zset")
			}
			for _, p := range peers {
				load := benchRow(out, p, "load")
				require.NotNil(t, load, "a load row for %s:\n%s", p, out)
				require.Equal(t, []string{"500", "0"}, load[4:6], "%s loaded every record", p)
				run := benchRow(out, p, "run")
				require.NotNil(t, run, "a run row for %s:\n%s", p, out)
				ops, err := strconv.Atoi(run[4])
				require.NoError(t, err, "%s ran: %v", p, run)
				require.Positive(t, ops)
				require.Equal(t, "0", run[5], "%s: no failed ops", p)
			}
			require.NotContains(t, out, "gomap ", "the unordered Go map is not the peer of a workload that scans")
			row := benchRow(out, "kvstore/local", "run")
			require.NotNil(t, row, out)
			require.Equal(t, "unsupported", row[4])
			require.Nil(t, benchRow(out, "kvstore/local", "load"), "a store that cannot run the workload is not loaded")
			require.Contains(t, out, "kvstore/local e: unsupported: kvstore/local: workload e needs an ordered index")
			require.Contains(t, errOut, "kvstore/local cannot run workload e: it scans, which needs an ordered index, and the store's index race is not one")
		})
	}
}

// With no peer, nothing runs workload E: exit 1 and say why, on a real fabric and on the
// simulator alike (whose hash store is not run into failing scans either).
func TestBenchWorkloadENoStoreCanRun(t *testing.T) {
	for _, args := range [][]string{
		{"--transport", "local", "--mem-size", "32MiB", "--peers", "none"},
		{"--transport", "sim", "--mem-size", "32MiB", "--duration", "100us", "--warmup", "0s"},
	} {
		out, errOut, code := cli(t, append([]string{"bench", "--workload", "e", "--records", "300", "--clients", "2",
			"--duration", "100ms", "--warmup", "0s"}, args...)...)
		require.Equal(t, 1, code, "%v:\n%s\n%s", args, out, errOut)
		require.Contains(t, errOut, "no store could run workload e")
		require.Contains(t, errOut, "needs an ordered index")
		require.NotContains(t, errOut, "operations failed", "no operation was attempted")
		require.Contains(t, out, "unsupported")
	}
}

// --index names the store's index kind: an unknown one is a usage error listing the known
// ones; keyformat takes string or binary64, and binary64 refuses hashed inserts.
func TestBenchIndexAndKeyFormatErrors(t *testing.T) {
	_, errOut, code := cli(t, "bench", "--index", "btree")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `--index "btree": no such index kind (known: race, hybrid, blink, flexkv, aceso, swarm)`)
	_, errOut, code = cli(t, "bench", "--set", "keyformat=int64")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `"int64" is not one of string, binary64`)
	_, errOut, code = cli(t, "bench", "--set", "keyformat=binary64", "--set", "insertorder=hashed")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "binary64 keys are the key numbers themselves")
}
