package sim_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/sim"
)

// step is one entry of a run's history: what a client did, what it got, and when.
type step struct {
	At     farmem.Time
	Client farmem.ClientID
	What   string
	Result uint64
	Err    string
}

// fingerprint is what a run's statistics must reproduce exactly.
type fingerprint struct {
	Elapsed   time.Duration
	Stats     farmem.Stats
	Clients   []sim.ClientReport
	NICs      []nicPrint
	Cores     []sim.CoreReport
	Latencies [4]int64 // count, p50, p99, max of round trips
}

type nicPrint struct {
	Node                    farmem.NodeID
	Ops                     [farmem.NumOpKinds]uint64
	Messages, Issued, Bytes uint64
	Busy, MeanWait, MaxWait time.Duration
	WaitCount, WaitP99      int64
	Utilisation1e6          int64
}

func printOf(s *sim.Sim) fingerprint {
	r := s.Report()
	f := fingerprint{Elapsed: r.Elapsed, Stats: r.Stats, Clients: r.Clients, Cores: r.Cores,
		Latencies: [4]int64{r.Latency.TotalCount(), r.Latency.ValueAtQuantile(50), r.Latency.ValueAtQuantile(99), r.Latency.Max()}}
	for _, n := range r.NICs {
		f.NICs = append(f.NICs, nicPrint{n.Node, n.Ops, n.Messages, n.Issued, n.Bytes, n.Busy, n.MeanWait, n.MaxWait,
			n.Wait.TotalCount(), n.Wait.ValueAtQuantile(99), int64(n.Utilisation * 1e6)})
	}
	return f
}

// mixedProgram runs 24 clients doing a mix of every verb, Calls, Waits, sleeps and CPU work
// against a fault schedule, and returns the history they saw.
//
// With fidelity, the model also prices own-region accesses (LocalAccess, LocalBandwidth) and
// skews the clients' clocks, the FAA counter is a word of compute node 1's shared area (local
// to its clients, NIC-reached once another node's client has added to it), and the history
// records each client's own clock.
func mixedProgram(t *testing.T, seed uint64, fidelity bool) ([]step, fingerprint) {
	m := sim.ConnectX3()
	m.MemoryNodes, m.ComputeNodes, m.MemorySize = 3, 4, 1<<20
	m.Jitter = 300 * time.Nanosecond
	m.Tearing = true
	if fidelity {
		m.LocalAccess, m.LocalBandwidth = sim.DRAMAccess, sim.DRAMBandwidth
		m.ClockOffset, m.ClockDrift = 10*time.Microsecond, 100
	}
	s, err := sim.New(m, seed)
	require.NoError(t, err)
	defer s.Close()
	var hist []step
	ctx := context.Background()
	cnodes := s.Topology().ComputeNodes()
	for _, id := range cnodes {
		require.NoError(t, s.Handle(id, 1, func(ctx context.Context, hm farmem.Memory, from farmem.ClientID, req []byte) ([]byte, error) {
			v, err := hm.FAA(ctx, farmem.MakeAddr(hm.Info().Node, s.Topology().SharedBase()), 1)
			hm.Runtime().Compute(time.Microsecond)
			return binary.LittleEndian.AppendUint64(nil, v), err
		}))
	}
	counter, casWord := farmem.MakeAddr(1, base), farmem.MakeAddr(2, base)
	if fidelity {
		counter = farmem.MakeAddr(cnodes[0], s.Topology().SharedBase()+64)
	}
	const clients, rounds = 24, 40
	ms := make([]farmem.Memory, clients)
	s.Run(func() {
		for i := range ms {
			ms[i], err = s.Open(ctx, cnodes[i%len(cnodes)])
			require.NoError(t, err)
		}
		// The fault schedule.
		at := func(d time.Duration, f func()) { s.At(sim.Epoch.Add(d), f) }
		at(30*time.Microsecond, func() { _ = s.PauseClient(ms[3].Info().ID) })
		at(90*time.Microsecond, func() { _ = s.ResumeClient(ms[3].Info().ID) })
		at(40*time.Microsecond, func() { _ = s.DelayLink(cnodes[1], 1, 3*time.Microsecond) })
		at(60*time.Microsecond, func() { _ = s.Hang(3) })
		at(75*time.Microsecond, func() { _ = s.Resume(3) })
		at(120*time.Microsecond, func() { _ = s.CrashClient(ms[5].Info().ID) })
		g := s.NewGroup()
		for i, c := range ms {
			g.Go(func() {
				rnd := c.Runtime().Rand()
				rec := func(what string, v uint64, err error) {
					st := step{At: s.Now(), Client: c.Info().ID, What: what, Result: v}
					if fidelity {
						st.At = c.Runtime().Now()
					}
					if err != nil {
						st.Err = err.Error()
					}
					hist = append(hist, st)
				}
				buf := make([]byte, 256)
				for r := range rounds {
					switch rnd.IntN(7) {
					case 0:
						v, err := c.FAA(ctx, counter, 1)
						rec("faa", v, err)
					case 1:
						v, err := c.CAS(ctx, casWord, uint64(r), uint64(r+1))
						rec("cas", v, err)
					case 2:
						for k := range buf {
							buf[k] = byte(i)
						}
						err := c.Write(ctx, farmem.MakeAddr(3, base+uint64(rnd.IntN(4))*256), buf)
						rec("write", 0, err)
					case 3:
						err := c.Read(ctx, farmem.MakeAddr(3, base+uint64(rnd.IntN(4))*256), buf)
						var sum uint64
						for _, b := range buf {
							sum = sum*31 + uint64(b)
						}
						rec("read", sum, err)
					case 4:
						reply, err := c.Call(ctx, cnodes[rnd.IntN(len(cnodes))], 1, []byte("x"))
						var v uint64
						if len(reply) == 8 {
							v = binary.LittleEndian.Uint64(reply)
						}
						rec("call", v, err)
					case 5:
						var b farmem.Batch
						b.FAA(counter, 10)
						b.Read(farmem.MakeAddr(2, base), buf[:8])
						b.Write(farmem.MakeAddr(3, base+2048), buf[:64])
						err := c.Do(ctx, &b)
						v, _ := b.Result(0)
						rec("batch", v, err)
					case 6:
						c.Runtime().Compute(time.Duration(rnd.IntN(2000)) * time.Nanosecond)
						err := c.Runtime().Sleep(ctx, time.Duration(rnd.IntN(5000))*time.Nanosecond)
						rec("sleep", 0, err)
					}
				}
			})
		}
		require.NoError(t, g.Wait())
	})
	return hist, printOf(s)
}

