package swarm_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/ds/swarm"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/lincheck"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/internal/dstest"
	"github.com/farmem/farmem/sim"
)

// perNodeParams: per-node lanes for two compute nodes, a word each, four slots.
var perNodeParams = maxreg.Params{Words: 2, Slots: 4, ValueSize: 32, Writers: 2, PerNode: true,
	Lease: 200 * time.Microsecond, Skew: 10 * time.Microsecond}

// createPerNode creates a register with perNodeParams on s's memory nodes (inside s.Run).
func createPerNode(t *testing.T, s *sim.Sim) []farmem.Addr {
	t.Helper()
	return dstest.Build(t, s, alloc.Options{}, func(ctx context.Context, m farmem.Memory, a *alloc.Allocator) ([]farmem.Addr, error) {
		return swarm.Create(ctx, m, a, s.Topology().MemoryNodes(), perNodeParams)
	})
}

// perNodeRun has clients clients (over the fabric's compute nodes) write and read one
// register with per-node lanes, all sharing lanes, and checks the history with lincheck's
// register model. It returns the handles' summed counters.
func perNodeRun(t *testing.T, f farmem.Fabric, p maxreg.Params, clients, ops int, during func(i, k int) error) (swarm.Stats, maxreg.ReplicatedStats) {
	t.Helper()
	ctx := context.Background()
	var addrs []farmem.Addr
	build := func() {
		addrs = dstest.Build(t, f, alloc.Options{}, func(ctx context.Context, m farmem.Memory, a *alloc.Allocator) ([]farmem.Addr, error) {
			return swarm.Create(ctx, m, a, f.Topology().MemoryNodes(), p)
		})
	}
	lanes := maxreg.NewLanes()
	var (
		sum  swarm.Stats
		rsum maxreg.ReplicatedStats
	)
	reg := lincheck.Register[uint64]()
	h := reg.NewHistory(f.Runtime())
	run := func() {
		build()
		hs := make([]*handle, clients)
		for i := range hs {
			hs[i] = openWith(t, f, i, addrs, nil, swarm.Options{Lanes: lanes, EarlyReuse: i != 1})
		}
		_, err := swarm.Open(ctx, hs[0].m, addrs, swarm.Options{})
		require.ErrorIs(t, err, maxreg.ErrBadParams, "per-node lanes without Lanes")
		err = farmemtest.Parallel(f.Runtime(), clients, func(i int) error {
			hd := hs[i]
			id := hd.m.Info().ID
			c := h.Client(int(id))
			rng := hd.m.Runtime().NewRand()
			for k := range ops {
				if during != nil {
					if err := during(i, k); err != nil {
						return err
					}
				}
				if err := regOp(ctx, t, hd, reg, c, id, k, rng.IntN(100) < 60); err != nil {
					return err
				}
			}
			return nil
		})
		require.NoError(t, err)
		h.Check(t)
		var st swarm.Stats
		var rs maxreg.ReplicatedStats
		for _, hd := range hs {
			x, y := hd.r.Stats(), hd.r.Replicated().Stats()
			st.Writes += x.Writes
			st.Fast += x.Fast
			st.Stale += x.Stale
			st.Pinned += x.Pinned
			st.Unpublished += x.Unpublished
			st.Reads += x.Reads
			rs.LaneLatches += y.LaneLatches
			rs.LaneWaits += y.LaneWaits
			rs.Copies += y.Copies
		}
		t.Logf("%d writes (fast %d, stale %d: pinned %d, unpublished %d), %d reads; lane latches %d, waits %d, copies %d",
			st.Writes, st.Fast, st.Stale, st.Pinned, st.Unpublished, st.Reads, rs.LaneLatches, rs.LaneWaits, rs.Copies)
		sum, rsum = st, rs
	}
	if s, ok := f.(*sim.Sim); ok {
		s.Run(run)
	} else {
		run()
	}
	return sum, rsum
}

// TestPerNodeLanesSim: four clients on each of two compute nodes write and read one register
// whose lanes are per node (each node's clients take turns on its lane with a latch word in
// its region), on the simulator with torn accesses, clocks 30µs apart drifting 100 ppm,
// clients paused now and then, and one replica crashing midway: the history is linearizable,
// every write took its node's latch, and the slow path ran (guesses overtaken).
func TestPerNodeLanesSim(t *testing.T) {
	for _, seed := range []uint64{1, 2} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			s := newSimC(t, seed, 3, 2, 30*time.Microsecond, 100)
			rng := s.Runtime().NewRand()
			victim := s.Topology().MemoryNodes()[seed%3]
			var ids []farmem.ClientID
			st, rs := perNodeRun(t, s, perNodeParams, 8, 10*stress(), func(i, k int) error {
				if i == 0 && k == 6 {
					return s.Crash(victim)
				}
				if k == 0 {
					return nil
				}
				if ids == nil {
					for c := range 64 {
						ids = append(ids, farmem.ClientID(c+1))
					}
				}
				// Pause a random client (it stops at its next verb, maybe holding its node's
				// lane) for up to 40µs.
				if rng.IntN(6) == 0 {
					id := ids[rng.IntN(len(ids))]
					if s.PauseClient(id) == nil {
						d := time.Duration(1+rng.IntN(40)) * time.Microsecond
						s.At(s.Now().Add(d), func() { _ = s.ResumeClient(id) })
					}
				}
				return nil
			})
			require.GreaterOrEqual(t, rs.LaneLatches, st.Writes, "every write holds its node's lane")
			require.NotZero(t, st.Stale, "no guess was overtaken: the slow path did not run")
		})
	}
}

