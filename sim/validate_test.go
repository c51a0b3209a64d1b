package sim_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/sim"
)

// long reports whether the long versions of the statistical tests were asked for.
func long() bool { return os.Getenv("SIM_LONG") != "" }

// base is where the validation tests put data on a memory node.
const base = 64 << 10

// queueModel is a model whose only costs are a link latency and a memory NIC service time:
// the textbook closed and open queueing networks.
func queueModel(l, svc time.Duration) sim.Model {
	m := sim.Model{MemoryLatency: l, ComputeLatency: l}
	m.MemoryNIC.Verb = [farmem.NumOpKinds]time.Duration{svc, svc, svc, svc, svc}
	return m
}

// TestSingleClientLatency: one client's verb takes exactly the model's path: client CPU,
// issue, link, service, payload at the port, atomic unit, link back.
func TestSingleClientLatency(t *testing.T) {
	m := sim.ConnectX3()
	m.MemoryNodes = 1
	s, err := sim.New(m, 7)
	require.NoError(t, err)
	defer s.Close()
	mm := s.Model()
	nic := mm.MemoryNIC
	bw := func(n int) time.Duration { return time.Duration(float64(n)*1e9/nic.Bandwidth + 0.5) }
	path := mm.OpCPU + mm.ComputeNIC.Issue + 2*mm.MemoryLatency
	cases := []struct {
		name string
		do   func(ctx context.Context, c farmem.Memory) error
		want time.Duration
	}{
		{"read 8", func(ctx context.Context, c farmem.Memory) error {
			return c.Read(ctx, farmem.MakeAddr(1, base), make([]byte, 8))
		}, path + nic.Verb[farmem.OpRead] + bw(8)},
		{"read 4096", func(ctx context.Context, c farmem.Memory) error {
			return c.Read(ctx, farmem.MakeAddr(1, base), make([]byte, 4096))
		}, path + nic.Verb[farmem.OpRead] + bw(4096)},
		{"write 64", func(ctx context.Context, c farmem.Memory) error {
			return c.Write(ctx, farmem.MakeAddr(1, base), make([]byte, 64))
		}, path + nic.Verb[farmem.OpWrite] + bw(64)},
		{"cas", func(ctx context.Context, c farmem.Memory) error {
			_, err := c.CAS(ctx, farmem.MakeAddr(1, base+8192), 0, 1)
			return err
		}, path + nic.Verb[farmem.OpCAS] + nic.AtomicUnit},
		{"faa", func(ctx context.Context, c farmem.Memory) error {
			_, err := c.FAA(ctx, farmem.MakeAddr(1, base+8192), 1)
			return err
		}, path + nic.Verb[farmem.OpFAA] + nic.AtomicUnit},
	}
	s.Run(func() {
		ctx := context.Background()
		c, err := s.Open(ctx, farmem.ComputeID(1).Node())
		require.NoError(t, err)
		for _, tc := range cases {
			start := s.Now()
			require.NoError(t, tc.do(ctx, c), tc.name)
			got := s.Now().Sub(start)
			t.Logf("%s: %v", tc.name, got)
			require.Equal(t, tc.want, got, tc.name)
			// Idle in between, so that the next op finds the NIC and cores free.
			require.NoError(t, c.Runtime().Sleep(ctx, 10*time.Microsecond))
		}
	})
}

