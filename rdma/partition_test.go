package rdma

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
)

// PartitionNodes cuts a memory node off from every client of one compute process, those
// open before and those opened during the partition, while another process is served as
// before; a write posted during the partition never applies, and after HealNodes the cut-off
// process reaches the node again.
func TestPartitionNodes(t *testing.T) {
	t.Parallel() // waits out down timeouts
	servers, cl := startServers(t, 2, 1<<20)
	cl.DownTimeout = 300 * time.Millisecond
	fs := dialN(t, cl, 2, Options{})
	in := NewInjector(servers, fs)
	ctx := context.Background()
	cut, other := openOne(t, fs[0]), openOne(t, fs[1])
	a := farmem.MakeAddr(2, 64<<10)
	_, err := cut.FAA(ctx, a, 1)
	require.NoError(t, err)

	require.ErrorIs(t, in.PartitionNodes(2, 2), farmem.ErrInvalid, "a memory node is not a compute process")
	require.ErrorIs(t, in.PartitionNodes(9, fs[0].Hosted()...), farmem.ErrInvalid, "no such node")
	require.NoError(t, in.PartitionNodes(2, fs[0].Hosted()...))
	_, err = cut.FAA(ctx, a, 100)
	require.ErrorIs(t, err, farmem.ErrNodeDown, "the cut-off process's verb times out")
	later, err := fs[0].Open(ctx, fs[0].Hosted()[0])
	require.NoError(t, err)
	defer later.Close()
	_, err = later.FAA(ctx, a, 100)
	require.ErrorIs(t, err, farmem.ErrNodeDown, "a client opened during the partition is cut off too")
	prev, err := other.FAA(ctx, a, 1)
	require.NoError(t, err, "the other process is served")
	require.Equal(t, uint64(1), prev, "nothing of the cut-off process's applied")
	_, err = cut.FAA(ctx, farmem.MakeAddr(1, 64<<10), 1)
	require.NoError(t, err, "the cut-off process still reaches the other node")

	require.NoError(t, in.HealNodes(2, fs[0].Hosted()...))
	require.Eventually(t, func() bool {
		prev, err = cut.FAA(ctx, a, 1)
		return err == nil
	}, 30*time.Second, 10*time.Millisecond, "healed")
	require.Equal(t, uint64(2), prev, "no verb posted during the partition applied after it healed")
}
