package swarm_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/lincheck"
	"github.com/farmem/farmem/sim"
)

// ownWords is a metadata word per writer lane: 128 lanes over two compute nodes spread over
// 128 words (maxreg's wordOf interleaves the nodes), so every writer owns its word and a
// slow-path write-back rides in the timestamp lock's first batch. (Params' defaults, 64
// words for 128 lanes, share each word between two lanes.)
const ownWords = 128

// ownRun is one scripted run in the own-words configuration: W2 (the fastest clock) writes a
// tuple m that reaches replica B alone; W1 (the slowest clock) writes a guess w below m,
// whose read half reads m on B (W1's link to C is slow, so A and B answer first): a stale
// guess. W1 is held just before posting its lock round (the write-back of m with its
// TRYLOCK(w.ts, WRITE)) while the scenario runs; the reader R is cut from B, so it reads w
// on A and C. Every operation is recorded in a lincheck register history, a last read by
// another client ends the run, and the history is checked.
type ownRun struct {
	t          *testing.T
	s          *sim.Sim
	w1, w2, r  *handle
	fin        *handle
	A, B, C    farmem.NodeID
	reg        *lincheck.RegisterModel[uint64]
	h          *lincheck.History[lincheck.RegisterInput[uint64], lincheck.RegisterOutput[uint64]]
	w1RT       uint64 // round trips of W1's write
	maxReadRT  uint64 // the most round trips one recorded read took
	lastRead   uint64 // the last read's value
	readValues []uint64
}

// read is hd's Read, recorded; it counts its round trips.
func (or *ownRun) read(hd *handle) uint64 {
	before := hd.m.Stats()
	op := or.h.Client(int(hd.m.Info().ID)).Call(or.reg.Read(0))
	v, err := hd.r.Read(context.Background())
	if err != nil {
		op.End(or.reg.Value(0), err)
		require.NoError(or.t, err)
	}
	x := decode(or.t, v)
	op.End(or.reg.Value(x), nil)
	or.maxReadRT = max(or.maxReadRT, hd.m.Stats().Sub(before).RoundTrips)
	or.readValues = append(or.readValues, x)
	return x
}

