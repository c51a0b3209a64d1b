package lincheck

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
)

// randomLegal returns a linearizable register history: operations with random intervals take
// effect at a random instant inside them (unknown ones possibly never), in that order.
func randomLegal(rng *rand.Rand, n int) []cop[RegisterInput[uint64], RegisterOutput[uint64]] {
	reg := Register[uint64]()
	type pending struct {
		c  cop[RegisterInput[uint64], RegisterOutput[uint64]]
		at farmem.Time
		no bool // an unknown operation that never took effect
	}
	ps := make([]pending, n)
	for i := range ps {
		call := farmem.Time(rng.IntN(200))
		ret := call + farmem.Time(1+rng.IntN(30))
		var in RegisterInput[uint64]
		switch rng.IntN(3) {
		case 0:
			in = reg.Read(0)
		case 1:
			in = reg.Write(0, uint64(1+rng.IntN(4)))
		default:
			in = reg.CAS(0, uint64(rng.IntN(5)), uint64(1+rng.IntN(4)))
		}
		p := pending{c: cop[RegisterInput[uint64], RegisterOutput[uint64]]{client: i, call: call, ret: ret, in: in, oc: OK}}
		p.at = call + farmem.Time(rng.IntN(int(ret-call)+1))
		if rng.IntN(8) == 0 {
			p.c.oc = Unknown
			p.no = rng.IntN(2) == 0
			p.at = call + farmem.Time(rng.IntN(60)) // may take effect after its "return"
		}
		ps[i] = p
	}
	slices.SortStableFunc(ps, func(a, b pending) int { return int(a.at - b.at) })
	var state uint64
	out := make([]cop[RegisterInput[uint64], RegisterOutput[uint64]], 0, n)
	for _, p := range ps {
		if !p.no {
			p.c.out, state = reg.apply(state, p.c.in)
		}
		out = append(out, p.c)
	}
	return out
}

func (r *RegisterModel[V]) apply(s V, in RegisterInput[V]) (RegisterOutput[V], V) {
	o, next := r.Model.apply(s, in)
	return o, next.(V)
}

// The shrinker's steps keep a legal history legal, which is why what they leave of an illegal
// one is a counterexample: every event prefix and every start cut of random legal histories is
// legal.
func TestShrinkStepsAreSound(t *testing.T) {
	m := Register[uint64]().Model
	rng := rand.New(rand.NewPCG(1, 2))
	legal := func(g group[RegisterInput[uint64], RegisterOutput[uint64]]) bool {
		res, _, _ := m.run([]group[RegisterInput[uint64], RegisterOutput[uint64]]{g}, false, 10*time.Second)
		return res == porcupine.Ok
	}
	cuts := 0
	for range 200 {
		ops := m.normalize(randomLegal(rng, 4+rng.IntN(10)))
		require.True(t, legal(group[RegisterInput[uint64], RegisterOutput[uint64]]{ops: ops}))
		callAt, retAt, nev := eventOrder(ops)
		for j := 1; j <= nev; j++ {
			p := m.prefix(ops, callAt, retAt, j)
			require.True(t, legal(group[RegisterInput[uint64], RegisterOutput[uint64]]{ops: p}), "prefix %d of %v", j, ops)
			if state, rest, ok := m.cutAt(ops, callAt, retAt, j, time.Now().Add(time.Second)); ok {
				cuts++
				g := group[RegisterInput[uint64], RegisterOutput[uint64]]{start: state, hasStart: true}
				for _, i := range rest {
					g.ops = append(g.ops, ops[i])
				}
				require.True(t, legal(g), "start cut at %d of %v", j, ops)
				// And composed with every end cut, as the shrinker does.
				for end := j; end <= nev; end++ {
					var sub []cop[RegisterInput[uint64], RegisterOutput[uint64]]
					var sc, sr []int
					for _, i := range rest {
						sub, sc, sr = append(sub, ops[i]), append(sc, callAt[i]), append(sr, retAt[i])
					}
					g.ops = m.prefix(sub, sc, sr, end)
					require.True(t, legal(g), "start cut at %d, end cut at %d of %v", j, end, ops)
				}
			}
		}
	}
	require.Greater(t, cuts, 100)
}

// Start cuts find the single state earlier operations leave, even with straddling ones.
func TestCutStartState(t *testing.T) {
	r := Register[uint64]()
	m := r.Model
	c := func(call, ret farmem.Time, in RegisterInput[uint64], out RegisterOutput[uint64]) cop[RegisterInput[uint64], RegisterOutput[uint64]] {
		return cop[RegisterInput[uint64], RegisterOutput[uint64]]{call: call, ret: ret, in: in, out: out, oc: OK}
	}
	ops := []cop[RegisterInput[uint64], RegisterOutput[uint64]]{
		c(0, 10, r.Write(0, 1), r.Ack()),
		c(5, 15, r.Write(0, 2), r.Ack()),
		c(20, 30, r.Read(0), r.Value(2)),            // pins the state to 2
		c(25, 60, r.Write(0, 3), r.Ack()),           // straddles a cut at 30
		c(40, 50, r.Read(0), r.Value(9)),            // the violation
		c(45, 55, r.CAS(0, 2, 4), r.Swapped(false)), // more context
		c(56, 58, r.Read(0), r.Value(3)),
	}
	callAt, retAt, _ := eventOrder(ops)
	// Cut just after the read that returned 2: the state is 2.
	state, rest, ok := m.cutAt(ops, callAt, retAt, retAt[2]+1, time.Now().Add(time.Second))
	require.True(t, ok)
	require.Equal(t, uint64(2), state)
	require.Equal(t, []int{3, 4, 5, 6}, rest)
	// Cut before that read: writes 1 and 2 are concurrent, so 1 or 2 may be the state.
	_, _, ok = m.cutAt(ops, callAt, retAt, retAt[1]+1, time.Now().Add(time.Second))
	require.False(t, ok)
	// With a straddling read of 2, it may be linearized before the cut or after: two
	// configurations with one state, which is not enough.
	ops[3] = c(25, 60, r.Read(0), r.Value(2))
	callAt, retAt, _ = eventOrder(ops)
	_, _, ok = m.cutAt(ops, callAt, retAt, retAt[2]+1, time.Now().Add(time.Second))
	require.False(t, ok)
}
