package alloc

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

// With a memory node down, New opens from the others and Alloc places blocks on the nodes that
// answer; a down home node still fails New.
func TestNewWithANodeDown(t *testing.T) {
	ctx := context.Background()
	f := rawFabric(t, local.Options{Shape: local.Shape{MemoryNodes: 3, MemorySize: 8 << 20}})
	m := openClient(t, f, 0)
	for _, n := range m.Topology().MemoryNodes() {
		require.NoError(t, Format(ctx, m, n, FormatOptions{}))
	}
	nodes := m.Topology().MemoryNodes()
	require.NoError(t, f.Crash(nodes[2]))

	for i := range 3 {
		a, err := New(ctx, openClient(t, f, i), Options{})
		require.NoError(t, err, "client %d", i)
		for range 8 {
			addr, err := a.Alloc(ctx, 64<<10, 64)
			require.NoError(t, err)
			require.NotEqual(t, nodes[2], addr.Node(), "no block on the down node")
		}
		require.NoError(t, a.Close())
	}

	require.NoError(t, f.Crash(nodes[0]))
	_, err := New(ctx, openClient(t, f, 0), Options{})
	require.ErrorIs(t, err, farmem.ErrNodeDown, "the home node is needed")
}
