package selcc_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/selcc"
	"github.com/farmem/farmem/farmem/local"
)

// TestSELNestedExclusive: in SEL mode a client holding a guard takes an exclusive guard on a
// second line (what a B-link split does) even when both lines share its node's one stripe
// latch, and even when another client of the node waits for that stripe; the waiting
// client gets its line once the first releases. Before, the nested acquisition waited for a
// stripe its own client held, forever.
func TestSELNestedExclusive(t *testing.T) {
	r := localRig(t, local.Options{Shape: local.Shape{MemoryNodes: 1, ComputeNodes: 1}},
		selcc.Options{Mode: selcc.SEL, LineSize: 64, Stripes: 1})
	gs := r.lines(t, 3)
	_, a := r.client(t, 0)
	_, b := r.client(t, 0)
	ctx := context.Background()
	g0, err := a.Lock(ctx, gs[0])
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() { // b waits for the stripe a holds
		gd, err := b.Lock(ctx, gs[2])
		if err == nil {
			err = gd.Unlock(ctx)
		}
		got <- err
	}()
	g1, err := a.Lock(ctx, gs[1]) // same stripe, nested: must not wait for itself
	require.NoError(t, err)
	require.NoError(t, g1.WriteUint64(ctx, 0, 7))
	require.NoError(t, g1.Unlock(ctx))
	require.NoError(t, g0.Unlock(ctx))
	require.NoError(t, <-got)
	rd, err := a.RLock(ctx, gs[1])
	require.NoError(t, err)
	v, err := rd.ReadUint64(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(7), v)
	require.NoError(t, rd.Unlock(ctx))
}
