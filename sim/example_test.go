package sim_test

import (
	"context"
	"fmt"
	"time"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/sim"
)

// A structure's experiment at 512 clients: the CIDER testbed's shape, a closed loop of
// operations (here one FAA on a hot counter and one READ of a random line), and the counters
// of the measured window.
func ExampleSim_RunClosedLoop() {
	m := sim.ConnectX6()
	m.MemoryNodes, m.MemorySize = 8, 4<<20
	m.ComputeNodes, m.ClientsPerNode, m.MaxHandlers = 128, 8, 2
	s, err := sim.New(m, 1)
	if err != nil {
		panic(err)
	}
	defer s.Close()
	res, err := s.RunClosedLoop(sim.ClosedLoop{
		Clients:  512, // round robin over the 128 compute nodes: 4 each
		Warmup:   20 * time.Microsecond,
		Duration: 200 * time.Microsecond,
		Start: func(ctx context.Context, c farmem.Memory, i int) (sim.OpFunc, error) {
			// Open the structure's handle here, with c; c.Runtime().Rand() is this client's
			// seeded source.
			rnd := c.Runtime().Rand()
			buf := make([]byte, 64)
			return func(ctx context.Context) error {
				if _, err := c.FAA(ctx, farmem.MakeAddr(1, 64<<10), 1); err != nil {
					return err
				}
				line := uint64(rnd.IntN(1 << 14))
				return c.Read(ctx, farmem.MakeAddr(farmem.NodeID(2+line%7), 64<<10+line*64), buf)
			}, nil
		},
	})
	if err != nil {
		panic(err)
	}
	// The hot word's atomic unit (250ns a FAA) bounds the throughput at 4 Mops/s.
	fmt.Printf("no errors: %v\n", res.Errors == 0)
	fmt.Printf("throughput: %.1f Mops/s\n", res.Throughput/1e6)
	fmt.Printf("FAAs per op: %.1f\n", float64(res.Report.Stats.VerbsOf(farmem.OpFAA))/float64(res.Ops))
	// Output:
	// no errors: true
	// throughput: 4.0 Mops/s
	// FAAs per op: 1.0
}
