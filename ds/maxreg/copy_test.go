package maxreg_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/internal/dstest"
)

// TestWriteBackCopySurvives: a write reaches replica A only (its writer cut off from B and
// C); a reader returns it and writes it back to B and C, copying the record into its own lane;
// then A crashes. Another reader finds the tag on B and C, not in its writer's buffer there
// (never written), and reads it from the copy: the value survives its writer's only replica.
func TestWriteBackCopySurvives(t *testing.T) {
	s := newSimN(t, 3, 3)
	s.Run(func() {
		ctx := context.Background()
		addrs := createRep(t, s, repParams)
		w := openRep(t, s, 0, addrs)
		r := openRep(t, s, 1, addrs)
		r2 := openRep(t, s, 2, addrs)
		a, b, c := addrs[0].Node(), addrs[1].Node(), addrs[2].Node()
		wid := w.m.Info().ID
		require.NoError(t, s.Partition(wid, b))
		require.NoError(t, s.Partition(wid, c))
		_, err := w.r.Write(ctx, []byte("only on A"))
		require.ErrorIs(t, err, maxreg.ErrNoQuorum)
		require.NoError(t, s.Heal(wid, b))
		require.NoError(t, s.Heal(wid, c))
		v, got, err := r.r.Read(ctx)
		require.NoError(t, err)
		require.Equal(t, "only on A", string(got))
		require.Equal(t, uint64(1), r.r.Stats().Copies, "the write-back copied the record")
		require.NoError(t, s.Crash(a))
		v2, got2, err := r2.r.Read(ctx)
		require.NoError(t, err)
		require.Equal(t, v, v2)
		require.Equal(t, "only on A", string(got2))
		require.Equal(t, uint64(1), r2.r.Stats().CopyChases, "the record was found in the copy")
	})
}

// TestEarlyReuseNeverWaits: writers with ReplicatedOptions.EarlyReuse rewrite two buffers
// each as fast as they can while readers read (and write back): no write ever waits for a
// buffer, buffers are reused before their delay, and the history meets the max-register
// specification.
func TestEarlyReuseNeverWaits(t *testing.T) {
	s := newSimN(t, 5, 3)
	s.Run(func() {
		ctx := context.Background()
		addrs := createRep(t, s, recycleParams)
		const clients = 5
		hs := make([]*repHandle, clients)
		for i := range hs {
			m, _ := dstest.OpenClient(t, s, i, nil)
			rr, err := maxreg.OpenReplicated(ctx, m, addrs, maxreg.ReplicatedOptions{EarlyReuse: true})
			require.NoError(t, err)
			hs[i] = &repHandle{m: m, r: rr}
		}
		rec := newRecorder(s.Runtime())
		end := s.Now().Add(20 * hs[0].r.ReuseDelay())
		err := farmemtest.Parallel(s.Runtime(), clients, func(i int) error {
			for k := 0; s.Now() < end; k++ {
				if _, err := repOp(ctx, hs[i], rec, k, i < 3); err != nil {
					return fmt.Errorf("client %d: %w", i, err)
				}
			}
			return nil
		})
		require.NoError(t, err)
		require.NoError(t, checkWeak(rec.all()))
		var st maxreg.ReplicatedStats
		for _, h := range hs {
			x := h.r.Stats()
			st.RecycleWaits += x.RecycleWaits
			st.EarlyReuses += x.EarlyReuses
			st.Writes += x.Writes
		}
		require.Zero(t, st.RecycleWaits)
		require.NotZero(t, st.EarlyReuses)
		t.Logf("%d writes, %d early reuses", st.Writes, st.EarlyReuses)
	})
}
