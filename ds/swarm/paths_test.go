package swarm_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/sim"
)

// pathSetup opens six clients on a three-replica simulated cluster whose clocks are up to
// 100µs apart and drift by up to 100 ppm, and returns the cluster and the clients sorted by
// clock offset, slowest clock first; wrap sees each client's Memory (index in opening order).
func pathSetup(t *testing.T, seed uint64, wrap func(i int, m farmem.Memory) farmem.Memory) (*sim.Sim, []*handle) {
	s := newSim(t, seed, 3, 100*time.Microsecond, 100)
	var hs []*handle
	s.Run(func() {
		addrs := create(t, s)
		for i := range 6 {
			hs = append(hs, open(t, s, i, addrs, func(m farmem.Memory) farmem.Memory { return wrap(i, m) }))
		}
	})
	sort.Slice(hs, func(a, b int) bool {
		oa, _ := s.ClockOf(hs[a].m.Info().ID)
		ob, _ := s.ClockOf(hs[b].m.Info().ID)
		return oa < ob
	})
	return s, hs
}

// interposed returns a wrapper that installs hooks[i] (set later) around client i's Memory.
func interposed(hooks []func(ctx context.Context, v farmemtest.Verb)) func(i int, m farmem.Memory) farmem.Memory {
	return func(i int, m farmem.Memory) farmem.Memory {
		return &farmemtest.Interposer{Memory: m, Before: func(ctx context.Context, v farmemtest.Verb) {
			if h := hooks[i]; h != nil {
				h(ctx, v)
			}
		}}
	}
}

// isWriteBackOf reports whether v posts a masked CAS installing a tag of client c.
func isWriteBackOf(v farmemtest.Verb, c farmem.ClientID) bool {
	if !v.Posted {
		return false
	}
	for _, op := range v.Batch.Ops {
		if op.Kind == farmem.OpMaskedCAS && maxreg.Tag(op.Swap).Client() == c {
			return true
		}
	}
	return false
}

// isLockPost reports whether v posts timestamp-lock CASes (plain CASes whose new word is a
// lock word in mode).
func isLockPost(v farmemtest.Verb, mode uint64) bool {
	if !v.Posted || len(v.Batch.Ops) == 0 {
		return false
	}
	cas := false
	for _, op := range v.Batch.Ops {
		if op.Kind == farmem.OpRead && mode == 0 {
			continue // a read-mode round also reads the metadata words behind its CASes
		}
		if op.Kind != farmem.OpCAS || op.Swap&1 != mode {
			return false
		}
		cas = true
	}
	return cas
}

// scriptPaths sets up the race the slow paths need: W2 (the fastest clock) writes m, which
// reaches only replica B (W2 is cut from A and C) and stays incomplete; W1 (the slowest clock)
// then writes a guess w below m, cut from C, so its read half sees m on B: a stale guess. While
// W1 is held just before writing m back, reader R (cut from B) reads w on A and C. onHold runs
// there; it returns once W1 may go on.
// after, if set, runs in the simulation once W1's write has returned.
func scriptPaths(t *testing.T, seed uint64, onHold func(s *sim.Sim, w1, r *handle), after func()) (w1, w2, r *handle) {
	hooks := make([]func(context.Context, farmemtest.Verb), 6)
	wrap := interposed(hooks)
	byIndex := map[farmem.ClientID]int{}
	s, hs := pathSetup(t, seed, func(i int, m farmem.Memory) farmem.Memory {
		byIndex[m.Info().ID] = i
		return wrap(i, m)
	})
	w1, w2 = hs[0], hs[5]
	for _, h := range hs[1:5] {
		if h.m.Info().Node != w1.m.Info().Node {
			r = h // on another compute node than W1, so that links can differ
			break
		}
	}
	require.NotNil(t, r)
	mem := s.Topology().MemoryNodes()
	A, B, C := mem[0], mem[1], mem[2]
	s.Run(func() {
		ctx := context.Background()
		id1, id2, idr := w1.m.Info().ID, w2.m.Info().ID, r.m.Info().ID
		require.NoError(t, s.Partition(id2, A))
		require.NoError(t, s.Partition(id2, C))
		require.NoError(t, s.Partition(id1, C))
		require.NoError(t, s.Partition(idr, B))
		held := false
		hooks[byIndex[id1]] = func(_ context.Context, v farmemtest.Verb) {
			if held || !isWriteBackOf(v, id2) {
				return
			}
			held = true
			onHold(s, w1, r)
		}
		g := s.NewGroup()
		g.Go(func() {
			err := w2.r.Write(ctx, encode(2))
			require.ErrorIs(t, err, farmem.ErrNodeDown, "W2 reaches only B")
		})
		require.NoError(t, s.Runtime().Sleep(ctx, 5*time.Microsecond))
		before := w1.m.Stats()
		require.NoError(t, w1.r.Write(ctx, encode(1)))
		w1WriteRT = w1.m.Stats().Sub(before).RoundTrips
		require.True(t, held, "W1's guess was not stale")
		require.NoError(t, g.Wait())
		if after != nil {
			after()
		}
	})
	return w1, w2, r
}

