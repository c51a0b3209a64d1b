package swarm_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/ds/swarm"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/lincheck"
	"github.com/farmem/farmem/internal/dstest"
	"github.com/farmem/farmem/sim"
)

// params: short leases so that buffers recycle within the tests' virtual time.
var params = maxreg.Params{Words: 16, Slots: 4, ValueSize: 32, Writers: 128, Lease: 200 * time.Microsecond, Skew: 10 * time.Microsecond}

// stress multiplies the workloads' lengths (SWARM_STRESS, an integer) for longer runs.
func stress() int {
	if n, err := strconv.Atoi(os.Getenv("SWARM_STRESS")); err == nil && n > 1 {
		return n
	}
	return 1
}

// newSim returns a simulated ConnectX-6 cluster with n memory nodes and two compute nodes,
// tearing and jitter on, a short down timeout, and clients whose clocks disagree by up to
// offset and drift by up to drift ppm.
func newSim(t testing.TB, seed uint64, n int, offset time.Duration, drift float64) *sim.Sim {
	return newSimC(t, seed, n, 2, offset, drift)
}

func newSimC(t testing.TB, seed uint64, n, comp int, offset time.Duration, drift float64) *sim.Sim {
	t.Helper()
	return dstest.Sim(t, seed, func(m *sim.Model) {
		m.MemoryNodes, m.ComputeNodes, m.MemorySize = n, comp, 8<<20
		m.Jitter = 500 * time.Nanosecond
		m.DownTimeout = 200 * time.Microsecond
		m.ClockOffset, m.ClockDrift = offset, drift
	})
}

func create(t testing.TB, f farmem.Fabric) []farmem.Addr {
	t.Helper()
	return dstest.Build(t, f, alloc.Options{}, func(ctx context.Context, m farmem.Memory, a *alloc.Allocator) ([]farmem.Addr, error) {
		return swarm.Create(ctx, m, a, f.Topology().MemoryNodes(), params)
	})
}

type handle struct {
	m farmem.Memory
	r *swarm.Register
}

func open(t testing.TB, f farmem.Fabric, i int, addrs []farmem.Addr, wrap func(farmem.Memory) farmem.Memory) *handle {
	t.Helper()
	return openWith(t, f, i, addrs, wrap, swarm.Options{})
}