// runOwn runs one own-words scenario with seed: onHold runs while W1 is held (it returns when
// W1 may post its lock round); after, if set, runs once W1's write has returned (to wait for
// what onHold started).
func runOwn(t *testing.T, seed uint64, onHold func(or *ownRun), after func(or *ownRun)) *ownRun {
	defer func(p maxreg.Params) { params = p }(params)
	params.Words = ownWords
	// Clocks up to 100µs apart, drifting by up to 100 ppm (pathSetup).
	hooks := make([]func(context.Context, farmemtest.Verb), 6)
	wrap := interposed(hooks)
	byIndex := map[farmem.ClientID]int{}
	s, hs := pathSetup(t, seed, func(i int, m farmem.Memory) farmem.Memory {
		byIndex[m.Info().ID] = i
		return wrap(i, m)
	})
	for _, hd := range hs {
		require.True(t, hd.r.Replicated().OwnWord(), "client %d shares its metadata word", hd.m.Info().ID)
	}
	reg := lincheck.Register[uint64]()
	or := &ownRun{t: t, s: s, w1: hs[0], w2: hs[5], reg: reg, h: reg.NewHistory(s.Runtime())}
	for _, hd := range hs[1:5] {
		switch {
		case or.r == nil && hd.m.Info().Node != or.w1.m.Info().Node:
			or.r = hd // on another compute node than W1, so that their links can differ
		case or.fin == nil:
			or.fin = hd
		}
	}
	require.NotNil(t, or.r)
	mem := s.Topology().MemoryNodes()
	or.A, or.B, or.C = mem[0], mem[1], mem[2]
	w1n := or.w1.m.Info().Node
	s.Run(func() {
		ctx := context.Background()
		id1, id2, idr := or.w1.m.Info().ID, or.w2.m.Info().ID, or.r.m.Info().ID
		require.NoError(t, s.Partition(id2, or.A))
		require.NoError(t, s.Partition(id2, or.C))
		require.NoError(t, s.Partition(idr, or.B))
		require.NoError(t, s.DelayLink(w1n, or.C, 5*time.Microsecond))
		held := false
		hooks[byIndex[id1]] = func(_ context.Context, v farmemtest.Verb) {
			if v.Posted && len(v.Batch.Ops) == 1 && v.Batch.Ops[0].Kind == farmem.OpRead {
				// W1's chase of m on B: first let W1's guess reach C (and its reply come
				// back), so that W1 knows its word there and its lock round (which carries
				// the write-back of m) CASes all three replicas.
				for or.w1.r.Replicated().Known()[2] == 0 {
					require.NoError(t, s.Runtime().Sleep(ctx, time.Microsecond))
				}
			}
			if held || !isWriteBackOf(v, id2) {
				return
			}
			held = true
			onHold(or)
		}
		g := s.NewGroup()
		g.Go(func() {
			op := or.h.Client(int(id2)).Call(reg.Write(0, 2))
			err := or.w2.r.Write(ctx, encode(2))
			op.End(reg.Ack(), err)
			require.ErrorIs(t, err, farmem.ErrNodeDown, "W2 reaches only B")
		})
		require.NoError(t, s.Runtime().Sleep(ctx, 5*time.Microsecond))
		before := or.w1.m.Stats()
		op := or.h.Client(int(id1)).Call(reg.Write(0, 1))
		err := or.w1.r.Write(ctx, encode(1))
		op.End(reg.Ack(), err)
		require.NoError(t, err)
		or.w1RT = or.w1.m.Stats().Sub(before).RoundTrips
		require.True(t, held, "W1's guess was not stale")
		require.Equal(t, uint64(1), or.w1.r.Stats().Stale)
		if after != nil {
			after(or)
		}
		require.NoError(t, g.Wait())
		// Every link back to normal; a last read by another client.
		for _, n := range mem {
			for _, hd := range []*handle{or.w1, or.r} {
				require.NoError(t, s.DelayLink(hd.m.Info().Node, n, 0))
				require.NoError(t, s.Heal(hd.m.Info().ID, n))
			}
		}
		or.lastRead = or.read(or.fin)
		or.h.Check(t)
	})
	return or
}

// ownTally sums what the own-words scenarios counted.
type ownTally struct {
	stale, unpublished, pinned, locked, readLockFailed, bothFailed, probed uint64
	maxWriteRT, maxReadRT, maxIter                                         uint64
}

func (ta *ownTally) add(or *ownRun, bothFailed bool) {
	w, r := or.w1.r.Stats(), or.r.r.Stats()
	ta.stale += w.Stale
	ta.unpublished += w.Unpublished
	ta.pinned += w.Pinned
	ta.locked += r.Locked
	ta.readLockFailed += r.ReadLockFailed
	ta.probed += r.ReadLockProbed
	if bothFailed {
		ta.bothFailed++
	}
	ta.maxWriteRT = max(ta.maxWriteRT, or.w1RT)
	ta.maxReadRT = max(ta.maxReadRT, or.maxReadRT)
	ta.maxIter = max(ta.maxIter, r.MaxReadIterations, or.fin.r.Stats().MaxReadIterations)
}

func (ta *ownTally) String() string {
	return fmt.Sprintf("stale guesses %d, writer un-published %d, writer found its guess pinned %d, reader pinned (read-mode lock won) %d, read-mode lock failed %d, both locks failed on one timestamp %d, reader learned the larger tuple from its lock round's metadata read %d; max update round trips %d, max read round trips %d, max read iterations %d",
		ta.stale, ta.unpublished, ta.pinned, ta.locked, ta.readLockFailed, ta.bothFailed, ta.probed, ta.maxWriteRT, ta.maxReadRT, ta.maxIter)
}

