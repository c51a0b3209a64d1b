package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// status on a region: its memory nodes up, with memory used, and the store's configuration.
func TestStatusRegion(t *testing.T) {
	region := filepath.Join(t.TempDir(), "s.region")
	_, errOut, code := cli(t, "status", "--region", region)
	require.Equal(t, 1, code, "no region yet: %s", errOut)
	_, errOut, code = cli(t, "kv", "--region", region, "--mem-size", "8MiB", "put", "k", "v")
	require.Equal(t, 0, code, errOut)
	out, errOut, code := cli(t, "status", "--region", region)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `(?m)^  n1\s+-\s+up\s`, out)
	require.Regexp(t, `(?m)^  n2\s+-\s+up\s`, out)
	require.Contains(t, out, "key-value store: index race")

	for _, args := range [][]string{
		{"status"},
		{"status", "--region", region, "extra"},
		{"adopt", "3"},
		{"adopt", "--cluster", "c.txt"},
		{"adopt", "--cluster", "c.txt", "zero"},
	} {
		_, errOut, code := cli(t, args...)
		require.Equal(t, 2, code, "%v: %s", args, errOut)
	}
}
