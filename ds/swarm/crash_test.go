package swarm_test

import (
	"context"
	"errors"
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

// TestClientCrashAtEachStep: a writer whose clock is the slowest (so its write takes the slow
// path: a stale guess, a write-back, the write-mode lock, the rewrite) crashes at its k-th
// verb of that write, for every k the write has (the first round trip, the in-place refresh,
// the chase and the write-back of the larger tuple, the lock, the rewrite, the background
// mark), while two writers and two readers keep going. Every other operation completes and
// the history (the victim's write an unknown outcome) is linearizable.
// The same with the fastest clock's writer, whose write takes the fast path (the first round
// trip, the in-place refresh, the background VERIFIED mark). Both with shared metadata words
// (16) and with a word per writer (where the write-back of the larger tuple rides in the lock
// round's batch, so the slow path has other verbs to be cut at).
func TestClientCrashAtEachStep(t *testing.T) {
	for _, words := range []int{16, ownWords} {
		t.Run(fmt.Sprintf("words=%d", words), func(t *testing.T) {
			defer func(p maxreg.Params) { params = p }(params)
			params.Words = words
			for _, slow := range []bool{true, false} {
				var steps []string
				for k := 1; ; k++ {
					reached, what := crashAt(t, k, slow, nil)
					if !reached {
						break
					}
					steps = append(steps, what)
				}
				require.NotEmpty(t, steps)
				t.Logf("slow path %v: crashed at each of %d verbs of the write: %v", slow, len(steps), steps)
			}
		})
	}
}

// TestReplicaCrashAtEachStep: as TestClientCrashAtEachStep, but at the victim's k-th verb
// one memory node crashes (the three in turn as k grows), the victim going on: its
// write completes on the other two, every other operation completes, and the history is
// linearizable. With a word per writer, on the slow path (the chase, the write-back riding
// in the lock round, the rewrite) and the fast path.
func TestReplicaCrashAtEachStep(t *testing.T) {
	defer func(p maxreg.Params) { params = p }(params)
	params.Words = ownWords
	for _, slow := range []bool{true, false} {
		var crashed []string
		for k := 1; ; k++ {
			j := (k - 1) % 3 // the replicas in turn
			reached, what := crashAt(t, k, slow, func(s *sim.Sim) error { return s.Crash(s.Topology().MemoryNodes()[j]) })
			if !reached {
				break
			}
			crashed = append(crashed, fmt.Sprintf("replica %d at %s", j, what))
		}
		require.GreaterOrEqual(t, len(crashed), 3, "every replica crashed once")
		t.Logf("slow path %v: %v", slow, crashed)
	}
}

// crashAt runs one crash at the victim's k-th verb of its write: of the victim itself, or,
// with crash set, what crash does (the victim going on, its write must then succeed). It
// reports whether the write had a k-th verb, and what that verb was.
func crashAt(t *testing.T, k int, slow bool, crash func(*sim.Sim) error) (bool, string) {
	hooks := make([]func(context.Context, farmemtest.Verb), 6)
	s, hs := pathSetup(t, 101, interposed(hooks)) // one seed: the same write, cut at each verb
	victim := hs[0]
	others := []*handle{hs[5], hs[4], hs[2], hs[3]} // writers, then readers
	if !slow {
		victim = hs[5]
		others = []*handle{hs[0], hs[1], hs[2], hs[3]}
	}
	vid := victim.m.Info().ID
	reached, what := false, ""
	ops := 25 // per other client
	if crash != nil {
		ops = 10 // the victim's write is at the start; then a few ops with the replica down
	}
	s.Run(func() {
		ctx := context.Background()
		reg := lincheck.Register[uint64]()
		h := reg.NewHistory(s.Runtime())
		counting, n := false, 0
		victim.m.(*farmemtest.Interposer).Before = func(_ context.Context, v farmemtest.Verb) {
			if !counting {
				return
			}
			n++
			if n == k {
				reached = true
				what = describe(v)
				if crash != nil {
					require.NoError(t, crash(s))
				} else {
					require.NoError(t, s.CrashClient(vid))
				}
			}
		}
		// Warm up: the others write, so that the victim's guess is stale.
		for _, o := range others[:2] {
			v := uint64(o.m.Info().ID)<<32 | 1
			op := h.Client(int(o.m.Info().ID)).Call(reg.Write(0, v))
			op.End(reg.Ack(), o.r.Write(ctx, encode(v)))
		}
		err := farmemtest.Parallel(s.Runtime(), 1+len(others), func(i int) error {
			if i == 0 {
				counting = true
				v := uint64(vid)<<32 | 1
				op := h.Client(int(vid)).Call(reg.Write(0, v))
				err := victim.r.Write(ctx, encode(v))
				counting = false
				if err != nil && crash != nil {
					return fmt.Errorf("victim's write with one replica down: %w", err)
				}
				if err != nil {
					op.Unknown()
					if !errors.Is(err, farmem.ErrNodeDown) {
						return err
					}
				} else {
					op.End(reg.Ack(), nil)
				}
				return nil
			}
			o := others[i-1]
			id := o.m.Info().ID
			c := h.Client(int(id))
			for j := range ops {
				if i <= 2 {
					v := uint64(id)<<32 | uint64(j+2)
					op := c.Call(reg.Write(0, v))
					err := o.r.Write(ctx, encode(v))
					op.End(reg.Ack(), err)
					if err != nil {
						return fmt.Errorf("writer %d: %w", id, err)
					}
				} else {
					op := c.Call(reg.Read(0))
					v, err := o.r.Read(ctx)
					if err != nil {
						return fmt.Errorf("reader %d: %w", id, err)
					}
					op.End(reg.Value(decode(t, v)), nil)
				}
				_ = s.Runtime().Sleep(ctx, time.Duration(j%3)*time.Microsecond)
			}
			return nil
		})
		require.NoError(t, err)
		h.Check(t)
	})
	if !reached && slow {
		st := victim.r.Stats()
		require.Equal(t, uint64(1), st.Stale, "the victim's uncut write took the slow path")
		require.Equal(t, uint64(1), st.Unpublished, "and re-executed its write")
	}
	if !reached && !slow {
		require.Equal(t, uint64(1), victim.r.Stats().Fast, "the victim's uncut write took the fast path")
	}
	return reached, what
}

// describe names a verb by its ops' kinds.
func describe(v farmemtest.Verb) string {
	s := ""
	for i, op := range v.Batch.Ops {
		if i > 0 {
			s += "+"
		}
		s += op.Kind.String()
		if op.Unsignaled {
			s += "(u)"
		}
	}
	return s
}