// ownStale: nobody interferes; W1 writes m back with its write-mode lock (one round), wins
// it and rewrites: 1 + 1 (chase of m, no in-place copy) + 1 + 1 = 4 round trips, the §7.8
// bound.
func ownStale(t *testing.T, seed uint64) *ownRun {
	or := runOwn(t, seed, func(*ownRun) {}, nil)
	st := or.w1.r.Stats()
	require.Equal(t, uint64(1), st.Unpublished, "W1 un-published its stale guess")
	require.Equal(t, uint64(1), st.MaxWriteLockRounds)
	require.Equal(t, uint64(4), or.w1RT, "W1's round trips")
	require.Equal(t, uint64(1), or.lastRead, "W1's rewrite is above m")
	return or
}

// ownPinned: R reads w twice on A and C and pins it (TRYLOCK(w.ts, READ) wins on A and C)
// before W1 posts its lock round; W1's lock then finds (w.ts, READ) on A and fails: its write
// is the guess.
func ownPinned(t *testing.T, seed uint64) *ownRun {
	var got uint64
	or := runOwn(t, seed, func(or *ownRun) { got = or.read(or.r) }, nil)
	require.Equal(t, uint64(1), got, "R returns W1's guess")
	require.Equal(t, uint64(1), or.r.r.Stats().Locked)
	require.Equal(t, uint64(1), or.w1.r.Stats().Pinned)
	require.Zero(t, or.w1.r.Stats().Unpublished)
	require.Equal(t, uint64(2), or.lastRead, "m, written back by W1's lock round, is above w")
	return or
}

// ownBothFail: R's and W1's locks on w.ts race so that both fail: R's read-mode CAS reaches A
// first (W1's link to A is slowed by 2µs) and W1's write-mode CAS reaches C first (R's link to
// C is slowed by 20µs); W1 waits for B and A (C's reply is slower still) and finds A locked in
// read mode; R waits for A and C and finds C locked in write mode. R goes on and returns m;
// W1's write is its guess.
func ownBothFail(t *testing.T, seed uint64) *ownRun {
	var g *sim.Group
	var got uint64
	or := runOwn(t, seed, func(or *ownRun) {
		s, ctx := or.s, context.Background()
		w1n, rn := or.w1.m.Info().Node, or.r.m.Info().Node
		require.NoError(t, s.DelayLink(w1n, or.A, 2*time.Microsecond))
		require.NoError(t, s.DelayLink(w1n, or.C, 3*time.Microsecond))
		require.NoError(t, s.DelayLink(rn, or.C, 20*time.Microsecond))
		locking := false
		or.r.m.(*farmemtest.Interposer).Before = func(_ context.Context, v farmemtest.Verb) {
			if isLockPost(v, 0) {
				locking = true
			}
		}
		g = s.NewGroup()
		g.Go(func() { got = or.read(or.r) })
		for !locking {
			require.NoError(t, s.Runtime().Sleep(ctx, 100*time.Nanosecond))
		}
	}, func(*ownRun) { require.NoError(t, g.Wait()) })
	require.Equal(t, uint64(1), or.w1.r.Stats().Pinned, "W1's lock failed")
	require.Equal(t, uint64(1), or.r.r.Stats().ReadLockFailed, "R's lock failed")
	require.Equal(t, uint64(2), got, "R returns the tuple that overtook the guess")
	require.Equal(t, uint64(2), or.lastRead)
	return or
}