func openWith(t testing.TB, f farmem.Fabric, i int, addrs []farmem.Addr, wrap func(farmem.Memory) farmem.Memory, opts swarm.Options) *handle {
	t.Helper()
	_, hm := dstest.OpenClient(t, f, i, wrap)
	r, err := swarm.Open(context.Background(), hm, addrs, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	return &handle{m: hm, r: r}
}

func encode(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

func decode(t testing.TB, b []byte) uint64 {
	if b == nil {
		return 0
	}
	require.Len(t, b, 8)
	return binary.LittleEndian.Uint64(b)
}

// tally sums what the runs saw: the handles' counters and the round-trip maxima.
type tally struct {
	mu                                    sync.Mutex
	st                                    swarm.Stats
	maxWriteRT, maxReadRT                 uint64
	maxTimelyWriteRT, maxLeaseWriteRT     uint64 // writes whose lease held, and the others
	leaseWrites                           uint64
	writeRT                               map[uint64]uint64 // write round trips -> count
	maxIter                               uint64
	lockWriteLost, lockReadLost, lockBoth int
	rep                                   maxreg.ReplicatedStats
}

func (ta *tally) add(s swarm.Stats) {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	x := &ta.st
	x.Writes += s.Writes
	x.Fast += s.Fast
	x.Stale += s.Stale
	x.Unpublished += s.Unpublished
	x.Pinned += s.Pinned
	x.Reads += s.Reads
	x.Verified += s.Verified
	x.Locked += s.Locked
	x.Second += s.Second
	x.ReadLockFailed += s.ReadLockFailed
	x.Empty += s.Empty
	x.ReadLockProbed += s.ReadLockProbed
	x.MaxReadIterations = max(x.MaxReadIterations, s.MaxReadIterations)
	x.MaxLockRounds = max(x.MaxLockRounds, s.MaxLockRounds)
	x.MaxWriteLockRounds = max(x.MaxWriteLockRounds, s.MaxWriteLockRounds)
}

func (ta *tally) String() string {
	s := ta.st
	return fmt.Sprintf("writes %d: fast %d, stale guess %d (writer un-published %d, writer found its guess pinned %d); reads %d: verified %d, locked after two reads %d, second tuple %d, read-lock failures %d (of which the lock round's metadata read showed a larger tuple %d), empty %d; both locks failed on one timestamp %d; max write round trips %d (histogram %v), max read round trips %d, max read iterations %d, max TRYLOCK rounds %d (write mode %d); writes whose lease held: max %d round trips; %d writes whose read half fell back to a full read: max %d",
		s.Writes, s.Fast, s.Stale, s.Unpublished, s.Pinned, s.Reads, s.Verified, s.Locked, s.Second, s.ReadLockFailed, s.ReadLockProbed, s.Empty,
		ta.lockBoth, ta.maxWriteRT, ta.writeRT, ta.maxReadRT, s.MaxReadIterations, s.MaxLockRounds, s.MaxWriteLockRounds, ta.maxTimelyWriteRT, ta.leaseWrites, ta.maxLeaseWriteRT) +
		fmt.Sprintf("; max register: %d inner writes in %d rounds, %d recycle reads, %d recycle waits, %d chases (%d found only a copy), %d write-backs (%d copies), %d lease restarts, %d retries",
			ta.rep.Writes, ta.rep.Rounds, ta.rep.RecycleReads, ta.rep.RecycleWaits, ta.rep.Chased, ta.rep.CopyChases, ta.rep.WriteBacks, ta.rep.Copies, ta.rep.LeaseRestarts, ta.rep.Retries)
}

// lockSpy records, per client, the timestamp-lock CASes its current operation posts: the
// writer whose lock (by address) and the word it tried to install. It lets the test tell
// which timestamp a failed lock was for, to find timestamps both of whose modes failed.
type lockSpy struct {
	base  []farmem.Addr // per replica: the first lock word
	mu    sync.Mutex
	tried map[farmem.ClientID][]uint64 // per locking client: (writer<<48 | word) tried in its current op
}

func (ls *lockSpy) wrap(m farmem.Memory) farmem.Memory {
	id := m.Info().ID
	return &farmemtest.Interposer{Memory: m, Before: func(_ context.Context, v farmemtest.Verb) {
		if !v.Posted {
			return
		}
		for _, op := range v.Batch.Ops {
			if op.Kind != farmem.OpCAS {
				continue
			}
			for _, b := range ls.base {
				if op.Addr.Node() == b.Node() && op.Addr >= b && op.Addr < b+8*farmem.Addr(params.Writers) {
					w := uint64(op.Addr-b)/8 + 1
					ls.mu.Lock()
					ls.tried[id] = append(ls.tried[id], w<<48|op.Swap)
					ls.mu.Unlock()
				}
			}
		}
	}}
}

func (ls *lockSpy) take(id farmem.ClientID) []uint64 {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	t := ls.tried[id]
	ls.tried[id] = nil
	return t
}

// runLin runs writers and readers on one register with skewed, drifting clocks and checks
// the history with lincheck's register model.
//
// With skewed set, the cluster has three compute nodes whose links to the three replicas
// differ, so that clients see different majorities first: compute node 1 is slow to replica
// C, node 2 fast only to B, node 3 slow to B. Then a writer on node 1 can read, on {A, B}, a
// tuple that a writer on node 2 has installed only on B, while readers on node 3 read its own
// guess twice on {A, C} and pin it: the paths where a reader pins a stale guess and where both
// locks fail.
func runLin(t *testing.T, seed uint64, ta *tally, ops int, skewed bool) {
	runLinN(t, seed, ta, ops, skewed, 3)
}

// runLinN is runLin with n replicas; with n = 5 (not skewed), two of them crash at random
// moments.
func runLinN(t *testing.T, seed uint64, ta *tally, ops int, skewed bool, n int) {
	comp := 2
	if skewed {
		comp = 3
		// The third compute node's clients read, and a read that writes back another
		// writer's tuple copies its record into a lane of its own: every client has one.
		defer func(p maxreg.Params) { params = p }(params)
		params.Writers = 3 * 64
	}
	s := newSimC(t, seed, n, comp, 30*time.Microsecond, 100)
	s.Run(func() {
		if skewed {
			const big = 15 * time.Microsecond
			mem, cs := s.Topology().MemoryNodes(), s.Topology().ComputeNodes()
			d := [3][3]time.Duration{{0, 0, big}, {big, 0, big}, {0, big, 0}}
			for i := range 3 {
				for j := range 3 {
					require.NoError(t, s.DelayLink(cs[i], mem[j], d[i][j]))
				}
			}
		}
		ctx := context.Background()
		addrs := create(t, s)
		base := maxreg.Size(params)
		ls := &lockSpy{tried: map[farmem.ClientID][]uint64{}}
		for _, a := range addrs {
			ls.base = append(ls.base, a+farmem.Addr(base))
		}
		clients := 6
		if skewed {
			clients = 9
		}
		// Without skew, the clients of the first compute node share a Refresher (in-place
		// copies and VERIFIED marks on its own client, from Runtime.Go); the others post them
		// unsignaled. With skew, one replica crashes midway (f = 1).
		var ref *maxreg.Refresher
		if !skewed {
			rm, err := s.Open(ctx, s.Topology().ComputeNodes()[0])
			require.NoError(t, err)
			t.Cleanup(func() { _ = rm.Close() })
			ref = maxreg.NewRefresher(rm)
		} else {
			victim := s.Topology().MemoryNodes()[seed%3]
			s.At(s.Now().Add(300*time.Microsecond), func() { require.NoError(t, s.Crash(victim)) })
		}
		if n == 5 {
			rng := s.Runtime().NewRand()
			for _, v := range rng.Perm(5)[:2] {
				victim := s.Topology().MemoryNodes()[v]
				s.At(s.Now().Add(time.Duration(50+rng.IntN(400))*time.Microsecond), func() { require.NoError(t, s.Crash(victim)) })
			}
		}
		hs := make([]*handle, clients)
		for i := range hs {
			opts := swarm.Options{}
			if ref != nil && i%2 == 0 {
				opts.Refresher = ref
			}
			hs[i] = openWith(t, s, i, addrs, ls.wrap, opts)
		}
		done := false
		if skewed {
			// Clients are paused now and then, for up to 40µs, anywhere in their operations
			// (the simulator holds a paused client at its next verb): a writer paused between
			// its first round trip and its write-back lets readers read its guess twice.
			s.Go(func() {
				rng := s.Runtime().NewRand()
				for !done {
					_ = s.Runtime().Sleep(ctx, time.Duration(2+rng.IntN(8))*time.Microsecond)
					id := hs[rng.IntN(len(hs))].m.Info().ID
					if s.PauseClient(id) == nil {
						d := time.Duration(1+rng.IntN(40)) * time.Microsecond
						s.At(s.Now().Add(d), func() { _ = s.ResumeClient(id) })
					}
				}
			})
		}
		reg := lincheck.Register[uint64]()
		h := reg.NewHistory(s.Runtime())
		var mu sync.Mutex
		writeLost := map[uint64]bool{} // writer<<48|ts of write-mode locks that failed
		readLost := map[uint64]bool{}
		err := farmemtest.Parallel(s.Runtime(), clients, func(i int) error {
			hd := hs[i]
			id := hd.m.Info().ID
			c := h.Client(int(id))
			rng := hd.m.Runtime().NewRand()
			for k := range ops {
				before, st0 := hd.m.Stats(), hd.r.Stats()
				rs0 := hd.r.Replicated().Stats()
				ls.take(id)
				writes := 50
				if skewed {
					writes = []int{100, 100, 0}[i%3]
				}
				if rng.IntN(100) < writes {
					v := uint64(id)<<32 | uint64(k+1)
					op := c.Call(reg.Write(0, v))
					err := hd.r.Write(ctx, encode(v))
					op.End(reg.Ack(), err)
					if err != nil {
						return fmt.Errorf("client %d write: %w", id, err)
					}
					rt := hd.m.Stats().Sub(before).RoundTrips
					rs := hd.r.Replicated().Stats()
					lease := rs.LeaseRestarts+rs.Retries > rs0.LeaseRestarts+rs0.Retries
					ta.mu.Lock()
					if lease {
						ta.maxLeaseWriteRT = max(ta.maxLeaseWriteRT, rt)
						ta.leaseWrites++
					} else {
						ta.maxTimelyWriteRT = max(ta.maxTimelyWriteRT, rt)
					}
					ta.maxWriteRT = max(ta.maxWriteRT, rt)
					ta.writeRT[rt]++
					ta.mu.Unlock()
					if hd.r.Stats().Pinned > st0.Pinned {
						mu.Lock()
						for _, x := range ls.take(id) {
							if x&1 == 1 {
								writeLost[x>>48<<48|(x&(1<<48-1))>>1] = true
							}
						}
						mu.Unlock()
					}
				} else {
					op := c.Call(reg.Read(0))
					v, err := hd.r.Read(ctx)
					if err != nil {
						op.End(reg.Value(0), err)
						return fmt.Errorf("client %d read: %w", id, err)
					}
					op.End(reg.Value(decode(t, v)), nil)
					rt := hd.m.Stats().Sub(before).RoundTrips
					ta.mu.Lock()
					ta.maxReadRT = max(ta.maxReadRT, rt)
					ta.mu.Unlock()
					if hd.r.Stats().ReadLockFailed > st0.ReadLockFailed {
						mu.Lock()
						for _, x := range ls.take(id) {
							if x&1 == 0 {
								readLost[x>>48<<48|(x&(1<<48-1))>>1] = true
							}
						}
						mu.Unlock()
					}
				}
			}
			return nil
		})
		done = true
		require.NoError(t, err)
		h.Check(t)
		if ref != nil {
			for !ref.Idle() {
				require.NoError(t, s.Runtime().Sleep(ctx, time.Microsecond))
			}
			require.NotZero(t, ref.Stats().Written, "the Refresher wrote nothing")
		}
		for _, hd := range hs {
			ta.add(hd.r.Stats())
			rs := hd.r.Replicated().Stats()
			ta.mu.Lock()
			ta.rep.Writes += rs.Writes
			ta.rep.Rounds += rs.Rounds
			ta.rep.RecycleReads += rs.RecycleReads
			ta.rep.RecycleWaits += rs.RecycleWaits
			ta.rep.Copies += rs.Copies
			ta.rep.CopyChases += rs.CopyChases
			ta.rep.Chased += rs.Chased
			ta.rep.WriteBacks += rs.WriteBacks
			ta.rep.LeaseRestarts += rs.LeaseRestarts
			ta.rep.Retries += rs.Retries
			ta.mu.Unlock()
		}
		ta.mu.Lock()
		ta.lockWriteLost += len(writeLost)
		ta.lockReadLost += len(readLost)
		for k := range writeLost {
			if readLost[k] {
				ta.lockBoth++
			}
		}
		ta.mu.Unlock()
	})
}

// TestLinearizableSkewedClocks: six clients write and read one register on three replicas
// whose clocks are up to 30µs apart and drift by up to 100 ppm, with tearing and jitter; the
// history is checked with lincheck's register model, these paths must have run (a fresh
// guess, a stale guess, a writer un-publishing one, a reader pinning a guess it read twice, a
// read returning a writer's earlier tuple), and the round-trip and iteration maxima are
// reported and bounded: a write at most 1 + 2 + TRYLOCK's rounds + 1, a read at most 2n+1
// iterations for n writers. The rarer paths (a writer finding its guess pinned, both locks
// failing, a reader learning the larger tuple from its lock round) are counted and logged
// here; TestOwnWordsSlowPaths and the scripted tests of paths_test.go force them.
//
// The metadata words are shared (16 words, 128 writer lanes), so a write-back is a round trip
// of its own: an update whose lease held takes at most 1 + 1 (chase) + 1 (write-back) + 1
// (TRYLOCK) + 1 (rewrite) = 5, the writer's TRYLOCK one round (its pipelined expectations
// cover every word readers can leave on its lock); one whose read half fell back to a full
// read (a client paused past the lease) at most 3 more than that... minus the chase already
// counted: 7, plus one per chase that finds the tuple's record only in a write-back's copy
// (its writer's buffer not written on the replicas holding it): 9 (the package doc's Round
// trips).
func TestLinearizableSkewedClocks(t *testing.T) {
	ta := linSkewed(t)
	t.Log(ta.String())
	require.LessOrEqual(t, ta.st.MaxWriteLockRounds, uint64(1), "a writer's TRYLOCK took more than one round")
	require.LessOrEqual(t, ta.maxTimelyWriteRT, uint64(5), "write round trips beyond the bound (shared words)")
	require.LessOrEqual(t, ta.maxLeaseWriteRT, uint64(9), "write round trips beyond the bound after a lease ran out")
}

// TestLinearizableSkewedOwnWords is TestLinearizableSkewedClocks with a metadata word per
// writer lane (every lane's word its own), the layout under which the write-back rides in the
// TRYLOCK's first batch: an update whose lease held takes at most 4 round trips, the paper's
// §7.8 bound (1, the chase, the write-back with the TRYLOCK, the rewrite). The writer's
// TRYLOCK takes two rounds when a replica its first round CASed crashes and the remaining one
// was left to a later round (the write-back not surely installed there).
func TestLinearizableSkewedOwnWords(t *testing.T) {
	defer func(p maxreg.Params) { params = p }(params)
	params.Words = 256
	ta := linSkewed(t)
	t.Log(ta.String())
	require.LessOrEqual(t, ta.st.MaxWriteLockRounds, uint64(2), "a writer's TRYLOCK took more than two rounds")
	require.LessOrEqual(t, ta.maxTimelyWriteRT, uint64(4)+ta.st.MaxWriteLockRounds-1, "write round trips beyond the paper's 4 (plus a lock round a crash cost)")
	require.LessOrEqual(t, ta.maxLeaseWriteRT, uint64(9), "write round trips beyond the bound after a lease ran out")
}

func linSkewed(t *testing.T) *tally {
	ta := &tally{writeRT: map[uint64]uint64{}}
	for seed := uint64(1); seed <= 4; seed++ {
		runLin(t, seed, ta, 60*stress(), false)
		runLin(t, seed, ta, 40*stress(), true)
	}
	s := ta.st
	require.NotZero(t, s.Fast, "fast path")
	require.NotZero(t, s.Stale, "stale guesses")
	require.NotZero(t, s.Unpublished, "writer un-published its guess")
	require.NotZero(t, s.Locked, "read-mode lock won")
	require.NotZero(t, s.Second, "a read returned a writer's earlier tuple")
	const writers = 6
	require.LessOrEqual(t, s.MaxReadIterations, uint64(2*writers+1), "read iterations beyond 2n+1")
	return ta
}

// TestLinearizableFiveReplicas: as above on five replicas, two of which (f = 2) crash at
// random moments while the clients run.
func TestLinearizableFiveReplicas(t *testing.T) {
	ta := &tally{writeRT: map[uint64]uint64{}}
	for seed := uint64(1); seed <= 3; seed++ {
		runLinN(t, seed, ta, 50*stress(), false, 5)
	}
	t.Log(ta.String())
	require.NotZero(t, ta.st.Stale)
	require.LessOrEqual(t, ta.st.MaxReadIterations, uint64(2*6+1))
}
