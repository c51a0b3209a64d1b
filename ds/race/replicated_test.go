package race_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/farmem/transport"
	"github.com/farmem/farmem/internal/dstest"
)

// replEnv is a local fabric (strict mode off: the replication protocol writes its control
// words plainly when it lays out fresh memory) with nodes memory nodes and a table
// replicated on r of them.
func replEnv(t testing.TB, nodes, r int, p race.Params) *env {
	t.Helper()
	f, err := local.New(local.Options{Shape: transport.Shape{MemoryNodes: nodes, ComputeNodes: 2, MemorySize: 64 << 20}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	ctx := context.Background()
	m, err := f.Open(ctx, f.Topology().ComputeNodes()[0])
	require.NoError(t, err)
	defer m.Close()
	require.NoError(t, alloc.FormatAll(ctx, m, alloc.FormatOptions{SymmetricSize: 32 << 20}))
	a, err := alloc.New(ctx, m, replAlloc)
	require.NoError(t, err)
	defer a.Close()
	p.IndexReplicas = r
	root, err := race.Create(ctx, m, a, p)
	require.NoError(t, err)
	return &env{f: f, root: root, comp: f.Topology().ComputeNodes(), ao: replAlloc}
}

// TestReplicatedBasic: a table replicated on three of four nodes holds its keys through splits
// and doublings, and keeps serving every operation with its lowest node crashed.
func TestReplicatedBasic(t *testing.T) {
	e := replEnv(t, 4, 3, race.Params{Groups: 2})
	c := e.open(t, 0, race.Options{})
	ctx := context.Background()
	require.Equal(t, race.VirtualNodeBase+3, e.root.Node())
	const n = 300
	for i := range uint64(n) {
		require.NoError(t, c.tab.Insert(ctx, key(i), val(i, 24)), "insert %d", i)
	}
	info, err := c.tab.Info(ctx)
	require.NoError(t, err)
	require.NotZero(t, info.Splits)
	require.Equal(t, 3, info.Params.IndexReplicas)
	check := func(from uint64) {
		for i := range uint64(n) {
			v, err := c.tab.Search(ctx, key(i))
			if i < from {
				require.ErrorIs(t, err, race.ErrNotFound, "key %d", i)
				continue
			}
			require.NoError(t, err, "key %d", i)
			require.Equal(t, i, unval(v))
		}
	}
	check(0)
	require.NoError(t, e.f.Crash(e.f.Topology().MemoryNodes()[1])) // the first replica
	check(0)
	for i := range uint64(n) {
		require.NoError(t, c.tab.Update(ctx, key(i), val(i, 40)), "update %d", i)
	}
	for i := range uint64(50) {
		require.NoError(t, c.tab.Delete(ctx, key(i)), "delete %d", i)
	}
	for i := uint64(n); i < n+200; i++ {
		require.NoError(t, c.tab.Insert(ctx, key(i), val(i, 24)), "insert %d", i)
	}
	check(50)
	c2 := e.open(t, 1, race.Options{})
	v, err := c2.tab.Search(ctx, key(n+10))
	require.NoError(t, err)
	require.Equal(t, uint64(n+10), unval(v))
	t.Logf("%+v %+v", c.tab.Stats(), c.tab.Replicated().ProtocolStats())
}

// replAlloc are the allocator options of the replicated tables' tests.
var replAlloc = dstest.AllocOptions
