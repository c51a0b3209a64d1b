package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// farmem repro selcc rejects bad seeds, worker counts and figures as usage errors, and an
// unknown paper names both papers.
func TestReproSelccUsage(t *testing.T) {
	_, errOut, code := cli(t, "repro", "selcc", "--quick", "--seeds", "one")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "--seeds")
	_, errOut, code = cli(t, "repro", "selcc", "--quick", "--workers", "0")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "--workers")
	_, errOut, code = cli(t, "repro", "selcc", "--quick", "--sherman-cache", "--figures", "17,12")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, `figure "12"`)
	_, errOut, code = cli(t, "repro", "nosuch")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "cider, dolphin, flexkv, selcc or swarm")
}