// w1WriteRT is the round trips of W1's write in the last scriptPaths.
var w1WriteRT uint64

// TestSlowPathRoundTrips is the package doc's schedule for a slow-path update's round trips:
// W2's tuple m reaches replica B alone, with no in-place copy; W1's guess w < m reads m on B
// (stale), chases m's buffer there, writes m back to A, locks w.ts in write mode (no reader
// interferes) and rewrites: 5 round trips with shared metadata words (the write-back is its
// own round trip), 4, the paper's §7.8 bound, with a word per writer lane (the write-back
// rides in the lock's first batch).
func TestSlowPathRoundTrips(t *testing.T) {
	for _, tc := range []struct {
		words int
		want  uint64
	}{{16, 5}, {256, 4}} {
		t.Run(fmt.Sprintf("words=%d", tc.words), func(t *testing.T) {
			defer func(p maxreg.Params) { params = p }(params)
			params.Words = tc.words
			w1, _, _ := scriptPaths(t, 13, func(*sim.Sim, *handle, *handle) {}, nil)
			st := w1.r.Stats()
			require.Equal(t, uint64(1), st.Unpublished, "W1 un-published its stale guess")
			t.Logf("W1: %d round trips; %+v; max register %+v", w1WriteRT, st, w1.r.Replicated().Stats())
			require.Equal(t, uint64(1), st.MaxWriteLockRounds)
			require.Equal(t, tc.want, w1WriteRT, "W1's round trips")
		})
	}
}

// TestReaderPinsStaleGuess: a reader reads a stale guess twice (on replicas the tuple that
// overtook it has not reached), locks its timestamp in read mode and returns it; the writer's
// write-mode lock then fails, and its write is the guess (Pinned).
func TestReaderPinsStaleGuess(t *testing.T) {
	var got []byte
	w1, _, r := scriptPaths(t, 11, func(s *sim.Sim, w1, r *handle) {
		var err error
		got, err = r.r.Read(context.Background())
		require.NoError(t, err)
	}, nil)
	require.Equal(t, encode(1), got, "the reader returns W1's guess")
	require.Equal(t, uint64(1), r.r.Stats().Locked)
	require.Equal(t, uint64(1), w1.r.Stats().Stale)
	require.Equal(t, uint64(1), w1.r.Stats().Pinned)
	require.Zero(t, w1.r.Stats().Unpublished)
}

// TestBothLocksFail: as above, but the reader's read-mode lock and the writer's write-mode
// lock race: the reader's CAS reaches A first and the writer's reaches C first (the reader's
// link to C is slow), so both fail. The reader goes on and returns a later tuple; the writer's
// write is its guess.
func TestBothLocksFail(t *testing.T) {
	var g *sim.Group
	var got []byte
	w1, _, r := scriptPaths(t, 12, func(s *sim.Sim, w1, r *handle) {
		ctx := context.Background()
		mem := s.Topology().MemoryNodes()
		// The reader's link to C becomes slow, and the writer may now reach C.
		require.NoError(t, s.DelayLink(r.m.Info().Node, mem[2], 20*time.Microsecond))
		require.NoError(t, s.Heal(w1.m.Info().ID, mem[2]))
		locking := false
		r.m.(*farmemtest.Interposer).Before = func(_ context.Context, v farmemtest.Verb) {
			if isLockPost(v, 0) {
				locking = true
			}
		}
		g = s.NewGroup()
		g.Go(func() {
			var err error
			got, err = r.r.Read(ctx)
			require.NoError(t, err)
		})
		for !locking {
			require.NoError(t, s.Runtime().Sleep(ctx, 200*time.Nanosecond))
		}
	}, func() { require.NoError(t, g.Wait()) })
	require.Equal(t, uint64(1), w1.r.Stats().Pinned, "the writer's lock failed")
	require.Equal(t, uint64(1), r.r.Stats().ReadLockFailed, "the reader's lock failed")
	require.Equal(t, encode(2), got, "the reader returns the tuple that overtook the guess")
}
