package selcc_test

import (
	"flag"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/selcc"
)

var long = flag.Bool("selcc.long", false, "run the long SELCC experiments (more seeds and operations)")

// coherenceSim runs the coherence workload on sim with nodes compute nodes and checks SWMR, the
// exact counters, the register histories and the quiescent latch words.
func coherenceSim(t *testing.T, nodes, perNode, lines, ops int, seed uint64, so selcc.Options) *rig {
	r := simRig(t, simModel(nodes, perNode), seed, so)
	gs := r.lines(t, lines)
	sw := newSWMR(len(gs))
	h := register.NewHistory(r.f.Runtime())
	incs := r.workload(t, nodes*perNode, ops, 0.4, gs, sw, h, 0)
	require.Zero(t, sw.violations.Load(), "SWMR violated")
	require.Zero(t, sw.torn.Load(), "torn reads")
	h.Check(t)
	r.quiescentAgreement(t, gs)
	r.do(func() { require.NoError(t, r.c.Close()) })
	latches, ctrs := r.farWords(t, gs)
	for i := range gs {
		require.Zero(t, latches[i], "line %d's latch after close", i)
		require.Equal(t, uint64(incs[i]), ctrs[i], "line %d lost writes", i)
	}
	var st selcc.NodeStats
	for _, n := range r.comp {
		s := r.c.NodeStats(n)
		st.Handled, st.Dropped, st.Evicted = st.Handled+s.Handled, st.Dropped+s.Dropped, st.Evicted+s.Evicted
		st.Leases, st.Granted = st.Leases+s.Leases, st.Granted+s.Granted
	}
	t.Logf("%d nodes (%s): invalidations handled %d, dropped %d; evictions %d; leases %d (granted %d)",
		nodes, r.c.Options().Codec.Name(), st.Handled, st.Dropped, st.Evicted, st.Leases, st.Granted)
	r.last = st
	if so.Mode == selcc.Cached {
		require.Positive(t, st.Handled, "no conflict was resolved")
	}
	return r
}

func TestCoherenceSim(t *testing.T) {
	t.Parallel() // a simulation: virtual time, unmoved by other tests
	seeds, ops := uint64(3), 100
	if *long {
		seeds, ops = 30, 400
	}
	for seed := uint64(1); seed <= seeds; seed++ {
		for _, mode := range []selcc.Mode{selcc.Cached, selcc.SEL} {
			t.Run(fmt.Sprintf("%v/seed%d", mode, seed), func(t *testing.T) {
				r := coherenceSim(t, 4, 2, 6, ops, seed, selcc.Options{Mode: mode, LineSize: 128, Frames: 4, EvictBatch: 2})
				var ev uint64
				for _, n := range r.comp {
					ev += r.c.NodeStats(n).Evicted
				}
				if mode == selcc.Cached {
					require.Positive(t, ev, "a 4-frame cache never evicted")
				}
			})
		}
	}
}

// TestCoherenceSimLeases: the same with γ = 1 on hot lines held by writers, so leases run out
// all the time and lines go to waiting writers by priority hand-over (the grant word).
func TestCoherenceSimLeases(t *testing.T) {
	var granted uint64
	for seed := uint64(1); seed <= 3; seed++ {
		r := coherenceSim(t, 4, 4, 4, 30, seed, selcc.Options{LineSize: 64, Frames: 4, Gamma: 1, Threads: 1})
		granted += r.last.Granted
	}
	require.Positive(t, granted, "no hand-over by grant happened")
}

// TestCoherenceSimGroups: 64 and 200 compute nodes, past the bitmap, under the group codec.
func TestCoherenceSimGroups(t *testing.T) {
	t.Parallel() // a simulation: virtual time, unmoved by other tests
	seeds := []uint64{7}
	if *long {
		seeds = []uint64{1, 2, 3, 4, 5}
	}
	for _, seed := range seeds {
		for _, c := range []struct{ nodes, lines, ops int }{{64, 16, 8}, {200, 40, 3}} {
			t.Run(fmt.Sprintf("%d/seed%d", c.nodes, seed), func(t *testing.T) {
				r := coherenceSim(t, c.nodes, 1, c.lines, c.ops, seed, selcc.Options{LineSize: 64, Frames: 4, EvictBatch: 2})
				require.IsType(t, selcc.Groups{}, r.c.Options().Codec)
			})
		}
	}
}
