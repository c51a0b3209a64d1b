package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func cli(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), code
}

func TestBenchLocalWithPeer(t *testing.T) {
	t.Parallel() // its runs last set times, which overlap with other tests' instead of adding to them
	out, errOut, code := cli(t, "bench", "--transport", "local", "--mem-size", "64MiB", "--records", "500",
		"--clients", "2", "--duration", "200ms", "--warmup", "0s", "--peers", "gomap")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "kvstore/local")
	require.Contains(t, out, "gomap")
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "kvstore/local") && strings.Contains(l, " run ") {
			f := strings.Fields(l)
			require.NotEqual(t, "-", f[len(f)-4], "the store counts round trips per op: %s", l)
			require.Equal(t, "0", f[5], "no failed ops: %s", l)
		}
	}
}

// TestBenchTCPSharedConns: --shared-conns runs the store's clients over one connection per
// memory node, and the run does what it does on connections of their own.
func TestBenchTCPSharedConns(t *testing.T) {
	t.Parallel()
	out, errOut, code := cli(t, "bench", "--transport", "tcp", "--shared-conns", "--mem-size", "64MiB", "--records", "300",
		"--clients", "4", "--duration", "200ms", "--warmup", "0s", "--peers", "none")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "memory nodes of 64MiB, shared connections")
	runs := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "kvstore/tcp") && strings.Contains(l, " run ") {
			f := strings.Fields(l)
			require.Equal(t, "0", f[5], "no failed ops: %s", l)
			runs++
		}
	}
	require.Equal(t, 1, runs, "one run row:\n%s", out)
}

func TestBenchSimJSONAndSweep(t *testing.T) {
	svg := filepath.Join(t.TempDir(), "sweep.svg")
	out, errOut, code := cli(t, "bench", "--transport", "sim", "--mem-size", "32MiB", "--records", "500",
		"--sweep", "clients=2,16", "--duration", "200us", "--warmup", "50us", "--json", "--svg", svg)
	require.Equal(t, 0, code, errOut)
	var rep struct {
		Fabrics []string `json:"fabrics"`
		Reports []struct {
			Sweep string `json:"sweep"`
			Rows  []struct {
				Store   string  `json:"store"`
				Clients int     `json:"clients"`
				Point   string  `json:"point"`
				Ops     uint64  `json:"ops"`
				Tput    float64 `json:"ops_per_sec"`
			} `json:"rows"`
		} `json:"reports"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.Len(t, rep.Reports, 1)
	rows := rep.Reports[0].Rows
	require.Len(t, rows, 2)
	require.Equal(t, 2, rows[0].Clients)
	require.Equal(t, 16, rows[1].Clients)
	require.Positive(t, rows[0].Ops)
	require.Greater(t, rows[1].Tput, rows[0].Tput, "16 clients outrun 2 in the simulator")
	b, err := os.ReadFile(svg)
	require.NoError(t, err)
	require.Contains(t, string(b), "<svg")

	// The simulator is deterministic: the same command gives the same numbers.
	again, _, code := cli(t, "bench", "--transport", "sim", "--mem-size", "32MiB", "--records", "500",
		"--sweep", "clients=2,16", "--duration", "200us", "--warmup", "50us", "--json")
	require.Equal(t, 0, code)
	require.Equal(t, out, again)
}

func TestKVAndInspect(t *testing.T) {
	region := filepath.Join(t.TempDir(), "kv.region")
	common := []string{"--region", region, "--mem-size", "8MiB"}
	kv := func(args ...string) (string, string, int) {
		return cli(t, append(append([]string{"kv"}, common...), args...)...)
	}
	_, errOut, code := kv("get", "k")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "no such file", "get on a missing region creates nothing")
	_, errOut, code = kv("put", "k", "v1")
	require.Equal(t, 0, code, errOut)
	out, _, code := kv("get", "k")
	require.Equal(t, 0, code)
	require.Equal(t, "v1\n", out)
	_, _, code = kv("insert", "k", "v2")
	require.Equal(t, 1, code, "insert of an existing key fails")
	_, _, code = kv("update", "k", "v3")
	require.Equal(t, 0, code)
	out, _, _ = kv("get", "k")
	require.Equal(t, "v3\n", out)
	_, _, code = kv("delete", "k")
	require.Equal(t, 0, code)
	_, errOut, code = kv("get", "k")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "not found")

	out, errOut, code = cli(t, "inspect", "--region", region)
	require.Equal(t, 0, code, errOut)
	for _, want := range []string{"memory nodes  2 of 8388608 bytes", "alloc headers", "index race", "released"} {
		require.Contains(t, out, want)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"bench", "--transport", "carrier-pigeon"},
		{"bench", "--clients", "0"},
		{"bench", "--region", "/x", "--transport", "sim"},
		{"bench", "--workload", "z"},
		{"bench", "--transport", "sim", "--peers", "gomap"},
		{"bench", "--transport", "cxl", "--shared-conns"},
		{"kv", "get", "k"},
		{"kv", "--transport", "local", "get", "k"},
		{"kv", "--region", "/nonexistent/r", "frob", "k"},
		{"kv", "--region", "/nonexistent/r", "put", "k"},
		{"inspect"},
	} {
		_, errOut, code := cli(t, args...)
		require.Equal(t, 2, code, "%v: %s", args, errOut)
		require.NotEmpty(t, errOut, "%v", args)
	}
	out, _, code := cli(t, "help")
	require.Equal(t, 0, code)
	require.Contains(t, out, "bench")
}
