package local_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

// PartitionNodes cuts a memory node off from every client of one compute node, those open
// before and those opened during the partition, while the other compute node is served; after
// HealNodes the first reaches it again, and nothing posted during the partition applied.
func TestPartitionNodes(t *testing.T) {
	f, err := local.New(local.Options{Shape: local.Shape{MemoryNodes: 2, ComputeNodes: 2}, DownTimeout: 50 * time.Millisecond})
	require.NoError(t, err)
	defer f.Close()
	ctx := context.Background()
	cs := f.Hosted()
	cut, err := f.Open(ctx, cs[0])
	require.NoError(t, err)
	other, err := f.Open(ctx, cs[1])
	require.NoError(t, err)
	a := farmem.MakeAddr(2, 4096)

	require.ErrorIs(t, f.PartitionNodes(2, 1), farmem.ErrInvalid, "a memory node is not a compute node")
	require.NoError(t, f.PartitionNodes(2, cs[0]))
	_, err = cut.FAA(ctx, a, 100)
	require.ErrorIs(t, err, farmem.ErrNodeDown)
	later, err := f.Open(ctx, cs[0])
	require.NoError(t, err)
	_, err = later.FAA(ctx, a, 100)
	require.ErrorIs(t, err, farmem.ErrNodeDown, "a client opened during the partition is cut off too")
	prev, err := other.FAA(ctx, a, 1)
	require.NoError(t, err)
	require.Zero(t, prev, "nothing of the cut-off node's applied")
	_, err = cut.FAA(ctx, farmem.MakeAddr(1, 4096), 1)
	require.NoError(t, err, "the other memory node is reachable")

	require.NoError(t, f.HealNodes(2, cs[0]))
	prev, err = later.FAA(ctx, a, 1)
	require.NoError(t, err)
	require.Equal(t, uint64(1), prev)
}
