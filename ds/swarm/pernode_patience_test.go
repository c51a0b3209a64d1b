package swarm_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/ds/swarm"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
)

// TestPerNodeLanePatience: a node-mate that holds the lane's latch for many patiences (alive,
// as a write blocked on down replicas is) delays a write of the node but does not fail it;
// a holder whose client died (its release cannot reach the latch word) makes the node's
// writers give up with maxreg.ErrLaneStuck once nobody took the latch for a patience.
func TestPerNodeLanePatience(t *testing.T) {
	s := newSimC(t, 7, 3, 2, 0, 0)
	s.Run(func() {
		ctx := context.Background()
		rt := s.Runtime()
		addrs := createPerNode(t, s)
		const patience = time.Millisecond
		lanes := &maxreg.Lanes{Patience: patience}
		// Clients 0 and 2 on the first compute node.
		hs := []*handle{
			openWith(t, s, 0, addrs, nil, swarm.Options{Lanes: lanes}),
			openWith(t, s, 2, addrs, nil, swarm.Options{Lanes: lanes}),
		}
		require.Equal(t, hs[0].r.Replicated().Writer(), hs[1].r.Replicated().Writer(), "one writer per node")
		require.NoError(t, hs[1].r.Write(ctx, encode(1)))

		var took time.Duration
		err := farmemtest.Parallel(rt, 2, func(i int) error {
			if i == 0 {
				release, err := hs[0].r.Replicated().HoldLane(ctx)
				if err != nil {
					return err
				}
				defer release()
				return rt.Sleep(ctx, 10*patience)
			}
			if err := rt.Sleep(ctx, patience/10); err != nil {
				return err
			}
			start := rt.Now()
			err := hs[1].r.Write(ctx, encode(2))
			took = rt.Now().Sub(start)
			return err
		})
		require.NoError(t, err, "a live holder past the patience delays the write, no more")
		require.Greater(t, took, 5*patience)
		v, err := hs[0].r.Read(ctx)
		require.NoError(t, err)
		require.Equal(t, uint64(2), decode(t, v))

		// The holder's client dies: its release cannot reach the latch word.
		release, err := hs[0].r.Replicated().HoldLane(ctx)
		require.NoError(t, err)
		require.NoError(t, hs[0].m.Close())
		release()
		start := rt.Now()
		err = hs[1].r.Write(ctx, encode(3))
		require.ErrorIs(t, err, maxreg.ErrLaneStuck)
		require.ErrorIs(t, err, farmem.ErrNodeDown)
		require.GreaterOrEqual(t, rt.Now().Sub(start), patience)
	})
}
