package flexcheck_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/kvstore"
	"github.com/farmem/farmem/sim"
)

// TestFlexKVLeaveSim: Store.Leave on a store whose process hosts the coordinator hands every
// partition back to the memory nodes, whoever proxied it, while its data stays readable and
// writable; afterwards hand-overs to a proxy roll back (the leaving coordinator refuses them)
// and the manager's counters see the nodes gone, and the index RPCs sent to another node's
// proxy were counted.
func TestFlexKVLeaveSim(t *testing.T) {
	t.Parallel()
	model := sim.ConnectX6()
	model.MemoryNodes, model.ComputeNodes, model.MemorySize = 2, 2, 32<<20
	sm := startSim(t, model, 1)
	sm.Run(func() {
		ctx := context.Background()
		nodes := sm.Topology().ComputeNodes()
		k := managerKind()
		s, err := kvstore.Open(ctx, sm, kvstore.Options{Index: k, Alloc: shortLeases, Nodes: nodes})
		require.NoError(t, err)
		defer s.Close()
		for i := range 64 {
			require.NoError(t, s.Put(ctx, []byte(fmt.Sprint("k", i)), []byte(fmt.Sprint("v", i))))
		}
		for p := range k.Partitions() {
			require.NoError(t, s.HandOver(ctx, p, nodes[p%2]))
		}
		for i := range 64 {
			v, err := s.Get(ctx, []byte(fmt.Sprint("k", i)))
			require.NoError(t, err)
			require.Equal(t, fmt.Sprint("v", i), string(v))
		}
		before, ok := s.FlexStats()
		require.True(t, ok)
		require.Positive(t, before.Remote, "some index RPCs went to the other node's proxy")
		require.NoError(t, s.Leave(ctx))
		for p := range k.Partitions() {
			for _, n := range nodes {
				require.Equal(t, farmem.NodeID(0), k.Owner(n, p), "partition %d on %v", p, n)
			}
		}
		require.ErrorIs(t, s.HandOver(ctx, 0, nodes[1]), kvstore.ErrHandOver)
		for i := range 64 {
			key := []byte(fmt.Sprint("k", i))
			require.NoError(t, s.Put(ctx, key, []byte(fmt.Sprint("w", i))))
			v, err := s.Get(ctx, key)
			require.NoError(t, err)
			require.Equal(t, fmt.Sprint("w", i), string(v))
		}
		// The manager finds no node to assign to: it moves nothing.
		mctx, cancel := sm.Runtime().WithTimeout(ctx, 2*time.Millisecond)
		defer cancel()
		moved := 0
		require.NoError(t, s.RunManager(mctx, kvstore.ManagerOptions{Period: 300 * time.Microsecond, Trace: func(p kvstore.ManagerPeriod) { moved += p.Moved }}))
		require.Zero(t, moved)
	})
}
