package selcc_test

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/selcc"
	"github.com/farmem/farmem/farmem/local"
)

// selRig is a SEL-mode cluster of one compute node on local.
func selRig(t *testing.T) *rig {
	return localRig(t, local.Options{Shape: local.Shape{MemoryNodes: 1, ComputeNodes: 1}},
		selcc.Options{Mode: selcc.SEL, LineSize: 64})
}

// TestSELNestedExclusive: in SEL mode a client holding a guard takes an exclusive guard on a
// second line (what a B-link split does) while another client of its node waits for the
// first line; the waiting client gets it once the first releases.
func TestSELNestedExclusive(t *testing.T) {
	r := selRig(t)
	gs := r.lines(t, 2)
	_, a := r.client(t, 0)
	_, b := r.client(t, 0)
	ctx := context.Background()
	g0, err := a.Lock(ctx, gs[0])
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() { // b waits for the line a holds
		gd, err := b.Lock(ctx, gs[0])
		if err == nil {
			err = gd.Unlock(ctx)
		}
		got <- err
	}()
	g1, err := a.Lock(ctx, gs[1]) // nested
	require.NoError(t, err)
	require.NoError(t, g1.WriteUint64(ctx, 0, 7))
	require.NoError(t, g1.Unlock(ctx))
	require.NoError(t, g0.Unlock(ctx))
	require.NoError(t, <-got)
	requireSEL(t, a, gs[1], 7)
}

// TestSELReadersShareByCount: SEL's readers add one each to the latch word (the paper's SEL),
// so two clients of one node hold a line shared at once, with no local latch between them; a
// writer gets the line once both released, and the word is 0 again at the end.
func TestSELReadersShareByCount(t *testing.T) {
	r := selRig(t)
	gs := r.lines(t, 1)
	m, a := r.client(t, 0)
	_, b := r.client(t, 0)
	_, w := r.client(t, 0)
	ctx := context.Background()
	word := func() uint64 {
		var buf [8]byte
		require.NoError(t, m.Read(ctx, gs[0].Latch(), buf[:]))
		return binary.LittleEndian.Uint64(buf[:])
	}
	ra, err := a.RLock(ctx, gs[0])
	require.NoError(t, err)
	rb, err := b.RLock(ctx, gs[0]) // would wait forever behind a's local latch if there were one
	require.NoError(t, err)
	require.Equal(t, uint64(2), word())
	got := make(chan error, 1)
	go func() {
		gd, err := w.Lock(ctx, gs[0])
		if err == nil {
			if err = gd.WriteUint64(ctx, 0, 9); err == nil {
				err = gd.Unlock(ctx)
			}
		}
		got <- err
	}()
	require.NoError(t, ra.Unlock(ctx))
	require.NoError(t, rb.Unlock(ctx))
	require.NoError(t, <-got)
	require.Zero(t, word())
	requireSEL(t, a, gs[0], 9)
}

// requireSEL reads g's first word through cl under a shared guard and requires it to be want.
func requireSEL(t *testing.T, cl *selcc.Client, g selcc.GCL, want uint64) {
	ctx := context.Background()
	rd, err := cl.RLock(ctx, g)
	require.NoError(t, err)
	v, err := rd.ReadUint64(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, want, v)
	require.NoError(t, rd.Unlock(ctx))
}
