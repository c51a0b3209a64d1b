package sim_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc/nodearea"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/sim"
)

// fidelityModel is ConnectX-6 with the compute nodes' own memory priced (DRAMAccess,
// DRAMBandwidth) and two compute nodes.
func fidelityModel() sim.Model {
	m := sim.ConnectX6()
	m.ComputeNodes = 2
	m.LocalAccess, m.LocalBandwidth = sim.DRAMAccess, sim.DRAMBandwidth
	return m
}

// TestConformanceFidelity: the conformance suite holds with local access costs, skewed and
// drifting client clocks.
func TestConformanceFidelity(t *testing.T) {
	m := fidelityModel()
	m.ClockOffset, m.ClockDrift = 20*time.Microsecond, 100
	farmemtest.Run(t, open(m, 4))
}

// handover is what one compute node's pair of clients measured in TestLocalLatchHandover.
type handover struct {
	uncontended, hit, frameRead, handover time.Duration
	stats                                 farmem.Stats
}

// TestLocalLatchHandover: on each of two compute nodes, a client allocates a latch in its
// node's shared area (nodearea) and takes it; a second client of the node blocks in Lock
// (waiting with Wait) until the first hands it over by releasing. Every step is a CPU access
// to the node's own memory, asserted in virtual time: an uncontended acquisition (a CAS, the
// cache hit's latch) costs exactly LocalAccess, a 2 KiB read of the frame LocalAccess plus
// 2048 bytes at LocalBandwidth, and the waiter holds the latch exactly LocalAccess after the
// release (its retry CAS). Nothing reaches a memory node or the other compute node. The
// same seed gives the same timeline.
func TestLocalLatchHandover(t *testing.T) {
	run := func(seed uint64) [2]handover {
		m := fidelityModel()
		s, err := sim.New(m, seed)
		require.NoError(t, err)
		defer s.Close()
		ctx := context.Background()
		var out [2]handover
		s.Run(func() {
			require.NoError(t, s.Parallel(2, func(node int) {
				id := s.Hosted()[node]
				a, err := s.Open(ctx, id)
				require.NoError(t, err)
				b, err := s.Open(ctx, id)
				require.NoError(t, err)
				area, err := nodearea.Open(ctx, a)
				require.NoError(t, err)
				frame, err := area.AllocZeroed(ctx, 8+2048) // latch word, then the frame
				require.NoError(t, err)
				require.Equal(t, id, frame.Node())
				la, err := nodearea.NewLatch(a, frame)
				require.NoError(t, err)
				lb, err := nodearea.NewLatch(b, frame)
				require.NoError(t, err)
				h := &out[node]

				t0 := s.Now()
				require.NoError(t, la.Lock(ctx))
				h.uncontended = s.Now().Sub(t0)
				t0 = s.Now()
				buf := make([]byte, 2048)
				require.NoError(t, a.Read(ctx, frame.Add(8), buf))
				h.frameRead = s.Now().Sub(t0)

				var acquired farmem.Time
				g := s.NewGroup()
				g.Go(func() {
					require.NoError(t, lb.Lock(ctx)) // waits: a holds it
					acquired = s.Now()
					require.NoError(t, lb.Unlock(ctx))
				})
				require.NoError(t, s.Runtime().Sleep(ctx, 10*time.Microsecond))
				require.Zero(t, acquired, "b got the latch while a held it")
				require.NoError(t, la.Unlock(ctx))
				released := s.Now()
				require.NoError(t, g.Wait())
				h.handover = acquired.Sub(released)

				// The latch again, now free: the cache hit.
				t0 = s.Now()
				ok, err := la.TryLock(ctx)
				require.NoError(t, err)
				require.True(t, ok)
				h.hit = s.Now().Sub(t0)
				require.NoError(t, la.Unlock(ctx))
				h.stats = a.Stats().Add(b.Stats())
			}))
		})
		return out
	}
	m := fidelityModel()
	frameRead := m.LocalAccess + time.Duration(2048*1e9/m.LocalBandwidth+0.5)
	got := run(1)
	for node, h := range got {
		require.Equal(t, m.LocalAccess, h.uncontended, "node %d: an uncontended Lock is one local CAS", node)
		require.Equal(t, m.LocalAccess, h.hit, "node %d: a cache hit's latch", node)
		require.Equal(t, frameRead, h.frameRead, "node %d: a 2 KiB local read", node)
		require.Equal(t, m.LocalAccess, h.handover, "node %d: the waiter's retry CAS after the release", node)
		require.Positive(t, h.stats.Waits, "node %d: the waiter waited", node)
		require.Zero(t, h.stats.RoundTrips, "node %d", node)
		require.Zero(t, h.stats.VerbsTo(farmem.TargetMemory)+h.stats.VerbsTo(farmem.TargetCompute), "node %d", node)
	}
	require.Equal(t, got, run(1), "same seed, same timeline")
	t.Logf("uncontended %v, hit %v, 2 KiB read %v, hand-over %v", got[0].uncontended, got[0].hit, got[0].frameRead, got[0].handover)
}

