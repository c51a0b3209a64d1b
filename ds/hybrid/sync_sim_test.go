package hybrid_test

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/cider"
	"github.com/farmem/farmem/ds/hybrid"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/internal/dstest"
	"github.com/farmem/farmem/sim"
)

// hotUpdates runs n clients (over 4 compute nodes of the simulator) updating one key ops
// times each through synchronizer name ("tree" for the tree's own loop, else one of syncs), and
// returns the memory-node writes and failed CASes of all clients, the synchronizers' summed
// counters, the virtual time taken, and the value left.
func hotUpdates(t *testing.T, name string, n, ops int) (writes, failedCAS uint64, st cider.Stats, took time.Duration, last uint64) {
	t.Helper()
	model := sim.ConnectX6()
	model.MemoryNodes, model.ComputeNodes, model.MemorySize = 2, 4, 32<<20
	s, err := sim.New(model, 7)
	require.NoError(t, err)
	defer s.Close()
	const k = 0x0102030405060701
	s.Run(func() {
		ctx := context.Background()
		comp := s.Topology().ComputeNodes()
		m0, err := s.Open(ctx, comp[0])
		require.NoError(t, err)
		require.NoError(t, alloc.FormatAll(ctx, m0, alloc.FormatOptions{}))
		a0, err := alloc.New(ctx, m0, dstest.AllocOptions)
		require.NoError(t, err)
		root, err := hybrid.Create(ctx, m0, a0, hybrid.Params{BlockValues: true, LockEntries: 64})
		require.NoError(t, err)
		t0, err := hybrid.Open(ctx, m0, a0, root, hybrid.Options{})
		require.NoError(t, err)
		require.NoError(t, t0.InsertBytes(ctx, key(k), make([]byte, 64)))
		credits := map[farmem.NodeID]*cider.Credits{}
		cs := make([]*client, n)
		for i := range cs {
			m, err := s.Open(ctx, comp[i%len(comp)])
			require.NoError(t, err)
			a, err := alloc.New(ctx, m, dstest.AllocOptions)
			require.NoError(t, err)
			o := hybrid.Options{}
			if name != "tree" {
				cr := credits[m.Info().Node]
				if cr == nil {
					cr = cider.NewCredits(0)
					credits[m.Info().Node] = cr
				}
				for _, sy := range syncs {
					if sy.name == name {
						o.Sync = sy.make(t, m, cr)
					}
				}
				require.NotNil(t, o.Sync, name)
			}
			tr, err := hybrid.Open(ctx, m, a, root, o)
			require.NoError(t, err)
			cs[i] = &client{m: m, a: a, tree: tr, sync: o.Sync}
		}
		before := make([]farmem.Stats, n)
		for i, c := range cs {
			before[i] = c.m.Stats()
		}
		start := s.Now()
		require.NoError(t, s.Parallel(n, func(i int) {
			for j := range ops {
				v := binary.LittleEndian.AppendUint64(nil, uint64(i)<<32|uint64(j+1))
				require.NoError(t, cs[i].tree.UpdateBytes(ctx, key(k), append(v, make([]byte, 56)...)))
			}
		}))
		took = s.Now().Sub(start)
		for i, c := range cs {
			d := c.m.Stats().Sub(before[i])
			writes += d.Verbs[farmem.TargetMemory][farmem.OpWrite]
			failedCAS += d.FailedCAS
			if x, ok := c.syncStats(); ok {
				st = st.Add(x)
			}
		}
		v, err := t0.GetBytes(ctx, key(k))
		require.NoError(t, err)
		last = binary.LittleEndian.Uint64(v)
	})
	return writes, failedCAS, st, took, last
}

// TestSyncCombinesHotKey: 32 clients on 4 compute nodes update one key of the simulator 20
// times each. The tree's own loop writes one block per update; CIDER forced pessimistic
// writes one block per batch, so fewer than the updates, and its members never write
// (Batched counts them), with fewer failed CASes, sooner in virtual time; the value left is a
// client's last.
func TestSyncCombinesHotKey(t *testing.T) {
	t.Parallel()
	const n, ops = 32, 20
	tw, tfail, _, ttook, tlast := hotUpdates(t, "tree", n, ops)
	require.Equal(t, uint64(n*ops), tw, "the tree's loop writes a block per update")
	cw, cfail, st, ctook, clast := hotUpdates(t, "cider-pessimistic", n, ops)
	t.Logf("tree: %d block writes, %d failed CASes, %v; cider: %d writes, %d failed CASes, %v, %d batches of %d updates, %d unconfirmed",
		tw, tfail, ttook, cw, cfail, ctook, st.Batches, st.Batched, st.Unconfirmed)
	require.NotZero(t, st.Batches)
	require.Equal(t, uint64(n*ops)-(st.Batched-st.Batches), cw,
		"every update but a combined member (a batch's members less its executor) writes its block once")
	require.Less(t, cw, tw, "combining saves block writes")
	require.Less(t, cfail, tfail, "the lock's queue saves failed CASes")
	require.Less(t, ctook, ttook, "in virtual time, the contended updates finish sooner under CIDER")
	for _, last := range []uint64{tlast, clast} {
		require.Equal(t, uint64(ops), last&(1<<32-1), "the value left is a client's last update")
	}
}
