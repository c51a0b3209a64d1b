package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/kvstore"
)

// TestIndexReplicasOption: --set replicas=3 sets the store's replication factor (its metadata
// and, through Race.Replicas left 0, its RACE index) and is not passed on to the workload; bad
// counts are refused, and other kinds by the options matrix.
func TestIndexReplicasOption(t *testing.T) {
	k, err := indexByName("race")
	require.NoError(t, err)
	k3, rest, err := k.withOptions([]string{"recordcount=10", "replicas=3"})
	require.NoError(t, err)
	require.Equal(t, multiFlag{"recordcount=10"}, rest)
	require.Equal(t, 3, k3.replicas)
	require.True(t, k3.replicated)
	require.Zero(t, k3.kind().(kvstore.Race).Replicas, "the index takes the store's factor")
	require.Zero(t, k.replicas)
	for _, bad := range []string{"replicas=2", "replicas=x", "replicas=9"} {
		_, _, err := k.withOptions([]string{bad})
		require.Error(t, err, bad)
	}
	h, err := indexByName("hybrid")
	require.NoError(t, err)
	h3, _, err := h.withOptions([]string{"replicas=3"})
	require.NoError(t, err, "kvstore's options matrix refuses it, at Open")
	require.ErrorIs(t, kvstore.Check(kvstore.Options{Index: h3.kind(), Replicas: h3.replicas}), farmem.ErrInvalid)
}
