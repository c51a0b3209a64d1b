package main

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// workloadRow returns the fields of the table row of store's phase of workload wl, or nil.
func workloadRow(out, store, wl, phase string) []string {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) > 5 && f[0] == store && f[1] == wl && f[2] == phase {
			return f
		}
	}
	return nil
}

// Workloads A, C and E on the cxl transport over --index hybrid with binary64 keys: the store
// loads every record and runs each workload with no errors, beside the ordered Go map and
// (when installed) redis, their ordered twins for E.
func TestBenchHybridOnCXL(t *testing.T) {
	t.Parallel() // its runs last set times, which overlap with other tests' instead of adding to them
	_, redisErr := exec.LookPath("redis-server")
	out, errOut, code := cli(t, "bench", "--transport", "cxl", "--mem-size", "16MiB", "--records", "600",
		"--workload", "a,c,e", "--index", "hybrid", "--set", "keyformat=binary64",
		"--clients", "2", "--duration", "150ms", "--warmup", "0s")
	require.Equal(t, 0, code, "%s\n%s", out, errOut)
	require.Contains(t, out, "index hybrid")
	for _, wl := range []string{"a", "c", "e"} {
		stores := []string{"kvstore/cxl", "gomap"}
		if redisErr == nil {
			stores = append(stores, "redis")
		}
		if wl == "e" {
			stores = []string{"kvstore/cxl", "gomap/btree"}
			if redisErr == nil {
				stores = append(stores, "redis/zset")
			}
		}
		for _, s := range stores {
			load := workloadRow(out, s, wl, "load")
			require.NotNil(t, load, "a load row for %s %s:\n%s", s, wl, out)
			require.Equal(t, []string{"600", "0"}, load[4:6], "%s %s loaded every record", s, wl)
			run := workloadRow(out, s, wl, "run")
			require.NotNil(t, run, "a run row for %s %s:\n%s", s, wl, out)
			ops, err := strconv.Atoi(run[4])
			require.NoError(t, err, "%s %s ran: %v", s, wl, run)
			require.Positive(t, ops, "%s %s", s, wl)
			require.Equal(t, "0", run[5], "%s %s: no failed ops", s, wl)
		}
	}
}
