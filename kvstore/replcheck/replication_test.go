package replcheck_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/kvstore"
	"github.com/farmem/farmem/kvstore/kvstoretest"
)

// TestReplicatorPlugsIn: a store created with a two-instance replicator records two roots, its
// writes reach both instances, and it reopens only with that replicator.
func TestReplicatorPlugsIn(t *testing.T) {
	t.Parallel()
	f := newLocal(t, local.Options{Shape: local.Shape{MemoryNodes: 2}})
	ctx := context.Background()
	s := openStore(t, f, kvstore.Options{Alloc: quietAlloc, Replication: kvstoretest.Mirror{N: 2}})
	d := s.Descriptor()
	require.Equal(t, "mirror", d.Replication)
	require.Len(t, d.Roots, 2)
	require.NotEqual(t, d.Roots[0], d.Roots[1])
	semantics(t, s, "mirror")
	require.NoError(t, s.Put(ctx, []byte("k"), []byte("v")))

	m, err := f.Open(ctx, f.Topology().ComputeNodes()[0])
	require.NoError(t, err)
	defer m.Close()
	a, err := alloc.New(ctx, m, quietAlloc)
	require.NoError(t, err)
	defer a.Close()
	for i, root := range d.Roots {
		tab, err := race.Open(ctx, m, a, root, race.Options{})
		require.NoError(t, err)
		v, err := tab.Search(ctx, []byte("k"))
		require.NoError(t, err, "instance %d", i)
		require.Equal(t, "v", string(v))
		require.Equal(t, kvstore.DefaultMetaSize, tab.Params().MetaSize)
		require.NoError(t, tab.Close())
	}
	_, err = kvstore.Open(ctx, f, kvstore.Options{})
	require.ErrorIs(t, err, kvstore.ErrMismatch, "opened without its replicator")
	again := openStore(t, f, kvstore.Options{Alloc: quietAlloc, Replication: kvstoretest.Mirror{N: 2}})
	v, err := again.Get(ctx, []byte("k"))
	require.NoError(t, err)
	require.Equal(t, "v", string(v))
}