// ownProbe is the reader's metadata read behind its lock CASes: W1's lock round reaches B at
// once but A only 80µs later and C 120µs later (W1's links to them are slowed), so W1 wins its
// lock on B and A. R reads w twice on A and
// C, then its read-mode lock round reaches B and C (its link to B healed, A cut for that
// round): B holds (w.ts, WRITE), so the lock fails, and the metadata words read right behind
// that CAS show m. R's next M read is answered by A and C (R's link to B slowed by 30µs),
// neither of which holds m yet, which the test checks on the words they returned; the read
// still returns m, learned from the lock round, chasing m's buffer on B and writing it back.
// Without that metadata read, R would read w a third time: the iteration bound's case.
func ownProbe(t *testing.T, seed uint64) *ownRun {
	var g *sim.Group
	var got uint64
	var checked bool
	or := runOwn(t, seed, func(or *ownRun) {
		s := or.s
		w1n, rn, idr := or.w1.m.Info().Node, or.r.m.Info().Node, or.r.m.Info().ID
		id2 := or.w2.m.Info().ID
		require.NoError(t, s.DelayLink(w1n, or.A, 80*time.Microsecond))
		require.NoError(t, s.DelayLink(w1n, or.C, 120*time.Microsecond))
		phase := 0
		var third *farmem.Batch
		or.r.m.(*farmemtest.Interposer).Before = func(_ context.Context, v farmemtest.Verb) {
			if !v.Posted {
				return
			}
			switch {
			case phase == 0 && isLockPost(v, 0):
				require.NoError(t, s.Heal(idr, or.B))
				require.NoError(t, s.Partition(idr, or.A))
				phase = 1
			case phase == 1:
				require.NoError(t, s.Heal(idr, or.A))
				require.NoError(t, s.DelayLink(rn, or.B, 30*time.Microsecond))
				third, phase = v.Batch, 2
			case phase == 2:
				// The M read's replies from A and C (the majority it waited for) held no
				// tuple of W2's.
				phase = 3
				words := 8 * ownWords
				for _, op := range third.Ops {
					n := op.Addr.Node()
					if op.Kind != farmem.OpRead || (n != or.A && n != or.C) || len(op.Buf) < words {
						continue
					}
					for w := 0; w < words; w += 8 {
						tag := maxreg.Tag(binary.LittleEndian.Uint64(op.Buf[w:]))
						require.NotEqual(t, id2, tag.Client(), "replica %v already held m", n)
					}
					checked = true
				}
			}
		}
		g = s.NewGroup()
		g.Go(func() { got = or.read(or.r) })
	}, func(*ownRun) { require.NoError(t, g.Wait()) })
	require.True(t, checked, "R's third M read was not seen")
	st := or.r.r.Stats()
	require.Equal(t, uint64(1), st.ReadLockFailed, "R's lock failed")
	require.Equal(t, uint64(1), st.ReadLockProbed, "R learned m from its lock round")
	require.Equal(t, uint64(2), got, "R returns m")
	require.Equal(t, uint64(4), st.MaxReadIterations, "w, w (lock failed), m, m (locked)")
	require.Equal(t, uint64(1), or.w1.r.Stats().Unpublished, "W1 won its lock")
	require.Equal(t, uint64(1), or.lastRead)
	return or
}

// TestOwnWordsSlowPaths forces each slow path of Safe-Guess in the own-words configuration
// (a metadata word per writer, the layout of the 4-round-trip bound), on clocks up to 100µs
// apart drifting by up to 100 ppm, with tearing and jitter, for three seeds each: a stale
// guess the writer un-publishes, a guess a reader pins, both locks failing on one timestamp,
// and a reader that learns the larger tuple from the metadata read of its failed lock round.
// Each path is counted (every count must be positive), every history is linearizable, every
// update takes at most 4 round trips and every read at most 2n+1 = 5 iterations for the two
// writers whose tuples can be read; the maxima are logged.
func TestOwnWordsSlowPaths(t *testing.T) {
	ta := &ownTally{}
	for seed := uint64(1); seed <= 3; seed++ {
		ta.add(ownStale(t, seed), false)
		ta.add(ownPinned(t, seed), false)
		ta.add(ownBothFail(t, seed), true)
		ta.add(ownProbe(t, seed), false)
	}
	t.Log(ta.String())
	require.NotZero(t, ta.stale, "stale guess")
	require.NotZero(t, ta.unpublished, "writer un-published")
	require.NotZero(t, ta.pinned, "writer found its guess pinned")
	require.NotZero(t, ta.locked, "reader pinned a guess")
	require.NotZero(t, ta.bothFailed, "both locks failed")
	require.NotZero(t, ta.readLockFailed, "read-mode lock failed")
	require.NotZero(t, ta.probed, "reader's metadata read behind its lock")
	require.LessOrEqual(t, ta.maxWriteRT, uint64(4), "update round trips beyond the paper's 4")
	require.LessOrEqual(t, ta.maxIter, uint64(2*2+1), "read iterations beyond 2n+1")
}
