package selcc_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/selcc"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
)

// mixed runs 4 clients on each of 4 nodes for window over lines lines with the paper's locality
// (§7.1.2: each access goes to the previous access's line with probability 1/2, else to a
// uniformly drawn one), reading with probability rd; it returns operations and round trips.
func mixed(t *testing.T, so selcc.Options, lines int, rd float64, window time.Duration) (ops, rts uint64) {
	r := simRig(t, simModel(4, 4), 1, so)
	gs := r.lines(t, lines)
	n := 16
	ms := make([]farmem.Memory, n)
	cls := make([]*selcc.Client, n)
	for i := range n {
		ms[i], cls[i] = r.client(t, i)
	}
	var done atomic.Uint64
	r.do(func() {
		end := r.s.Now() + farmem.Time(window)
		require.NoError(t, farmemtest.Parallel(r.f.Runtime(), n, func(i int) error {
			ctx := context.Background()
			m, cl := ms[i], cls[i]
			rnd := m.Runtime().NewRand()
			li := rnd.IntN(lines)
			for m.Runtime().Now() < end {
				if rnd.IntN(2) == 0 {
					li = rnd.IntN(lines)
				}
				g := gs[li]
				var gd *selcc.Guard
				var err error
				if rnd.Float64() < rd {
					if gd, err = cl.RLock(ctx, g); err == nil {
						_, err = gd.ReadUint64(ctx, 0)
					}
				} else if gd, err = cl.Lock(ctx, g); err == nil {
					err = gd.WriteUint64(ctx, 0, uint64(i))
				}
				if err != nil {
					return err
				}
				if err := gd.Unlock(ctx); err != nil {
					return err
				}
				done.Add(1)
			}
			return nil
		}))
	})
	for _, m := range ms {
		rts += m.Stats().RoundTrips
	}
	return done.Load(), rts
}

// TestCachedBeatsSEL: on a read-intensive load with locality (95% reads) the cache needs fewer
// round trips per operation than SEL's two, and completes more operations in the same virtual
// time.
func TestCachedBeatsSEL(t *testing.T) {
	w := 500 * time.Microsecond
	cops, crt := mixed(t, selcc.Options{LineSize: 256, Frames: 64}, 64, 0.95, w)
	sops, srt := mixed(t, selcc.Options{Mode: selcc.SEL, LineSize: 256}, 64, 0.95, w)
	t.Logf("SELCC: %d ops, %.2f round trips/op; SEL: %d ops, %.2f round trips/op; ratio %.2fx",
		cops, float64(crt)/float64(cops), sops, float64(srt)/float64(sops), float64(cops)/float64(sops))
	require.InDelta(t, 2.0, float64(srt)/float64(sops), 0.2, "SEL: two round trips per access (retries aside)")
	require.Less(t, float64(crt)/float64(cops), 1.0)
	require.Greater(t, cops, sops)
}
