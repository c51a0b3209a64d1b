package alloc

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

// testCluster is a local fabric whose memory nodes are formatted.
type testCluster struct {
	f    *local.Fabric
	fo   FormatOptions
	mem  []farmem.NodeID
	comp []farmem.NodeID
}

// newCluster starts a local fabric (strict mode unless opts says otherwise is not possible:
// strict is always on) and formats every memory node with fo.
func newCluster(t testing.TB, opts local.Options, fo FormatOptions) *testCluster {
	t.Helper()
	opts.Strict = true
	f, err := local.New(opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.Zero(t, f.Violations(), "strict-mode violations")
		_ = f.Close()
	})
	c := &testCluster{f: f, fo: fo, mem: f.Topology().MemoryNodes(), comp: f.Topology().ComputeNodes()}
	m := c.client(t, 0)
	require.NoError(t, FormatAll(context.Background(), m, fo))
	return c
}

// client opens a client on compute node i (modulo their number).
func (c *testCluster) client(t testing.TB, i int) farmem.Memory {
	t.Helper()
	m, err := c.f.Open(context.Background(), c.comp[i%len(c.comp)])
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// allocator opens a client on compute node i and its allocator.
func (c *testCluster) allocator(t testing.TB, i int, opts Options) (*Allocator, farmem.Memory) {
	t.Helper()
	m := c.client(t, i)
	a, err := New(context.Background(), m, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	return a, m
}

// header reads node's header.
func (c *testCluster) header(t testing.TB, m farmem.Memory, n farmem.NodeID) Header {
	t.Helper()
	h, err := Open(context.Background(), m, n)
	require.NoError(t, err)
	return h
}
