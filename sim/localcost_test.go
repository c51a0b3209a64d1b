package sim_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/localcost"
	"github.com/farmem/farmem/sim"
)

// A structure that keeps compute-side state in Go memory charges its accesses with
// Runtime.Compute at localcost.Of's price; that price must be exactly what a verb to the
// client's own region of the same bytes costs, under the sourced model and under one with
// LocalAccess unset (OpCPU instead, no bandwidth term).
func TestLocalCostPricesAsAVerbToTheOwnRegion(t *testing.T) {
	noLocal := sim.ConnectX6()
	noLocal.LocalAccess, noLocal.OpCPU = 0, 300*time.Nanosecond
	for name, m := range map[string]sim.Model{"sourced": sim.ConnectX6(), "no local access": noLocal} {
		t.Run(name, func(t *testing.T) {
			m.MemoryNodes, m.ComputeNodes = 1, 1
			s, err := sim.New(m, 1)
			require.NoError(t, err)
			defer s.Close()
			s.Run(func() {
				ctx := context.Background()
				c, err := s.Open(ctx, farmem.ComputeID(1).Node())
				require.NoError(t, err)
				lc := localcost.Of(c)
				require.Equal(t, m.LocalCost(), lc)
				require.Positive(t, lc.For(0))
				for _, n := range []int{8, 1000, 2048} {
					start := s.Now()
					require.NoError(t, c.Read(ctx, c.Info().Slice, make([]byte, n)))
					verb := s.Now().Sub(start)
					start = s.Now()
					c.Runtime().Compute(lc.For(n))
					require.Equal(t, verb, s.Now().Sub(start), "%d bytes", n)
					if m.LocalBandwidth > 0 && m.LocalAccess > 0 {
						require.Equal(t, m.LocalAccess+time.Duration(float64(n)*1e9/m.LocalBandwidth+0.5), verb)
					} else {
						require.Equal(t, m.OpCPU, verb)
					}
				}
			})
		})
	}
}

// Real transports run their clients' CPU work in real time: they are no localcost.Pricer, and the
// price is zero.
func TestLocalCostZeroOffSim(t *testing.T) {
	require.Zero(t, localcost.Of(nil).For(4096))
	require.Zero(t, localcost.Price{}.For(4096))
}
