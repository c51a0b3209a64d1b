package sim_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/sim"
)

// TestCoLocatedNICContention: with Model.CoLocated, compute node 1 shares memory node 1's NIC,
// so a lock hand-over (an 8-byte write into a client's slice on compute node 1) queues behind
// memory-node verbs on that NIC, and a memory-node verb queues behind hand-overs; without it
// the two never meet. Measured in virtual time with a burst of 400 reads to memory node 1
// posted just before, from a client of compute node 2.
func TestCoLocatedNICContention(t *testing.T) {
	measure := func(colocated, handoverFirst bool) time.Duration {
		m := sim.ConnectX6()
		m.MemoryNodes, m.ComputeNodes, m.CoLocated = 2, 2, colocated
		s, err := sim.New(m, 1)
		require.NoError(t, err)
		defer s.Close()
		var got time.Duration
		s.Run(func() {
			ctx := context.Background()
			waiter, err := s.Open(ctx, farmem.ComputeID(1).Node())
			require.NoError(t, err)
			loader, err := s.Open(ctx, farmem.ComputeID(2).Node())
			require.NoError(t, err)
			sender, err := s.Open(ctx, farmem.ComputeID(2).Node())
			require.NoError(t, err)
			node := waiter.Info().Slice // the waiter's lock node, on compute node 1
			var burst farmem.Batch
			bufs := make([][]byte, 400)
			for i := range bufs {
				bufs[i] = make([]byte, 8)
				burst.Read(farmem.MakeAddr(1, base+uint64(8*i)), bufs[i])
			}
			if handoverFirst {
				// Hand-overs first (many, from the loader), then one memory-node read.
				var hb farmem.Batch
				for range 400 {
					hb.Write(node, make([]byte, 8))
				}
				p := loader.Post(ctx, &hb)
				start := s.Now()
				require.NoError(t, sender.Read(ctx, farmem.MakeAddr(1, base), make([]byte, 8)))
				got = s.Now().Sub(start)
				require.NoError(t, p.Wait(ctx, 400))
				return
			}
			p := loader.Post(ctx, &burst)
			start := s.Now()
			require.NoError(t, sender.Write(ctx, node, []byte{1, 0, 0, 0, 0, 0, 0, 0}))
			got = s.Now().Sub(start)
			require.NoError(t, p.Wait(ctx, 400))
		})
		return got
	}
	for _, first := range []bool{false, true} {
		apart, together := measure(false, first), measure(true, first)
		t.Logf("hand-overs first %v: %v on separate NICs, %v on a shared one", first, apart, together)
		require.Greater(t, together, apart+500*time.Nanosecond, "no contention on the shared NIC")
	}
}
