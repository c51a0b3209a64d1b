package flexcheck_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/kvstore"
)

// TestDisplacementBaseline: B = C(R²-1)/3 when C divides P (R = 2 gives E|X-Y| = 1/2 per
// partition), and the empirical mean displacement of random reshuffles matches it.
func TestDisplacementBaseline(t *testing.T) {
	t.Parallel()
	require.InDelta(t, 0.5*8, kvstore.DisplacementBaseline(8, 4), 1e-9) // R = 2
	require.InDelta(t, 20*(409.0*409-1)/3, kvstore.DisplacementBaseline(8180, 20), 1e-6)
	require.Zero(t, kvstore.DisplacementBaseline(4, 4)) // one rank: nothing can move
	// Monte Carlo: ranks of independent uniform shuffles.
	r := rand.New(rand.NewPCG(1, 2))
	const P, C = 240, 20
	hot := func() []uint64 {
		h := make([]uint64, P)
		for i := range h {
			h[i] = uint64(r.IntN(1 << 30))
		}
		return h
	}
	var sum float64
	const trials = 400
	for range trials {
		sum += float64(kvstore.Displacement(kvstore.Ranks(hot(), C), kvstore.Ranks(hot(), C)))
	}
	b := kvstore.DisplacementBaseline(P, C)
	require.InEpsilon(t, b, sum/trials, 0.05, "mean random displacement vs B")
}

// TestReassignTrigger: D just under a quarter of B does not trigger, at it does.
func TestReassignTrigger(t *testing.T) {
	t.Parallel()
	const P, C = 16, 2 // R = 8, B = 2·63/3 = 42, trigger at 10.5
	old := make([]int, P)
	for p := range old {
		old[p] = p / C
	}
	moved := slices.Clone(old)
	require.False(t, kvstore.Reassign(moved, old, C, 0.25))
	// Swap ranks 0 and 5 of two partitions: D = 10 (< 10.5).
	moved[0], moved[10] = 5, 0
	require.Equal(t, 10, kvstore.Displacement(moved, old))
	require.False(t, kvstore.Reassign(moved, old, C, 0.25))
	moved[1], moved[2] = 1, 0 // D = 12
	require.Equal(t, 12, kvstore.Displacement(moved, old))
	require.True(t, kvstore.Reassign(moved, old, C, 0.25))
}

// TestAssignByRank: every node holds one partition of every full rank, lists run hot to cold,
// and an assignment recomputed after a shuffle within ranks keeps every partition's owner.
func TestAssignByRank(t *testing.T) {
	t.Parallel()
	nodes := []farmem.NodeID{farmem.ComputeID(1).Node(), farmem.ComputeID(2).Node(), farmem.ComputeID(3).Node()}
	r := rand.New(rand.NewPCG(3, 4))
	const P = 11 // 3 full ranks and a partial one of 2
	hot := make([]uint64, P)
	for i := range hot {
		hot[i] = uint64(r.IntN(1000))*10 + uint64(i%10)
	}
	lists := kvstore.AssignByRank(hot, nodes, nil)
	ranks := kvstore.Ranks(hot, len(nodes))
	seen := map[int]bool{}
	for _, l := range lists {
		require.GreaterOrEqual(t, len(l), 3)
		for j, p := range l {
			require.False(t, seen[p])
			seen[p] = true
			require.Equal(t, j, ranks[p], "the j-th of a list is of rank j")
		}
	}
	require.Len(t, seen, P)
	// Sticky: reorder hotness within each rank; owners stay.
	prev := make([]farmem.NodeID, P)
	for i, l := range lists {
		for _, p := range l {
			prev[p] = nodes[i]
		}
	}
	hot2 := slices.Clone(hot)
	for _, l := range lists {
		for _, p := range l {
			hot2[p] += uint64(r.IntN(3)) // within-rank jitter: never past the next rank's gap
		}
	}
	if slices.Equal(kvstore.Ranks(hot2, 3), ranks) {
		lists2 := kvstore.AssignByRank(hot2, nodes, prev)
		for i, l := range lists2 {
			for _, p := range l {
				require.Equal(t, prev[p], nodes[i], "partition %d kept its owner", p)
			}
		}
	}
	// Within a rank, the hottest unplaced partition goes to the node lightest so far: rank 2's
	// hotter partition to the node that holds rank 1's colder one.
	require.Equal(t, [][]int{{0, 3}, {1, 2}}, kvstore.AssignByRank([]uint64{100, 90, 80, 10}, nodes[:2], nil))
	// A dead node's partitions go to the live ones, one per rank each.
	lists3 := kvstore.AssignByRank(hot, nodes[:2], prev)
	require.Len(t, lists3, 2)
	require.Equal(t, P, len(lists3[0])+len(lists3[1]))
}

