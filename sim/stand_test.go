package sim_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/sim"
)

// TestOutsideCallAfterDrivingWaits checks that a goroutine that has driven the simulation (it
// ran coroutines in a Run of its own, standing in for them) is an outsider again once its Run
// has returned: its call from outside while another goroutine's Run is going on waits for that
// Run to end, as the package doc says. The other Run holds the simulation still in its main
// function (on a channel) before anything else runs, so nothing has overwritten what the first
// Run left behind.
func TestOutsideCallAfterDrivingWaits(t *testing.T) {
	s, err := sim.New(sim.Model{}, 1)
	require.NoError(t, err)
	defer s.Close()
	rt := s.Runtime()
	s.Run(func() {
		require.NoError(t, s.Parallel(2, func(int) { _ = rt.Sleep(context.Background(), time.Microsecond) }))
	})

	inRun, release, runDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(runDone)
		s.Run(func() {
			close(inRun)
			<-release
		})
	}()
	<-inRun
	var released atomic.Bool
	go func() {
		time.Sleep(50 * time.Millisecond) // a slower machine only makes the check weaker
		released.Store(true)
		close(release)
	}()
	_ = s.Now()
	require.True(t, released.Load(), "a call from outside returned while another goroutine's Run held the simulation")
	<-runDone
}
