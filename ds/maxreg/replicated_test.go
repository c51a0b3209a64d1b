package maxreg_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/internal/dstest"
	"github.com/farmem/farmem/sim"
)

// repParams are the replicated tests' parameters: short leases so that buffers recycle within
// the tests' virtual time.
var repParams = maxreg.Params{Words: 16, Slots: 4, ValueSize: 48, Writers: 128, Lease: 50 * time.Microsecond, Skew: 10 * time.Microsecond}

// newSimN returns a simulated ConnectX-6 cluster with n memory nodes and two compute nodes,
// tearing and jitter on, and a short down timeout.
func newSimN(t testing.TB, seed uint64, n int) *sim.Sim {
	t.Helper()
	return dstest.Sim(t, seed, func(m *sim.Model) {
		m.MemoryNodes, m.ComputeNodes, m.MemorySize = n, 2, 1<<20
		m.Jitter = 300 * time.Nanosecond
		m.DownTimeout = 200 * time.Microsecond
	})
}

// createRep formats f's memory nodes and creates a replicated register on all of them.
func createRep(t testing.TB, f farmem.Fabric, p maxreg.Params) []farmem.Addr {
	t.Helper()
	return dstest.Build(t, f, alloc.Options{}, func(ctx context.Context, m farmem.Memory, a *alloc.Allocator) ([]farmem.Addr, error) {
		return maxreg.CreateReplicated(ctx, m, a, f.Topology().MemoryNodes(), p)
	})
}

type repHandle struct {
	m farmem.Memory
	r *maxreg.Replicated
}