// TestOffloaded: the ratio's share of the partitions, taken rank by rank from the heads of
// the lists.
func TestOffloaded(t *testing.T) {
	t.Parallel()
	nodes := []farmem.NodeID{farmem.ComputeID(1).Node(), farmem.ComputeID(2).Node()}
	lists := [][]int{{3, 0, 4, 1, 8}, {2, 5, 6, 7, 9}}
	o := kvstore.Offloaded(10, nodes, lists, 0.4)
	want := make([]farmem.NodeID, 10)
	want[3], want[0], want[2], want[5] = nodes[0], nodes[0], nodes[1], nodes[1]
	require.Equal(t, want, o)
	o = kvstore.Offloaded(10, nodes, lists, 0.3) // 3: both heads, then node 1's second
	want[5] = 0
	require.Equal(t, want, o)
	require.Equal(t, make([]farmem.NodeID, 10), kvstore.Offloaded(10, nodes, lists, 0))
	all := kvstore.Offloaded(10, nodes, lists, 1)
	require.NotContains(t, all, farmem.NodeID(0))
	s := kvstore.AssignStatic(10, nodes)
	require.Equal(t, [][]int{{0, 2, 4, 6, 8}, {1, 3, 5, 7, 9}}, s)
}

// runKnob drives a knob over curve until it settles and returns the ratio it settled at, the
// periods it took and the ratios it sampled.
func runKnob(t *testing.T, k *kvstore.Knob, curve func(float64) float64) (float64, int, []float64) {
	t.Helper()
	var seen []float64
	for range 100 {
		if ok, n := k.Settled(); ok {
			return k.Ratio(), n, seen
		}
		seen = append(seen, k.Ratio())
		k.Observe(curve(k.Ratio()))
	}
	t.Fatal("the knob never settled")
	return 0, 0, nil
}

// TestKnob: on unimodal curves the knob finds the peak on the grid, stops after two
// non-improving probes, flips direction when the first probe is worse, and clamps at the
// ends of [0, 1].
func TestKnob(t *testing.T) {
	t.Parallel()
	peak := func(at float64) func(float64) float64 {
		return func(i float64) float64 { return 100 - math.Abs(i-at)*50 }
	}
	// From 0 up to 0.3: samples 0, 0.1, 0.2, 0.3, 0.4, 0.5 (two worse), then 0.3.
	k := kvstore.NewKnob(0, 0.1)
	r, n, seen := runKnob(t, k, peak(0.3))
	require.InDelta(t, 0.3, r, 1e-9)
	require.Equal(t, 6, n)
	require.InDeltaSlice(t, []float64{0, 0.1, 0.2, 0.3, 0.4, 0.5}, seen, 1e-9)
	// A new round from 0.3 when the peak moved to 0.6: up three steps, then two worse.
	k.Restart()
	r, n, _ = runKnob(t, k, peak(0.6))
	require.InDelta(t, 0.6, r, 1e-9)
	// The paper's Fig. 18: the round begun at 16 s settles at 22 s: the sample of 0.3, three
	// better probes and two worse ones.
	require.Equal(t, 6, n)
	// Flip: from 0.6 with the peak at 0.2, the first probe (0.7) is worse.
	k.Restart()
	r, _, seen = runKnob(t, k, peak(0.2))
	require.InDelta(t, 0.2, r, 1e-9)
	require.InDelta(t, 0.7, seen[1], 1e-9)
	require.InDelta(t, 0.5, seen[2], 1e-9)
	// Clamped at 1: the peak beyond the end.
	k = kvstore.NewKnob(0.8, 0.1)
	r, _, seen = runKnob(t, k, func(i float64) float64 { return i })
	require.InDelta(t, 1, r, 1e-9)
	require.LessOrEqual(t, slices.Max(seen), 1.0)
	// From 0.3 on a curve rising to the end (the simulator's workload A, whose fixed-ratio
	// throughput rises up to 1): the sample of 0.3 and seven better probes; the step beyond 1
	// counts as two worse probes and takes no period.
	k = kvstore.NewKnob(0.3, 0.1)
	r, n, _ = runKnob(t, k, func(i float64) float64 { return i })
	require.InDelta(t, 1, r, 1e-9)
	require.Equal(t, 8, n)
	// Flat: two equal probes end the round where it started.
	k = kvstore.NewKnob(0.5, 0.1)
	r, n, _ = runKnob(t, k, func(float64) float64 { return 7 })
	require.InDelta(t, 0.5, r, 1e-9)
	require.Equal(t, 3, n)
}

// TestCV: coefficient of variation.
func TestCV(t *testing.T) {
	t.Parallel()
	require.Zero(t, kvstore.CV(nil))
	require.Zero(t, kvstore.CV([]uint64{5, 5, 5}))
	require.InDelta(t, 1.0, kvstore.CV([]uint64{0, 2}), 1e-9)
}