// TestPerNodeLanesLocal: the same on the local transport, where clients are goroutines (the
// race detector sees the lane state they share), with tearing, jitter and strict mode.
func TestPerNodeLanesLocal(t *testing.T) {
	f, err := local.New(local.Options{Shape: local.Shape{MemoryNodes: 3, ComputeNodes: 2, MemorySize: 8 << 20, ClientsPerNode: 16},
		DownTimeout: 20 * time.Millisecond, Tearing: true, Jitter: 3 * time.Microsecond, Strict: true})
	require.NoError(t, err)
	t.Cleanup(func() {
		require.Zero(t, f.Violations(), "strict-mode violations")
		_ = f.Close()
	})
	p := perNodeParams
	p.Lease, p.Skew = 50*time.Millisecond, time.Millisecond
	st, rs := perNodeRun(t, f, p, 8, 20*stress(), nil)
	require.GreaterOrEqual(t, rs.LaneLatches, st.Writes, "every write holds its node's lane")
}

// TestPerNodeFinalTuple: with per-node lanes a final tuple written by one client of a node
// raises the lane's timestamps to the ceiling for its node-mates too: a node-mate's WriteBelow
// is refused (ErrCeiling) rather than publishing a guess above the final tuple, a client of
// the other node is refused too, and reads return the final value.
func TestPerNodeFinalTuple(t *testing.T) {
	s := newSimC(t, 5, 3, 2, 0, 0)
	s.Run(func() {
		ctx := context.Background()
		addrs := createPerNode(t, s)
		lanes := maxreg.NewLanes()
		// Clients 0 and 2 on the first compute node, 1 on the second.
		hs := []*handle{
			openWith(t, s, 0, addrs, nil, swarm.Options{Lanes: lanes}),
			openWith(t, s, 1, addrs, nil, swarm.Options{Lanes: lanes}),
			openWith(t, s, 2, addrs, nil, swarm.Options{Lanes: lanes}),
		}
		require.Equal(t, hs[0].r.Replicated().Writer(), hs[2].r.Replicated().Writer(), "one writer per node")
		require.NotEqual(t, hs[0].r.Replicated().Writer(), hs[1].r.Replicated().Writer())
		require.NoError(t, hs[2].r.WriteBelow(ctx, encode(1), swarm.FinalTS))
		require.NoError(t, hs[0].r.WriteFinal(ctx, encode(2), swarm.FinalTS))
		require.GreaterOrEqual(t, hs[2].r.Replicated().LastTS(), uint64(swarm.FinalTS), "the lane's timestamps are the node's")
		require.ErrorIs(t, hs[2].r.WriteBelow(ctx, encode(3), swarm.FinalTS), swarm.ErrCeiling)
		require.ErrorIs(t, hs[1].r.WriteBelow(ctx, encode(4), swarm.FinalTS), swarm.ErrCeiling)
		for _, hd := range hs {
			v, err := hd.r.Read(ctx)
			require.NoError(t, err)
			require.Equal(t, uint64(2), decode(t, v))
		}
	})
}

// regOp performs one operation of client c (handle hd, client id id) on the register model's
// key 0 and records it: a write of a value unique to (id, k), or a read.
func regOp(ctx context.Context, t *testing.T, hd *handle, reg *lincheck.RegisterModel[uint64], c *lincheck.Client[lincheck.RegisterInput[uint64], lincheck.RegisterOutput[uint64]], id farmem.ClientID, k int, write bool) error {
	if write {
		v := uint64(id)<<32 | uint64(k+1)
		op := c.Call(reg.Write(0, v))
		err := hd.r.Write(ctx, encode(v))
		op.End(reg.Ack(), err)
		if err != nil {
			return fmt.Errorf("client %d write: %w", id, err)
		}
		return nil
	}
	op := c.Call(reg.Read(0))
	v, err := hd.r.Read(ctx)
	if err != nil {
		return fmt.Errorf("client %d read: %w", id, err)
	}
	op.End(reg.Value(decode(t, v)), nil)
	return nil
}