func openRep(t testing.TB, f farmem.Fabric, i int, addrs []farmem.Addr) *repHandle {
	t.Helper()
	m, _ := dstest.OpenClient(t, f, i, nil)
	r, err := maxreg.OpenReplicated(context.Background(), m, addrs, maxreg.ReplicatedOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	return &repHandle{m: m, r: r}
}

// TestReplicatedRoundTrips: on three replicas, a write is one round trip, and so is a read
// of it once the in-place copies are refreshed; a read that finds the replicas disagreeing
// writes back.
func TestReplicatedRoundTrips(t *testing.T) {
	s := newSimN(t, 1, 3)
	s.Run(func() {
		ctx := context.Background()
		addrs := createRep(t, s, repParams)
		w := openRep(t, s, 0, addrs)
		rd := openRep(t, s, 1, addrs)
		for i := range 6 {
			s0 := w.m.Stats()
			tag, err := w.r.Write(ctx, []byte(fmt.Sprint("v", i)))
			require.NoError(t, err)
			require.Equal(t, uint64(maxreg.ReplicatedWriteRoundTrips), w.m.Stats().Sub(s0).RoundTrips, "write %d", i)
			require.NoError(t, s.Runtime().Sleep(ctx, 20*time.Microsecond))
			s0 = rd.m.Stats()
			got, v, err := rd.r.Read(ctx)
			require.NoError(t, err)
			require.Equal(t, tag, got)
			require.Equal(t, fmt.Sprint("v", i), string(v))
			require.Equal(t, uint64(maxreg.ReplicatedReadRoundTrips), rd.m.Stats().Sub(s0).RoundTrips, "read %d", i)
		}
		require.Zero(t, rd.r.Stats().Chased)
	})
}

// repOp runs one operation of a mixed workload and records it.
func repOp(ctx context.Context, h *repHandle, rec *recorder, n int, write bool) (maxreg.Tag, error) {
	id := h.m.Info().ID
	if write {
		v := payload(id, n, repParams.ValueSize)
		call := rec.now()
		tag, err := h.r.Write(ctx, v)
		if tag == 0 {
			return 0, err // failed before it had a timestamp: it posted nothing
		}
		rec.add(opRec{client: int(id), kind: kWrite, tag: tag, sum: digest(v), call: call, ret: rec.now(), unknown: err != nil})
		return tag, err
	}
	call := rec.now()
	tag, v, err := h.r.Read(ctx)
	if err == nil {
		rec.add(opRec{client: int(id), kind: kRead, tag: tag, sum: digest(v), call: call, ret: rec.now()})
	}
	return tag, err
}

// TestReplicatedCrashes: with 2f+1 replicas (f = 1 and 2), writers and readers run while
// memory nodes fail; no acknowledged write is lost (the history meets the max-register
// specification, whose write-read monotonicity is exactly that) and a final read returns at
// least the largest acknowledged write. The failures: f nodes crashed at a random moment; f
// nodes hung; after a write returns, exactly f of the f+1 nodes that acknowledged it first
// crashed at once (its stragglers still in flight); and f+1 nodes crashed, after which every
// operation fails with ErrNoQuorum (wrapping farmem.ErrNodeDown) and none returns a wrong
// value.
func TestReplicatedCrashes(t *testing.T) {
	t.Parallel() // a simulation: virtual time, unmoved by other tests
	for _, f := range []int{1, 2} {
		for _, mode := range []string{"crash-random", "hang-random", "crash-first-acked", "crash-f+1"} {
			t.Run(fmt.Sprintf("f=%d/%s", f, mode), func(t *testing.T) {
				for seed := uint64(1); seed <= 3; seed++ {
					repCrashRun(t, f, mode, seed)
				}
			})
		}
	}
}

func repCrashRun(t *testing.T, f int, mode string, seed uint64) {
	n := 2*f + 1
	s := newSimN(t, seed*100+uint64(f), n)
	s.Run(func() {
		ctx := context.Background()
		addrs := createRep(t, s, repParams)
		const clients = 4
		hs := make([]*repHandle, clients)
		for i := range hs {
			hs[i] = openRep(t, s, i, addrs)
		}
		rec := newRecorder(s.Runtime())
		rng := s.Runtime().NewRand()
		mem := s.Topology().MemoryNodes()
		down := f
		if mode == "crash-f+1" {
			down = f + 1
		}
		perm := rng.Perm(n)
		victims := perm[:down]
		// The replicas answer at different speeds (the k-th of perm is k·4µs slower each way),
		// so that a quorum is the f+1 fastest and the others' writes are stragglers that land
		// long after the operation returned.
		for k, j := range perm {
			for _, c := range s.Topology().ComputeNodes() {
				require.NoError(t, s.DelayLink(c, mem[j], time.Duration(k)*4*time.Microsecond))
			}
		}
		start := s.Now()
		switch mode {
		case "crash-random", "crash-f+1":
			s.At(start.Add(time.Duration(20+rng.IntN(200))*time.Microsecond), func() {
				for _, v := range victims {
					require.NoError(t, s.Crash(mem[v]))
				}
			})
		case "hang-random":
			s.At(start.Add(time.Duration(20+rng.IntN(200))*time.Microsecond), func() {
				for _, v := range victims {
					require.NoError(t, s.Hang(mem[v]))
				}
			})
		}
		crashed := false
		errs := 0
		err := farmemtest.Parallel(s.Runtime(), clients, func(i int) error {
			h := hs[i]
			r := h.m.Runtime().NewRand()
			for k := range 60 {
				write := r.IntN(2) == 0
				tag, err := repOp(ctx, h, rec, k, write)
				if mode == "crash-first-acked" && write && err == nil && i == 0 && !crashed && k > 5 {
					// Crash f of the replicas this write's quorum came from, at once.
					crashed = true
					known := h.r.Known()
					var acked []int
					for j, kt := range known {
						if kt >= tag {
							acked = append(acked, j)
						}
					}
					require.GreaterOrEqual(t, len(acked), f+1)
					t.Logf("known %v tag %v acked %v", known, tag, acked)
					for _, j := range acked[:f] {
						require.NoError(t, s.Crash(mem[j]))
					}
				}
				if err != nil {
					if mode != "crash-f+1" && !errors.Is(err, farmem.ErrNodeDown) {
						return err
					}
					require.ErrorIs(t, err, farmem.ErrNodeDown)
					errs++
					if mode != "crash-f+1" {
						return fmt.Errorf("client %d op %d with at most f down: %w", i, k, err)
					}
				}
			}
			return nil
		})
		require.NoError(t, err)
		ops := rec.all()
		require.NoError(t, checkWeak(ops))
		var maxAck maxreg.Tag
		for _, o := range ops {
			if !o.unknown && o.tag > maxAck {
				maxAck = o.tag
			}
		}
		h := hs[0]
		got, _, err := h.r.Read(ctx)
		if mode == "crash-f+1" {
			require.ErrorIs(t, err, maxreg.ErrNoQuorum)
			require.NotZero(t, errs, "no operation failed with f+1 replicas down")
			return
		}
		require.NoError(t, err)
		require.GreaterOrEqual(t, got, maxAck, "an acknowledged write was lost")
		var st maxreg.ReplicatedStats
		for _, h := range hs {
			x := h.r.Stats()
			st.WriteBacks += x.WriteBacks
			st.Stragglers += x.Stragglers
			st.Chased += x.Chased
			st.RecycleWaits += x.RecycleWaits
		}
		if mode == "crash-first-acked" {
			require.True(t, crashed)
		}
		t.Logf("seed %d: %d ops, write-backs %d, stragglers %d, chased %d, recycle waits %d", seed, len(ops), st.WriteBacks, st.Stragglers, st.Chased, st.RecycleWaits)
	})
}
