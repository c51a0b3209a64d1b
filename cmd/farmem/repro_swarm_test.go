package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// farmem repro swarm rejects bad seeds and worker counts as usage errors, before it runs.
func TestReproSwarmUsage(t *testing.T) {
	_, errOut, code := cli(t, "repro", "swarm", "--quick", "--seeds", "one")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "--seeds")
	_, errOut, code = cli(t, "repro", "swarm", "--quick", "--workers", "0")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "--workers")
}
