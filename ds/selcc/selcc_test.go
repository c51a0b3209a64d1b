package selcc_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/selcc"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

// TestRoundTrips: a hit costs no round trip, a miss one, an upgrade one CAS; SEL two per
// access.
func TestRoundTrips(t *testing.T) {
	r := localRig(t, local.Options{Shape: local.Shape{ComputeNodes: 2}}, selcc.Options{LineSize: 256, Frames: 8})
	gs := r.lines(t, 2)
	m, cl := r.client(t, 0)
	ctx := context.Background()
	rt := func(f func()) uint64 {
		before := m.Stats().RoundTrips
		f()
		return m.Stats().RoundTrips - before
	}
	must := func(gd *selcc.Guard, err error) *selcc.Guard { require.NoError(t, err); return gd }
	require.Equal(t, uint64(1), rt(func() { require.NoError(t, must(cl.RLock(ctx, gs[0])).Unlock(ctx)) }), "read miss")
	require.Equal(t, uint64(0), rt(func() { require.NoError(t, must(cl.RLock(ctx, gs[0])).Unlock(ctx)) }), "read hit")
	require.Equal(t, uint64(1), rt(func() {
		gd := must(cl.Lock(ctx, gs[0]))
		require.NoError(t, gd.WriteUint64(ctx, 0, 7))
		require.NoError(t, gd.Unlock(ctx))
	}), "upgrade")
	require.Equal(t, uint64(0), rt(func() { require.NoError(t, must(cl.Lock(ctx, gs[0])).Unlock(ctx)) }), "write hit")
	require.Equal(t, uint64(0), rt(func() { require.NoError(t, must(cl.RLock(ctx, gs[0])).Unlock(ctx)) }), "read hit on M")
	require.Equal(t, uint64(1), rt(func() { require.NoError(t, must(cl.Lock(ctx, gs[1])).Unlock(ctx)) }), "write miss")

	// A peer's read of a line held M: the holder downgrades and forwards; the reader sees the
	// write.
	m2, cl2 := r.client(t, 1)
	gd := must(cl2.RLock(ctx, gs[0]))
	v, err := gd.ReadUint64(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(7), v)
	require.NoError(t, gd.Unlock(ctx))
	require.Zero(t, m2.Stats().MessageFailures)

	// SEL on the same fabric is another cluster: close this one first.
	require.NoError(t, r.c.Close())
	r.open(t, selcc.Options{Mode: selcc.SEL, LineSize: 256})
	_, cl = r.client(t, 2)
	m = nil
	ms, cl := r.client(t, 0)
	m = ms
	require.Equal(t, uint64(2), rt(func() {
		gd := must(cl.RLock(ctx, gs[0]))
		v, err := gd.ReadUint64(ctx, 0)
		require.NoError(t, err)
		require.Equal(t, uint64(7), v, "Close wrote the dirty line back")
		require.NoError(t, gd.Unlock(ctx))
	}), "SEL read")
	require.Equal(t, uint64(2), rt(func() {
		gd := must(cl.Lock(ctx, gs[0]))
		require.NoError(t, gd.WriteUint64(ctx, 0, 8))
		require.NoError(t, gd.Unlock(ctx))
	}), "SEL write")
}

// TestCoherenceLocal: 4 compute nodes, a 4-frame cache, more lines than frames so evictions
// never stop; jitter and tearing on, strict mode; SWMR at every instant, an exact counter per
// line, a linearizable register history per line.
func TestCoherenceLocal(t *testing.T) {
	for _, mode := range []selcc.Mode{selcc.Cached, selcc.SEL} {
		t.Run(mode.String(), func(t *testing.T) {
			r := localRig(t, local.Options{Shape: local.Shape{ComputeNodes: 4}, Tearing: true,
				Jitter: 5 * time.Microsecond, Latency: time.Microsecond},
				selcc.Options{Mode: mode, LineSize: 128, Frames: 4, EvictBatch: 2})
			gs := r.lines(t, 6)
			sw := newSWMR(len(gs))
			h := register.NewHistory(r.f.Runtime())
			incs := r.workload(t, 8, 120, 0.4, gs, sw, h, 0)
			require.Zero(t, sw.violations.Load(), "SWMR violated")
			require.Zero(t, sw.torn.Load(), "torn reads")
			h.Check(t)
			if mode == selcc.Cached {
				r.quiescentAgreement(t, gs)
			}
			require.NoError(t, r.c.Close())
			latches, ctrs := r.farWords(t, gs)
			for i := range gs {
				require.Zero(t, latches[i], "line %d's latch after close", i)
				require.Equal(t, uint64(incs[i]), ctrs[i], "line %d lost writes", i)
			}
			var ev, hd uint64
			for _, n := range r.comp {
				st := r.c.NodeStats(n)
				ev += st.Evicted
				hd += st.Handled
			}
			t.Logf("evicted %d, invalidations handled %d", ev, hd)
			if mode == selcc.Cached {
				require.Positive(t, ev)
				require.Positive(t, hd)
			}
		})
	}
}

// blindCodec is the paper's bitmap with a holder field readers cannot see: shared attempts
// succeed beside an exclusive holder. The coherence checks must catch it.
type blindCodec struct{ selcc.Bitmap }

func (blindCodec) Holder(uint64) farmem.ComputeID { return 0 }

// TestBrokenCoherenceCaught: the workload's checks fail on a protocol that lets readers in
// beside a writer.
func TestBrokenCoherenceCaught(t *testing.T) {
	r := localRig(t, local.Options{Shape: local.Shape{ComputeNodes: 4}, Jitter: 5 * time.Microsecond, Latency: time.Microsecond},
		selcc.Options{Mode: selcc.SEL, LineSize: 64, Frames: 4, Codec: blindCodec{}})
	gs := r.lines(t, 2)
	sw := newSWMR(len(gs))
	h := register.NewHistory(r.f.Runtime())
	r.workload(t, 8, 60, 0.5, gs, sw, h, 20*time.Microsecond)
	_, err := h.Verify()
	require.True(t, sw.violations.Load() > 0 || sw.torn.Load() > 0 || err != nil, "a blind reader passed the SWMR and register checks")
	t.Logf("SWMR violations %d, torn reads %d, lincheck failed: %v", sw.violations.Load(), sw.torn.Load(), err != nil)
}
