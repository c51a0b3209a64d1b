package kvstore

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/ds/swarm"
	"github.com/farmem/farmem/farmem/local"
)

// TestSwarmDeleterDies: a Delete that won an object and wrote its tombstone, and whose
// client then died before unlinking it, leaves the key deleted for everyone, and the next
// Insert of the key unlinks the entry for it and succeeds.
func TestSwarmDeleterDies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, err := local.New(local.Options{Shape: local.Shape{MemoryNodes: 3, ComputeNodes: 1, MemorySize: 32 << 20, ClientsPerNode: 16}})
	require.NoError(t, err)
	defer f.Close()
	s, err := Open(ctx, f, Options{Index: Swarm{Params: maxreg.Params{ValueSize: 64, Slots: 2}}})
	require.NoError(t, err)
	defer s.Close()
	k := []byte("orphan")
	require.NoError(t, s.Insert(ctx, k, []byte("v")))
	// The dying deleter: its life-word CAS and its tombstone, not its unlink.
	c, err := s.acquire(ctx)
	require.NoError(t, err)
	x := c.idx.(*swarmIndex)
	o, _, err := x.locate(ctx, k)
	require.NoError(t, err)
	prev, err := x.rm.CAS(ctx, x.lifeAddr(o), swarmAlive, swarmDead)
	require.NoError(t, err)
	require.Equal(t, swarmAlive, prev)
	require.NoError(t, o.reg.WriteFinal(ctx, []byte{swarmTomb}, swarm.FinalTS))
	s.release(c, nil)

	ss, err := s.Session(ctx)
	require.NoError(t, err)
	defer ss.Close()
	_, err = ss.Get(ctx, k)
	require.ErrorIs(t, err, ErrNotFound)
	require.ErrorIs(t, ss.Delete(ctx, k), ErrNotFound, "a loser of the life word answers absent")
	require.ErrorIs(t, ss.Update(ctx, k, []byte("w")), ErrNotFound)
	require.NoError(t, ss.Insert(ctx, k, []byte("again")), "the insert unlinks the orphaned entry")
	got, err := s.Get(ctx, k) // the dead deleter's client, through its stale cache
	require.NoError(t, err)
	require.Equal(t, "again", string(got))
}
