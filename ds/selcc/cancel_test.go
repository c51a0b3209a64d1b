package selcc_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/selcc"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
)

// TestCanceledWritersNotHandedOver: writers on three nodes give up their acquisitions of a hot
// line after a few microseconds, again and again, while the line's holder keeps running out of
// lease (γ = 1) and handing it over to the highest-priority writer it refused. A hand-over
// must never reach a writer that stopped waiting (its grant word is closed): at the end no
// latch word names a node that does not hold the line, and no increment is lost.
func TestCanceledWritersNotHandedOver(t *testing.T) {
	r := simRig(t, simModel(4, 3), 1, selcc.Options{LineSize: 64, Frames: 4, Gamma: 1, Threads: 1})
	gs := r.lines(t, 1)
	const n = 12
	ms := make([]farmem.Memory, n)
	cls := make([]*selcc.Client, n)
	for i := range n {
		ms[i], cls[i] = r.client(t, i)
	}
	var incs, canceled atomic.Int64
	r.do(func() {
		end := r.s.Now() + farmem.Time(400*time.Microsecond)
		err := farmemtest.Parallel(r.f.Runtime(), n, func(i int) error {
			m, cl := ms[i], cls[i]
			rt := m.Runtime()
			for rt.Now() < end {
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if i%4 != 0 { // nodes 2-4: impatient writers
					ctx, cancel = rt.WithTimeout(context.Background(), time.Duration(1+rt.Rand().IntN(8))*time.Microsecond)
				}
				gd, err := cl.Lock(ctx, gs[0])
				cancel()
				if errors.Is(err, context.DeadlineExceeded) {
					canceled.Add(1)
					continue
				}
				if err != nil {
					return err
				}
				v, err := gd.ReadUint64(context.Background(), 0)
				if err == nil {
					err = gd.WriteUint64(context.Background(), 0, v+1)
				}
				if err != nil {
					return err
				}
				if err := gd.Unlock(context.Background()); err != nil {
					return err
				}
				incs.Add(1)
			}
			return nil
		})
		if err != nil {
			t.Logf("stats %+v", r.f.Stats())
			t.Error(err)
		}
	})
	var granted uint64
	for _, nd := range r.comp {
		granted += r.c.NodeStats(nd).Granted
	}
	t.Logf("increments %d, canceled acquisitions %d, hand-overs by grant %d, message failures %d", incs.Load(), canceled.Load(), granted, r.f.Stats().MessageFailures)
	require.Positive(t, canceled.Load())
	r.quiescentAgreement(t, gs)
	r.do(func() { require.NoError(t, r.c.Close()) })
	latches, ctrs := r.farWords(t, gs)
	require.Zero(t, latches[0])
	require.Equal(t, uint64(incs.Load()), ctrs[0])
}
