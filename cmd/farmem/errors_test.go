package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
)

func TestErrorsForPeople(t *testing.T) {
	down := fmt.Errorf("rdma: batch to n2: rdma: n2: %w", farmem.ErrNodeDown)
	require.Equal(t, "batch to n2: n2: node down", tidy(down))
	msg := explain(fmt.Errorf("kvstore: get: %w", down), "c.txt")
	require.Contains(t, msg, "does not answer")
	require.Contains(t, msg, "farmem status --cluster c.txt")

	lost := fmt.Errorf("race: read bucket: rdma: n3 restarted since this fabric learned its region (its memory is new): %w", farmem.ErrNodeLost)
	msg = explain(lost, "")
	require.Contains(t, msg, "memory node 3 restarted and lost its memory")
	require.Contains(t, msg, "farmem adopt --cluster FILE 3")
	require.NotContains(t, msg, "rdma:")
	require.NotContains(t, msg, "farmem: node")

	require.Equal(t, "plain", explain(errors.New("plain"), ""))
}
