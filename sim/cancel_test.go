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

// TestWithCancelWakesInTheSameEvent: a simulated goroutine parked on a Sim.WithCancel context
// wakes at the virtual instant another simulated goroutine cancels it, while the canceler and
// a third goroutine keep the simulation busy; a child context inherits its parent's virtual
// deadline, and canceling the parent ends the child too.
func TestWithCancelWakesInTheSameEvent(t *testing.T) {
	run := func(seed uint64) (woke, childEnd time.Duration, childErr error) {
		s, err := sim.New(sim.ConnectX6(), seed)
		require.NoError(t, err)
		defer s.Close()
		s.Run(func() {
			rt := s.Runtime()
			t0 := rt.Now()
			ctx, cancel := s.WithCancel(context.Background())
			g := s.NewGroup()
			g.Go(func() {
				err := rt.Sleep(ctx, time.Hour)
				require.ErrorIs(t, err, context.Canceled)
				woke = rt.Now().Sub(t0)
			})
			g.Go(func() {
				_ = rt.Sleep(context.Background(), time.Millisecond)
				cancel()
				// Keep virtual time moving in small steps, as a closed-loop client would.
				for range 2000 {
					_ = rt.Sleep(context.Background(), time.Microsecond)
				}
			})
			// A child of a context with a virtual deadline ends at that deadline.
			tctx, tcancel := rt.WithTimeout(context.Background(), 500*time.Microsecond)
			defer tcancel()
			child, ccancel := s.WithCancel(tctx)
			defer ccancel()
			dl, ok := child.Deadline()
			require.True(t, ok)
			require.Equal(t, farmem.Time(dl.UnixNano()).Sub(t0), 500*time.Microsecond)
			childErr = rt.Sleep(child, time.Hour)
			childEnd = rt.Now().Sub(t0)
			require.NoError(t, g.Wait())
		})
		return woke, childEnd, childErr
	}
	woke, childEnd, childErr := run(1)
	require.Equal(t, time.Millisecond, woke, "woken in the canceling event")
	require.Equal(t, 500*time.Microsecond, childEnd)
	require.True(t, errors.Is(childErr, context.DeadlineExceeded), "child ended by its parent's deadline: %v", childErr)
	w2, c2, _ := run(1)
	require.Equal(t, woke, w2)
	require.Equal(t, childEnd, c2)
}

// TestWithCancelParentCancel: canceling a Sim.WithCancel context ends its Sim.WithCancel
// children in the same event, and the children report context.Canceled.
func TestWithCancelParentCancel(t *testing.T) {
	s, err := sim.New(sim.ConnectX6(), 3)
	require.NoError(t, err)
	defer s.Close()
	s.Run(func() {
		rt := s.Runtime()
		parent, cancel := s.WithCancel(context.Background())
		child, ccancel := s.WithCancel(parent)
		defer ccancel()
		_, ok := child.Deadline()
		require.False(t, ok, "no deadline of its own")
		t0 := rt.Now()
		g := s.NewGroup()
		g.Go(func() {
			_ = rt.Sleep(context.Background(), 2*time.Millisecond)
			cancel()
		})
		require.ErrorIs(t, rt.Sleep(child, time.Hour), context.Canceled)
		require.Equal(t, 2*time.Millisecond, rt.Now().Sub(t0))
		require.NoError(t, g.Wait())
	})
}
