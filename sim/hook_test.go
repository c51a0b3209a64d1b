package sim_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/sim"
)

// TestCompletionHookFromBlockedCoroutine: a batch's completion hook (Pending.Then, which starts
// the hook with Runtime.Go) fires while the goroutine that posted it is blocked in a Sleep, so
// the completion event runs on the stack of whichever goroutine drives the simulation. The
// hook's goroutine must start as the posting goroutine's (it once deadlocked: the driving
// goroutine was taken for a foreign one and waited for a token it held itself).
func TestCompletionHookFromBlockedCoroutine(t *testing.T) {
	m := sim.ConnectX3()
	m.MemoryNodes, m.ComputeNodes, m.MemorySize = 2, 2, 1<<20
	s, err := sim.New(m, 7)
	require.NoError(t, err)
	defer s.Close()
	ctx := context.Background()
	done := make(chan struct{})
	var ran []time.Duration
	go func() {
		defer close(done)
		s.Run(func() {
			g := s.NewGroup()
			for i := range 4 {
				g.Go(func() {
					c, err := s.Open(ctx, s.Topology().ComputeNodes()[i%2])
					if err != nil {
						return
					}
					rt := c.Runtime()
					for range 5 {
						var b farmem.Batch
						b.FAA(farmem.MakeAddr(1, 4096), 1)
						p := c.Post(ctx, &b)
						if p.Then(func(*farmem.Pending) { ran = append(ran, s.Now().Sub(sim.Epoch)) }) != nil {
							return
						}
						rt.Sleep(ctx, 50*time.Microsecond) // blocked when the completion arrives
					}
				})
			}
			g.Wait()
		})
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the simulation did not finish: a hook fired from an event deadlocked")
	}
	require.Len(t, ran, 20, "every hook ran")
}
