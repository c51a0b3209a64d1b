package alloc

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

// A memory node restarts under an allocator that holds blocks, free blocks and retired blocks
// there: placement skips it while it is lost (AllocOn fails with ErrNodeLost, Alloc goes
// elsewhere), a new allocator opens over it and Close hands over without touching it; once it
// is adopted the allocator waits for Reformat, then claims fresh chunks there from the start of
// its heap, having forgotten every offset of the old incarnation.
func TestRestartedNode(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, local.Options{Shape: local.Shape{MemoryNodes: 3, MemorySize: 1 << 20, ComputeNodes: 1, ClientsPerNode: 16}},
		FormatOptions{ChunkSize: 4 << 10, SymmetricSize: 64 << 10})
	m := c.client(t, 0)
	// Placement prefers node 2: Nodes[(id-1) % 3].
	nodes := make([]farmem.NodeID, 3)
	pref := (int(m.Info().ID) - 1) % 3
	nodes[pref], nodes[(pref+1)%3], nodes[(pref+2)%3] = 2, 1, 3
	a, err := New(ctx, m, Options{Nodes: nodes, Lease: 1 << 40, Refresh: 1 << 39})
	require.NoError(t, err)
	require.Equal(t, farmem.NodeID(2), a.nodes[a.pref])
	var on2 []farmem.Addr
	for range 40 {
		p, err := a.AllocOn(ctx, 2, 256, 0)
		require.NoError(t, err)
		on2 = append(on2, p)
	}
	require.NoError(t, a.Free(on2[0], 256))
	require.NoError(t, a.Pin(ctx))
	require.NoError(t, a.Retire(ctx, on2[1], 256))
	require.NoError(t, a.Unpin())
	bumpBefore := c.header(t, m, 2).Bump
	require.Greater(t, bumpBefore, c.header(t, m, 2).HeapBase)

	require.NoError(t, c.f.Restart(2))
	_, err = a.AllocOn(ctx, 2, 256, 0)
	require.ErrorIs(t, err, farmem.ErrNodeLost)
	for range 50 {
		p, err := a.Alloc(ctx, 256, 0)
		require.NoError(t, err)
		require.NotEqual(t, farmem.NodeID(2), p.Node(), "a block on the lost node")
	}
	require.Equal(t, uint64(1), a.Stats().Forgotten, "what it held on the lost node is dropped")
	// A new allocator opens over the lost node, and closes without writing there.
	b, _ := c.allocator(t, 1, Options{})
	p, err := b.Alloc(ctx, 64, 0)
	require.NoError(t, err)
	require.NotEqual(t, farmem.NodeID(2), p.Node())
	require.NoError(t, b.Close())

	// Adopted but not formatted yet: still skipped.
	require.NoError(t, c.f.Adopt(ctx, 2))
	_, err = a.AllocOn(ctx, 2, 256, 0)
	require.ErrorIs(t, err, farmem.ErrNodeLost, "not formatted again yet")
	require.ErrorIs(t, Reformat(ctx, m, 2, 2), farmem.ErrInvalid, "the home node (here: as named) cannot be reformatted")
	require.NoError(t, Reformat(ctx, m, a.Home(), 2))
	require.NoError(t, Reformat(ctx, m, a.Home(), 2), "idempotent")
	h := c.header(t, m, 2)
	require.Equal(t, h.HeapBase, h.Bump, "a fresh heap")
	seen := map[farmem.Addr]bool{}
	for range 40 {
		p, err := a.AllocOn(ctx, 2, 256, 0)
		require.NoError(t, err)
		require.False(t, seen[p], "handed out twice")
		seen[p] = true
	}
	require.Equal(t, uint64(2), a.Stats().Forgotten)
	require.Equal(t, 0, a.Stats().Pending, "the retired block of the old incarnation is gone")
	// Its heap restarted from the base: the first chunk is the old incarnation's first one
	// again, which the allocator had forgotten rather than handing out twice.
	require.LessOrEqual(t, c.header(t, m, 2).Bump, bumpBefore)
	require.NoError(t, a.Close())
}
