package swarm_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/ds/swarm"
	"github.com/farmem/farmem/farmem"
)

// TestFinalTuple: after a final tuple (a tombstone) no WriteBelow takes effect, whether its
// writer knew of the tuple before writing (no verb) or learned it in its write's read half
// (its guess unpublished): every reader keeps returning the final value; and a WriteBelow
// before it is an ordinary write.
func TestFinalTuple(t *testing.T) {
	s := newSim(t, 5, 3, 0, 0)
	addrs := create(t, s)
	a := open(t, s, 0, addrs, nil)
	b := open(t, s, 1, addrs, nil)
	c := open(t, s, 2, addrs, nil)
	s.Run(func() {
		ctx := context.Background()
		require.NoError(t, a.r.WriteBelow(ctx, encode(1), swarm.FinalTS))
		v, err := b.r.Read(ctx)
		require.NoError(t, err)
		require.Equal(t, encode(1), v)
		require.NoError(t, a.r.WriteFinal(ctx, encode(99), swarm.FinalTS))
		v, err = b.r.Read(ctx)
		require.NoError(t, err)
		require.Equal(t, encode(99), v)
		before := b.m.Stats()
		require.ErrorIs(t, b.r.WriteBelow(ctx, encode(2), swarm.FinalTS), swarm.ErrCeiling, "the reader knows the final tuple: a read confirms it")
		require.Equal(t, uint64(maxreg.ReplicatedReadRoundTrips), b.m.Stats().Sub(before).RoundTrips, "refused after a read, with no write")
		require.ErrorIs(t, c.r.WriteBelow(ctx, encode(3), swarm.FinalTS), swarm.ErrCeiling, "learned in the write's read half")
		require.ErrorIs(t, a.r.WriteBelow(ctx, encode(4), swarm.FinalTS), swarm.ErrCeiling, "the final tuple's own writer")
		for _, h := range []*handle{a, b, c} {
			v, err := h.r.Read(ctx)
			require.NoError(t, err)
			require.Equal(t, encode(99), v)
		}
		require.ErrorIs(t, a.r.WriteBelow(ctx, nil, 0), farmem.ErrInvalid)
	})
}
