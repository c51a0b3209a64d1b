package sim_test

import (
	"context"
	"testing"
	"time"

	"github.com/farmem/farmem/sim"
)

// BenchmarkSleep512 measures the scheduler alone: 512 simulated goroutines each sleeping in a
// loop, one event and one switch per sleep. One b.N is one sleep.
func BenchmarkSleep512(b *testing.B) {
	s, _ := sim.New(sim.Model{}, 1)
	defer s.Close()
	rt := s.Runtime()
	each := max(1, b.N/512)
	b.ResetTimer()
	s.Run(func() {
		_ = s.Parallel(512, func(i int) {
			for range each {
				_ = rt.Sleep(context.Background(), time.Duration(1+i%7)*time.Microsecond)
			}
		})
	})
}