// TestClosedLoopThroughput: N closed-loop clients against one memory node give throughput
// min(N/(RTT+S+Z), 1/S) and response time N/X - Z.
func TestClosedLoopThroughput(t *testing.T) {
	const (
		l   = time.Microsecond
		svc = 100 * time.Nanosecond
		z   = 300 * time.Nanosecond
	)
	rtt := 2 * l
	mu := 1 / svc.Seconds()
	for _, op := range []farmem.OpKind{farmem.OpRead, farmem.OpCAS} {
		for _, n := range []int{1, 4, 16, 23, 24, 32, 64, 256} {
			t.Run(fmt.Sprintf("%s/N=%d", op, n), func(t *testing.T) {
				m := queueModel(l, svc)
				m.ComputeNodes = 8
				s, err := sim.New(m, uint64(n))
				require.NoError(t, err)
				defer s.Close()
				res, err := s.RunClosedLoop(sim.ClosedLoop{
					Clients: n,
					Think:   z,
					Warmup:  50 * time.Microsecond,
					Duration: func() time.Duration {
						if long() {
							return 20 * time.Millisecond
						}
						return time.Millisecond
					}(),
					Start: func(_ context.Context, c farmem.Memory, i int) (sim.OpFunc, error) {
						a := farmem.MakeAddr(1, base+uint64(i)*64)
						buf := make([]byte, 8)
						return func(ctx context.Context) error {
							if op == farmem.OpRead {
								return c.Read(ctx, a, buf)
							}
							_, err := c.CAS(ctx, a, 0, 0)
							return err
						}, nil
					},
				})
				require.NoError(t, err)
				require.Zero(t, res.Errors)
				want := math.Min(float64(n)/(rtt+svc+z).Seconds(), mu)
				t.Logf("X=%.4g/s want %.4g/s; R=%v want %v; NIC util %.3f", res.Throughput, want,
					res.MeanLatency, time.Duration((float64(n)/res.Throughput-z.Seconds())*1e9), nicUtil(res.Report))
				require.InEpsilon(t, want, res.Throughput, 0.01, "throughput")
				wantR := float64(n)/res.Throughput - z.Seconds()
				require.InEpsilon(t, wantR, res.MeanLatency.Seconds(), 0.01, "response time N/X - Z")
				require.InEpsilon(t, want/mu, nicUtil(res.Report), 0.01, "NIC utilisation X*S")
			})
		}
	}
}

func nicUtil(r *sim.Report) float64 {
	n, _ := r.NIC(1)
	return n.Utilisation
}

// TestOpenLoopMD1: Poisson arrivals at one NIC with a deterministic service time wait, on
// average, rho/(2 mu (1 - rho)) in its queue (M/D/1).
func TestOpenLoopMD1(t *testing.T) {
	const svc = time.Microsecond
	mu := 1 / svc.Seconds()
	// Tolerance: the estimate of a mean waiting time from correlated samples; the long version
	// runs 25 times as many arrivals.
	tol, dur := 0.08, 80*time.Millisecond
	if long() {
		tol, dur = 0.03, 2*time.Second
	}
	for _, rho := range []float64{0.3, 0.6, 0.8} {
		t.Run(fmt.Sprintf("rho=%.1f", rho), func(t *testing.T) {
			s, err := sim.New(queueModel(time.Microsecond, svc), 11)
			require.NoError(t, err)
			defer s.Close()
			res, err := s.RunOpenLoop(sim.OpenLoop{
				Rate:     rho * mu,
				Clients:  48,
				Warmup:   5 * time.Millisecond,
				Duration: dur,
				Start: func(_ context.Context, c farmem.Memory, i int) (sim.OpFunc, error) {
					buf := make([]byte, 8)
					return func(ctx context.Context) error { return c.Read(ctx, farmem.MakeAddr(1, base), buf) }, nil
				},
			})
			require.NoError(t, err)
			nic, _ := res.Report.NIC(1)
			want := rho / (2 * mu * (1 - rho))
			t.Logf("arrivals %d, Wq %v want %v, util %.3f", nic.Served(), nic.MeanWait,
				time.Duration(want*1e9), nic.Utilisation)
			require.InEpsilon(t, want, nic.MeanWait.Seconds(), tol, "M/D/1 waiting time")
			require.InEpsilon(t, rho, nic.Utilisation, tol, "utilisation")
			require.InEpsilon(t, rho*mu, res.Throughput, tol, "throughput")
			// Response time: two one-way trips, the wait and the service.
			require.InEpsilon(t, 2e-6+want+svc.Seconds(), res.MeanLatency.Seconds(), tol, "response time")
		})
	}
}