// TestPeerAtomicMakesWordNIC: a word of compute node 1's region costs its own client a
// LocalAccess for every access until a client of compute node 2 CASes it; from then on the
// owner's atomics on it go through its own NIC (OpCPU, issue, loopback both ways, the NIC's
// CAS service and atomic unit), its plain reads stay local, and other words stay local. The
// verbs are still counted as local ones, with no round trip.
func TestPeerAtomicMakesWordNIC(t *testing.T) {
	m := fidelityModel()
	m.LocalBandwidth = 0
	s, err := sim.New(m, 3)
	require.NoError(t, err)
	defer s.Close()
	ctx := context.Background()
	nic := s.Model().ComputeNIC
	loop := m.OpCPU + nic.Issue + 2*m.LoopbackLatency + nic.Verb[farmem.OpCAS] + nic.AtomicUnit
	s.Run(func() {
		owner, err := s.Open(ctx, s.Hosted()[0])
		require.NoError(t, err)
		peer, err := s.Open(ctx, s.Hosted()[1])
		require.NoError(t, err)
		area, err := nodearea.Open(ctx, owner)
		require.NoError(t, err)
		blk, err := area.AllocZeroed(ctx, 24)
		require.NoError(t, err)
		w, other, plain := blk, blk.Add(8), blk.Add(16)
		timed := func(f func() error) time.Duration {
			t0 := s.Now()
			require.NoError(t, f())
			return s.Now().Sub(t0)
		}
		cas := func(a farmem.Addr, old, new uint64) func() error {
			return func() error { _, err := owner.CAS(ctx, a, old, new); return err }
		}
		require.Equal(t, m.LocalAccess, timed(cas(w, 0, 1)), "before any peer: local")
		before := owner.Stats()
		_, err = peer.CAS(ctx, w, 1, 2)
		require.NoError(t, err)
		require.Equal(t, loop, timed(cas(w, 2, 3)), "after a peer's CAS: through the NIC")
		require.Equal(t, loop, timed(func() error { _, err := owner.FAA(ctx, w, 1); return err }), "sticky, every atomic")
		require.Equal(t, m.LocalAccess, timed(func() error { return owner.Read(ctx, w, make([]byte, 8)) }), "reads stay local")
		require.Equal(t, m.LocalAccess, timed(cas(other, 0, 1)), "other words stay local")
		st := owner.Stats()
		require.Zero(t, st.RoundTrips-before.RoundTrips)
		require.EqualValues(t, 4, st.VerbsTo(farmem.TargetLocal)-before.VerbsTo(farmem.TargetLocal))

		// In a batch, the own-region ops after the one that goes through the NIC follow it, in
		// order: the read sees the write and the FAA.
		var b farmem.Batch
		b.Write(plain, []byte{7, 0, 0, 0, 0, 0, 0, 0})
		b.FAA(w, 10)
		b.Write(plain, []byte{8, 0, 0, 0, 0, 0, 0, 0})
		got := make([]byte, 8)
		b.Read(plain, got)
		b.Read(w, make([]byte, 8))
		t0 := s.Now()
		require.NoError(t, owner.Do(ctx, &b))
		require.Equal(t, byte(8), got[0])
		require.Greater(t, s.Now().Sub(t0), 2*m.LoopbackLatency, "the batch looped through the NIC")
		v, err := b.Result(1)
		require.NoError(t, err)
		require.EqualValues(t, 4, v)
	})
}

// TestCallHandlerQueuesOnCalleeCores: a handler that computes for 50µs runs on the callee's
// cores. Two concurrent Calls to a one-core callee take about twice as long as one (the second
// handler's CallCPU and Compute queue behind the first's), and about as long as one on a
// callee with two cores.
func TestCallHandlerQueuesOnCalleeCores(t *testing.T) {
	const work = 50 * time.Microsecond
	measure := func(cores, calls int) time.Duration {
		m := sim.ConnectX6()
		m.ComputeNodes, m.Cores = 2, cores
		s, err := sim.New(m, 5)
		require.NoError(t, err)
		defer s.Close()
		callee, caller := s.Hosted()[0], s.Hosted()[1]
		require.NoError(t, s.Handle(callee, 9, func(ctx context.Context, hm farmem.Memory, from farmem.ClientID, req []byte) ([]byte, error) {
			hm.Runtime().Compute(work)
			return req, nil
		}))
		ctx := context.Background()
		var took time.Duration
		s.Run(func() {
			ms := make([]farmem.Memory, calls)
			for i := range ms {
				ms[i], err = s.Open(ctx, caller)
				require.NoError(t, err)
			}
			t0 := s.Now()
			require.NoError(t, s.Parallel(calls, func(i int) {
				_, err := ms[i].Call(ctx, callee, 9, []byte("x"))
				require.NoError(t, err)
			}))
			took = s.Now().Sub(t0)
		})
		return took
	}
	one, two, twoOnTwo := measure(1, 1), measure(1, 2), measure(2, 2)
	t.Logf("one call %v; two on one core %v; two on two cores %v", one, two, twoOnTwo)
	ratio := float64(two) / float64(one)
	require.InDelta(t, 2.0, ratio, 0.1, "two calls on one core take about twice one")
	require.GreaterOrEqual(t, two, one+work, "the second handler's work queued behind the first's")
	require.Less(t, twoOnTwo, one+work/10, "two cores run the two handlers side by side")
}

