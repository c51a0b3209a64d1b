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

// TestPerNodeFinalInFlight: a node-mate's final tuple is stamped (the lane's timestamps are
// at the ceiling) but its write not yet posted when another client of the node begins a
// WriteBelow: the WriteBelow's look before the lane finds the lane at the ceiling and no
// final tuple in the register, and must not call that an exhausted writer; it waits for the
// lane, finds the final tuple once it holds it, and is refused with ErrCeiling. (The kvstore
// adoption lincheck failed an update so, 1 run in 12, when a delete's tombstone and an
// update of one key ran on one compute node.)
func TestPerNodeFinalInFlight(t *testing.T) {
	s := newSimC(t, 9, 3, 2, 0, 0)
	s.Run(func() {
		ctx := context.Background()
		rt := s.Runtime()
		addrs := createPerNode(t, s)
		lanes := maxreg.NewLanes()
		var hook func(ctx context.Context, v farmemtest.Verb)
		// Clients 0 and 2 on the first compute node; client 0's verbs pass through hook.
		a := openWith(t, s, 0, addrs, func(m farmem.Memory) farmem.Memory {
			return &farmemtest.Interposer{Memory: m, Before: func(ctx context.Context, v farmemtest.Verb) {
				if hook != nil {
					hook(ctx, v)
				}
			}}
		}, swarm.Options{Lanes: lanes})
		b := openWith(t, s, 2, addrs, nil, swarm.Options{Lanes: lanes})
		require.Equal(t, a.r.Replicated().Writer(), b.r.Replicated().Writer(), "one writer per node")
		require.NoError(t, b.r.WriteBelow(ctx, encode(1), swarm.FinalTS))

		g := s.NewGroup()
		var mateErr error
		started := false
		hook = func(ctx context.Context, v farmemtest.Verb) {
			if started || !v.Posted || !hasOp(v, farmem.OpWrite) {
				return
			}
			// A's final record write is about to be posted, the lane stamped at the ceiling.
			started = true
			require.GreaterOrEqual(t, b.r.Replicated().LastTS(), uint64(swarm.FinalTS))
			g.Go(func() { mateErr = b.r.WriteBelow(ctx, encode(3), swarm.FinalTS) })
			// Long enough for the node-mate's read of the register to return.
			require.NoError(t, rt.Sleep(ctx, 50*time.Microsecond))
		}
		require.NoError(t, a.r.WriteFinal(ctx, encode(2), swarm.FinalTS))
		require.True(t, started, "the final tuple's write was posted")
		require.NoError(t, g.Wait())
		require.ErrorIs(t, mateErr, swarm.ErrCeiling, "the node-mate's write meets the final tuple")
		for _, hd := range []*handle{a, b} {
			v, err := hd.r.Read(ctx)
			require.NoError(t, err)
			require.Equal(t, uint64(2), decode(t, v))
		}
	})
}

// hasOp reports whether v's batch holds an op of kind k.
func hasOp(v farmemtest.Verb, k farmem.OpKind) bool {
	for _, op := range v.Batch.Ops {
		if op.Kind == k {
			return true
		}
	}
	return false
}