// TestDeterminism: the same seed gives the same history and the same statistics; another seed
// gives another interleaving.
func TestDeterminism(t *testing.T) {
	for _, fidelity := range []bool{false, true} {
		t.Run(fmt.Sprintf("fidelity=%v", fidelity), func(t *testing.T) { determinism(t, fidelity) })
	}
}

func determinism(t *testing.T, fidelity bool) {
	h1, f1 := mixedProgram(t, 1, fidelity)
	h2, f2 := mixedProgram(t, 1, fidelity)
	require.Greater(t, len(h1), 500)
	require.Equal(t, h1, h2, "same seed, same history")
	require.Equal(t, f1, f2, "same seed, same statistics")
	var errs int
	for _, st := range h1 {
		if st.Err != "" {
			errs++
		}
	}
	require.Positive(t, errs, "the fault schedule made some ops fail")
	h3, f3 := mixedProgram(t, 2, fidelity)
	require.NotEqual(t, h1, h3, "another seed, another history")
	require.NotEqual(t, f1.Stats, f3.Stats)
	t.Logf("%d steps, %d failed, ran %v of virtual time", len(h1), errs, f1.Elapsed)
}

// TestSeedBreaksTies: with every cost zero, all events tie and only the seed orders them: 16
// clients FAA one word at the same instant, and the seed decides who gets which ticket.
func TestSeedBreaksTies(t *testing.T) {
	order := func(seed uint64) string {
		m := sim.Model{Shape: sim.Shape{ComputeNodes: 2}}
		s, err := sim.New(m, seed)
		require.NoError(t, err)
		defer s.Close()
		tickets := make([]uint64, 16)
		s.Run(func() {
			ctx := context.Background()
			ms := make([]farmem.Memory, 16)
			for i := range ms {
				ms[i], err = s.Open(ctx, s.Hosted()[i%2])
				require.NoError(t, err)
			}
			require.NoError(t, s.Parallel(16, func(i int) {
				v, err := ms[i].FAA(ctx, farmem.MakeAddr(1, base), 1)
				require.NoError(t, err)
				tickets[i] = v
			}))
		})
		require.Equal(t, time.Duration(0), s.Elapsed(), "nothing takes time in the ideal model")
		return fmt.Sprint(tickets)
	}
	seen := map[string]bool{}
	for seed := range uint64(6) {
		a, b := order(seed), order(seed)
		require.Equal(t, a, b, "seed %d", seed)
		seen[a] = true
	}
	require.Greater(t, len(seen), 4, "seeds give different orders")
}
