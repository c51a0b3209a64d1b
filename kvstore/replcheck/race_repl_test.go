package replcheck_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/kvstore"
)

// TestRaceReplicas: a store whose RACE index has three replicas records the count in the
// table's root, keeps the store's semantics, and keeps serving every operation, with no
// failure, after the index's first replica crashed. (The store's own root and the allocator's
// shared words stay on the lowest memory node, outside the index's replicas.)
func TestRaceReplicas(t *testing.T) {
	t.Parallel()
	f := replicaFabric(t)
	ctx := context.Background()
	s := openStore(t, f, kvstore.Options{Alloc: quietAlloc, Sync: kvstore.Optimistic, Index: kvstore.Race{Replicas: 3, Params: race.Params{Groups: 2}}})
	semantics(t, s, "replicated")
	const n = 120
	for i := range uint64(n) {
		require.NoError(t, s.Insert(ctx, key(i), key(i+1000)))
	}
	require.NoError(t, f.Crash(f.Topology().MemoryNodes()[1]))
	for i := range uint64(n) {
		v, err := s.Get(ctx, key(i))
		require.NoError(t, err)
		require.Equal(t, key(i+1000), v)
		require.NoError(t, s.Put(ctx, key(i), key(i+2000)))
	}
	for i := range uint64(n) {
		v, err := s.Get(ctx, key(i))
		require.NoError(t, err)
		require.Equal(t, key(i+2000), v)
	}
	d := s.Descriptor()
	require.Equal(t, race.VirtualNodeBase+3, d.Roots[0].Node())
}

// TestRaceReplicasRefuseLocks: a replicated RACE index refuses a synchronizer that keeps lock
// state outside the table's replicated memory.
func TestRaceReplicasRefuseLocks(t *testing.T) {
	t.Parallel()
	f := replicaFabric(t)
	ctx := context.Background()
	_, err := kvstore.Open(ctx, f, kvstore.Options{Alloc: quietAlloc, Sync: kvstore.DefaultSync(), Index: kvstore.Race{Replicas: 3}})
	require.ErrorIs(t, err, farmem.ErrInvalid)
}

// replicaFabric is a local fabric of four 32 MiB memory nodes and one compute node, formatted
// with 16 MiB of each node symmetric (where a replicated index lays out its replicas). Strict
// mode is off: the replicated index stores its control words with plain writes when it lays
// out fresh memory.
func replicaFabric(t *testing.T) *local.Fabric {
	t.Helper()
	f, err := local.New(local.Options{Shape: local.Shape{MemoryNodes: 4, ComputeNodes: 1, MemorySize: 32 << 20}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	ctx := context.Background()
	m, err := f.Open(ctx, f.Topology().ComputeNodes()[0])
	require.NoError(t, err)
	require.NoError(t, alloc.FormatAll(ctx, m, alloc.FormatOptions{SymmetricSize: 16 << 20}))
	require.NoError(t, m.Close())
	return f
}