// TestClockOffsets: with ClockOffset and ClockDrift, two clients read different times at the
// same virtual instant, as ClockOf predicts, and the same seed gives the same clocks (another
// seed others); a client can read a time before one another client read earlier (the stale
// timestamps Safe-Guess must survive); durations are on the client's own clock: Sleep(d)
// advances its Now by d, and a WithTimeout deadline reads d ahead on its clock.
func TestClockOffsets(t *testing.T) {
	type reading struct {
		offsets [2]time.Duration
		drifts  [2]float64
		now     [2]farmem.Time
		slept   time.Duration
		trueDur time.Duration
		ahead   time.Duration
	}
	read := func(seed uint64) reading {
		m := sim.ConnectX6()
		m.ComputeNodes = 2
		m.ClockOffset, m.ClockDrift = 50*time.Microsecond, 200
		s, err := sim.New(m, seed)
		require.NoError(t, err)
		defer s.Close()
		ctx := context.Background()
		var r reading
		s.Run(func() {
			ms := make([]farmem.Memory, 2)
			for i := range ms {
				ms[i], err = s.Open(ctx, s.Hosted()[i])
				require.NoError(t, err)
			}
			require.NoError(t, s.Runtime().Sleep(ctx, time.Millisecond))
			now := s.Now()
			for i, m := range ms {
				r.offsets[i], r.drifts[i] = s.ClockOf(m.Info().ID)
				r.now[i] = m.Runtime().Now()
				// What ClockOf predicts, to a nanosecond of rounding.
				want := now.Add(r.offsets[i]).Add(time.Duration(float64(now.Sub(sim.Epoch)) * r.drifts[i] / 1e6))
				require.InDelta(t, int64(want), int64(r.now[i]), 1)
			}
			rt := ms[0].Runtime()
			before, t0 := rt.Now(), s.Now()
			require.NoError(t, rt.Sleep(ctx, 10*time.Millisecond))
			r.slept, r.trueDur = rt.Now().Sub(before), s.Now().Sub(t0)
			tctx, cancel := rt.WithTimeout(ctx, time.Millisecond)
			defer cancel()
			dl, ok := tctx.Deadline()
			require.True(t, ok)
			r.ahead = farmem.Time(dl.UnixNano()).Sub(rt.Now())
		})
		return r
	}
	a := read(1)
	t.Logf("offsets %v, drifts %v ppm, readings %v", a.offsets, a.drifts, a.now)
	require.NotEqual(t, a.now[0], a.now[1], "the clocks disagree")
	for i := range 2 {
		require.LessOrEqual(t, a.offsets[i].Abs(), 50*time.Microsecond)
		require.LessOrEqual(t, a.drifts[i], 200.0)
		require.GreaterOrEqual(t, a.drifts[i], -200.0)
	}
	require.Equal(t, a, read(1), "same seed, same clocks")
	require.NotEqual(t, a.offsets, read(2).offsets, "another seed, other clocks")

	// Sleep is on the client's own clock.
	require.InDelta(t, int64(10*time.Millisecond), int64(a.slept), 2)
	wantTrue := float64(10*time.Millisecond) / (1 + a.drifts[0]/1e6)
	require.InDelta(t, wantTrue, float64(a.trueDur), 2)
	require.InDelta(t, int64(time.Millisecond), int64(a.ahead), 2)

	// A stale timestamp: the client with the slower clock reads, later, a time before the one
	// the other read.
	lo, hi := 0, 1
	if a.now[1] < a.now[0] {
		lo, hi = 1, 0
	}
	gap := a.now[hi].Sub(a.now[lo])
	require.Positive(t, gap)
	m := sim.ConnectX6()
	m.ComputeNodes = 2
	m.ClockOffset, m.ClockDrift = 50*time.Microsecond, 200
	s, err := sim.New(m, 1)
	require.NoError(t, err)
	defer s.Close()
	ctx := context.Background()
	s.Run(func() {
		ms := make([]farmem.Memory, 2)
		for i := range ms {
			ms[i], err = s.Open(ctx, s.Hosted()[i])
			require.NoError(t, err)
		}
		require.NoError(t, s.Runtime().Sleep(ctx, time.Millisecond))
		first := ms[hi].Runtime().Now()
		require.NoError(t, s.Runtime().Sleep(ctx, gap/2))
		later := ms[lo].Runtime().Now()
		require.Less(t, later, first, "read later, yet earlier: a stale timestamp")
	})
}
