package swarm_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/ds/swarm"
	"github.com/farmem/farmem/farmem"
)

// lateAnswer is a client's memory whose next CAS taking a latch in the client's own region
// (old value without the top bit, new with it), once armed, is applied only after its
// context's deadline has passed and answers with the context's error: an op a transport
// applied whose answer came back too late (the local transport does so when a context ends
// during an op's latency).
type lateAnswer struct {
	farmem.Memory
	armed, fired bool
	// unapplied: the CAS fails with the context's error without being applied (a client
	// descheduled past the deadline before its op ran).
	unapplied bool
}

func (m *lateAnswer) CAS(ctx context.Context, a farmem.Addr, old, new uint64) (uint64, error) {
	if _, ok := ctx.Deadline(); !m.armed || m.fired || !ok || a.Node() != m.Info().Node || old>>63 != 0 || new>>63 != 1 {
		return m.Memory.CAS(ctx, a, old, new)
	}
	m.fired = true
	for ctx.Err() == nil {
		if err := m.Runtime().Sleep(context.WithoutCancel(ctx), 10*time.Microsecond); err != nil {
			return 0, err
		}
	}
	if m.unapplied {
		return 0, ctx.Err()
	}
	prev, err := m.Memory.CAS(context.WithoutCancel(ctx), a, old, new)
	if err != nil {
		return prev, err
	}
	return prev, ctx.Err()
}

// TestPerNodeLaneLostAnswer: a client of a node waits for its lane's latch past its
// patience, and the CAS that takes the latch as the holder releases it is applied but
// answered with the patience's deadline. The write must not leave the latch held by nobody
// live (every later write of the node would then fail with maxreg.ErrLaneStuck): it finds
// the latch its own, and it and the node's next writes succeed. (The kvstore adoption
// lincheck failed 7 updates of a node with ErrLaneStuck so, on a loaded machine.) Likewise
// when the CAS was not applied at all (the client descheduled past the patience before it
// ran): the latch is free, and a free latch is not stuck.
func TestPerNodeLaneLostAnswer(t *testing.T) {
	for _, unapplied := range []bool{false, true} {
		t.Run(fmt.Sprintf("unapplied=%v", unapplied), func(t *testing.T) { laneLostAnswer(t, unapplied) })
	}
}

func laneLostAnswer(t *testing.T, unapplied bool) {
	s := newSimC(t, 7, 3, 2, 0, 0)
	s.Run(func() {
		ctx := context.Background()
		rt := s.Runtime()
		addrs := createPerNode(t, s)
		const patience = time.Millisecond
		lanes := &maxreg.Lanes{Patience: patience}
		var late *lateAnswer
		// Clients 0 and 2 on the first compute node; client 2's latch CAS answers late.
		hs := []*handle{
			openWith(t, s, 0, addrs, nil, swarm.Options{Lanes: lanes}),
			openWith(t, s, 2, addrs, func(m farmem.Memory) farmem.Memory {
				late = &lateAnswer{Memory: m, unapplied: unapplied}
				return late
			}, swarm.Options{Lanes: lanes}),
		}
		require.Equal(t, hs[0].r.Replicated().Writer(), hs[1].r.Replicated().Writer(), "one writer per node")
		require.NoError(t, hs[1].r.Write(ctx, encode(1)))

		release, err := hs[0].r.Replicated().HoldLane(ctx)
		require.NoError(t, err)
		g := s.NewGroup()
		var werr error
		g.Go(func() { werr = hs[1].r.Write(ctx, encode(2)) })
		require.NoError(t, rt.Sleep(ctx, patience/2))
		late.armed = true
		release()
		require.NoError(t, g.Wait())
		require.True(t, late.fired, "the latch was taken with a late answer")
		require.NoError(t, werr, "the write whose latch CAS answered late")
		require.NoError(t, hs[0].r.Write(ctx, encode(3)), "the node's next write")
		require.NoError(t, hs[1].r.Write(ctx, encode(4)))
		v, err := hs[0].r.Read(ctx)
		require.NoError(t, err)
		require.Equal(t, uint64(4), decode(t, v))
	})
}
