package sim_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/sim"
)

// simple returns a cluster with a 1µs link, 100ns verbs and no other cost.
func simple(t *testing.T, memNodes, computeNodes int) *sim.Sim {
	m := queueModel(time.Microsecond, 100*time.Nanosecond)
	m.MemoryNodes, m.ComputeNodes = memNodes, computeNodes
	s, err := sim.New(m, 5)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func open1(t *testing.T, s *sim.Sim, node int) farmem.Memory {
	m, err := s.Open(context.Background(), farmem.ComputeID(node).Node())
	require.NoError(t, err)
	return m
}

// timeOf returns how long f took in virtual time.
func timeOf(s *sim.Sim, f func()) time.Duration {
	start := s.Now()
	f()
	return s.Now().Sub(start)
}

func TestPauseClient(t *testing.T) {
	s := simple(t, 1, 1)
	ctx := context.Background()
	a, b := open1(t, s, 1), open1(t, s, 1)
	s.Run(func() {
		var doneAt farmem.Time
		g := s.NewGroup()
		g.Go(func() {
			for range 10 {
				_, err := a.FAA(ctx, farmem.MakeAddr(1, base), 1)
				require.NoError(t, err)
			}
			doneAt = s.Now()
		})
		s.At(s.Now().Add(5*time.Microsecond), func() { require.NoError(t, s.PauseClient(a.Info().ID)) })
		s.At(s.Now().Add(100*time.Microsecond), func() { require.NoError(t, s.ResumeClient(a.Info().ID)) })
		// Another client of the same node is not paused.
		took := timeOf(s, func() {
			_ = b.Runtime().Sleep(ctx, 10*time.Microsecond)
			_, err := b.FAA(ctx, farmem.MakeAddr(1, base+8), 1)
			require.NoError(t, err)
		})
		require.Less(t, took, 20*time.Microsecond)
		require.NoError(t, g.Wait())
		// Ten FAAs take 21µs; the pause held the client from 5µs to 100µs.
		require.GreaterOrEqual(t, doneAt.Sub(sim.Epoch), 100*time.Microsecond)
		require.Less(t, doneAt.Sub(sim.Epoch), 125*time.Microsecond)
	})
}

func TestLinkFaults(t *testing.T) {
	s := simple(t, 2, 1)
	ctx := context.Background()
	c := open1(t, s, 1)
	buf := make([]byte, 8)
	s.Run(func() {
		base1, base2 := farmem.MakeAddr(1, base), farmem.MakeAddr(2, base)
		plain := timeOf(s, func() { require.NoError(t, c.Read(ctx, base1, buf)) })
		require.Equal(t, 2100*time.Nanosecond, plain)
		require.NoError(t, s.DelayLink(c.Info().Node, 1, 5*time.Microsecond))
		require.Equal(t, plain+10*time.Microsecond, timeOf(s, func() { require.NoError(t, c.Read(ctx, base1, buf)) }), "both ways delayed")
		require.Equal(t, plain, timeOf(s, func() { require.NoError(t, c.Read(ctx, base2, buf)) }), "another link")
		require.NoError(t, s.DelayLink(c.Info().Node, 1, 0))
		require.Equal(t, plain, timeOf(s, func() { require.NoError(t, c.Read(ctx, base1, buf)) }))

		require.NoError(t, s.CutLink(1, c.Info().Node))
		took := timeOf(s, func() { require.ErrorIs(t, c.Read(ctx, base1, buf), farmem.ErrNodeDown) })
		require.Equal(t, s.Topology().DownTimeout, took, "a cut link is silent until the down timeout")
		require.NoError(t, c.Read(ctx, base2, buf))
		require.NoError(t, s.HealLink(1, c.Info().Node))
		require.NoError(t, c.Read(ctx, base1, buf))
	})
}

func TestHangComputeNode(t *testing.T) {
	s := simple(t, 1, 2)
	ctx := context.Background()
	a, b := open1(t, s, 1), open1(t, s, 2)
	target := b.Info().Node
	require.NoError(t, s.Handle(target, 1, func(context.Context, farmem.Memory, farmem.ClientID, []byte) ([]byte, error) {
		return []byte("ok"), nil
	}))
	s.Run(func() {
		_, err := a.Call(ctx, target, 1, nil)
		require.NoError(t, err)
		require.NoError(t, s.Hang(target))
		took := timeOf(s, func() {
			_, err := a.Call(ctx, target, 1, nil)
			require.ErrorIs(t, err, farmem.ErrNodeDown)
		})
		require.Equal(t, s.Topology().DownTimeout, took)
		require.ErrorIs(t, a.Read(ctx, b.Info().Slice, make([]byte, 8)), farmem.ErrNodeDown)
		// The hung node's own client is frozen until Resume.
		var resumedAt farmem.Time
		g := s.NewGroup()
		g.Go(func() {
			_, err := b.FAA(ctx, farmem.MakeAddr(1, base), 1)
			require.NoError(t, err)
			resumedAt = s.Now()
		})
		require.NoError(t, a.Runtime().Sleep(ctx, time.Millisecond))
		require.Zero(t, resumedAt, "a client of a hung node made progress")
		require.NoError(t, s.Resume(target))
		require.NoError(t, g.Wait())
		require.NotZero(t, resumedAt)
		_, err = a.Call(ctx, target, 1, nil)
		require.NoError(t, err)
	})
}

func TestSetTearing(t *testing.T) {
	m := sim.ConnectX3()
	m.MemoryNodes, m.ComputeNodes = 2, 2
	s, err := sim.New(m, 9)
	require.NoError(t, err)
	defer s.Close()
	ctx := context.Background()
	w, r := open1(t, s, 1), open1(t, s, 2)
	torn := func(node farmem.NodeID) int {
		n := 0
		a := farmem.MakeAddr(node, base)
		s.Run(func() {
			done := false
			g := s.NewGroup()
			g.Go(func() {
				buf := make([]byte, 512)
				for v := byte(1); !done; v++ {
					for i := range buf {
						buf[i] = v
					}
					require.NoError(t, w.Write(ctx, a, buf))
				}
			})
			g.Go(func() {
				defer func() { done = true }()
				buf := make([]byte, 512)
				for range 500 {
					require.NoError(t, r.Read(ctx, a, buf))
					for _, x := range buf {
						if x != buf[0] {
							n++
							break
						}
					}
				}
			})
			require.NoError(t, g.Wait())
		})
		return n
	}
	require.NoError(t, s.SetTearing(2, true))
	require.Zero(t, torn(1), "node 1 does not tear")
	n := torn(2)
	t.Logf("%d of 500 reads torn on node 2", n)
	require.Positive(t, n)
}

func TestRunDeadlock(t *testing.T) {
	s := simple(t, 1, 1)
	c := open1(t, s, 1)
	s.Run(func() {
		_, err := c.Wait(context.Background(), c.Info().Slice, func(v uint64) bool { return v == 1 })
		require.ErrorIs(t, err, sim.ErrDeadlock)
		g := s.NewGroup()
		g.Go(func() {
			_, _ = c.Wait(context.Background(), c.Info().Slice.Add(8), func(v uint64) bool { return v == 1 })
		})
		require.ErrorIs(t, g.Wait(), sim.ErrDeadlock)
	})
}

func TestContexts(t *testing.T) {
	s := simple(t, 1, 1)
	c := open1(t, s, 1)
	rt := c.Runtime()
	s.Run(func() {
		ctx, cancel := rt.WithTimeout(context.Background(), 50*time.Microsecond)
		defer cancel()
		dl, ok := ctx.Deadline()
		require.True(t, ok)
		require.Equal(t, int64(sim.Epoch)+int64(50*time.Microsecond), dl.UnixNano())
		// A standard context derived from a simulated one ends at the same virtual instant.
		child, stop := context.WithCancel(ctx)
		defer stop()
		took := timeOf(s, func() {
			_, err := c.Wait(child, c.Info().Slice, func(v uint64) bool { return v == 1 })
			require.ErrorIs(t, err, context.DeadlineExceeded)
		})
		require.Equal(t, 50*time.Microsecond, took)
		select {
		case <-child.Done():
		default:
			t.Fatal("the derived context is not done")
		}
		// Cancel ends a Sleep at once.
		ctx2, cancel2 := rt.WithTimeout(context.Background(), time.Hour)
		s.At(s.Now().Add(3*time.Microsecond), cancel2)
		took = timeOf(s, func() { require.ErrorIs(t, rt.Sleep(ctx2, time.Minute), context.Canceled) })
		require.Equal(t, 3*time.Microsecond, took)
		// A nested timeout keeps its parent's earlier deadline.
		ctx3, cancel3 := rt.WithTimeout(ctx2, time.Second)
		defer cancel3()
		require.ErrorIs(t, ctx3.Err(), context.Canceled)
		// AfterFunc and Stop.
		fired := false
		tm := rt.AfterFunc(time.Microsecond, func() { fired = true })
		require.True(t, tm.Stop())
		require.False(t, tm.Stop())
		require.NoError(t, rt.Sleep(context.Background(), 2*time.Microsecond))
		require.False(t, fired)
		rt.AfterFunc(time.Microsecond, func() { fired = true })
		require.NoError(t, rt.Sleep(context.Background(), 2*time.Microsecond))
		require.True(t, fired)
	})
}

func TestCoresAndHandlers(t *testing.T) {
	m := sim.Model{Shape: sim.Shape{MaxHandlers: 2, ComputeNodes: 2}, Cores: 2, CallCPU: 10 * time.Microsecond}
	s, err := sim.New(m, 1)
	require.NoError(t, err)
	defer s.Close()
	ctx := context.Background()
	target := farmem.ComputeID(2).Node()
	require.NoError(t, s.Handle(target, 1, func(ctx context.Context, hm farmem.Memory, _ farmem.ClientID, _ []byte) ([]byte, error) {
		hm.Runtime().Compute(5 * time.Microsecond)
		return nil, nil
	}))
	s.Run(func() {
		// Four CPU jobs of 1ms on two cores take 2ms.
		c := open1(t, s, 1)
		took := timeOf(s, func() {
			require.NoError(t, s.Parallel(4, func(int) { c.Runtime().Compute(time.Millisecond) }))
		})
		require.Equal(t, 2*time.Millisecond, took)
		r := s.Report()
		var busy time.Duration
		for _, core := range r.Cores {
			if core.Node == c.Info().Node {
				busy += core.Busy
				require.InDelta(t, 1.0, core.Utilisation, 0.01)
			}
		}
		require.Equal(t, 4*time.Millisecond, busy)
		// Six Calls to a node running two handlers at once, 15µs of CPU each on two cores:
		// three rounds.
		cs := make([]farmem.Memory, 6)
		for i := range cs {
			cs[i] = open1(t, s, 1)
		}
		took = timeOf(s, func() {
			require.NoError(t, s.Parallel(6, func(i int) {
				_, err := cs[i].Call(ctx, target, 1, nil)
				require.NoError(t, err)
			}))
		})
		require.Equal(t, 45*time.Microsecond, took)
	})
}

func TestCallErrors(t *testing.T) {
	s := simple(t, 1, 2)
	ctx := context.Background()
	c := open1(t, s, 1)
	target := farmem.ComputeID(2).Node()
	require.NoError(t, s.Handle(target, 1, func(context.Context, farmem.Memory, farmem.ClientID, []byte) ([]byte, error) {
		panic("boom")
	}))
	s.Run(func() {
		_, err := c.Call(ctx, target, 1, nil)
		require.ErrorIs(t, err, farmem.ErrRemote)
		require.ErrorContains(t, err, "boom")
		short, cancel := c.Runtime().WithTimeout(ctx, time.Microsecond)
		defer cancel()
		_, err = c.Call(short, target, 1, nil)
		require.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
	})
}

// A context below context.WithoutCancel finds the simulated context above by value but is not
// bound to it: it outlives that context's virtual deadline, both as a Wait's context and as the
// parent of a new timeout, which gets its own deadline rather than the cut-off one.
func TestContextWithoutCancel(t *testing.T) {
	s := simple(t, 1, 1)
	c := open1(t, s, 1)
	rt := c.Runtime()
	s.Run(func() {
		ctx, cancel := rt.WithTimeout(context.Background(), 10*time.Microsecond)
		defer cancel()
		cut := context.WithoutCancel(ctx)
		took := timeOf(s, func() { require.NoError(t, rt.Sleep(cut, 50*time.Microsecond)) })
		require.Equal(t, 50*time.Microsecond, took, "a sleep on the cut context outlived the deadline above the cut")
		require.ErrorIs(t, ctx.Err(), context.DeadlineExceeded)
		below, stop := context.WithCancel(cut)
		defer stop()
		took = timeOf(s, func() { require.NoError(t, rt.Sleep(below, 20*time.Microsecond)) })
		require.Equal(t, 20*time.Microsecond, took)
		own, cancelOwn := rt.WithTimeout(cut, 30*time.Microsecond)
		defer cancelOwn()
		require.NoError(t, own.Err(), "a timeout below the cut does not inherit the ended context's deadline")
		took = timeOf(s, func() {
			_, err := c.Wait(own, c.Info().Slice, func(v uint64) bool { return v == 1 })
			require.ErrorIs(t, err, context.DeadlineExceeded)
		})
		require.Equal(t, 30*time.Microsecond, took)
	})
}
