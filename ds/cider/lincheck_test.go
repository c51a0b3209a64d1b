package cider_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/cider"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/sim"
)

// collide lays RACE out to force collisions: one bucket group of two-slot buckets per subtable
// and two-bit fingerprints, so subtables split often and slots change keys.
var collide = race.Params{Groups: 1, SlotsPerBucket: 2, FingerprintBits: 2, MaxDepth: 16, MetaSize: 16}

// hotMix hammers a few keys with every operation, deletes and inserts included, so that slots
// and pointers change incarnation while updates queue.
var hotMix = workload{keys: 3, ops: 150, search: 25, insert: 20, update: 40, maxVal: 24, unknown: 5}

// spreadMix spreads over more keys (RACE splits under it).
var spreadMix = workload{keys: 40, ops: 150, search: 30, insert: 30, update: 25, maxVal: 40, unknown: 5}

// runLocal runs w with n clients using k on st over a local fabric with jitter, tearing and
// strict mode, and checks the history.
func runLocal(t *testing.T, st structure, k syncKind, w workload, n int) {
	w.ops *= stressScale()
	e := newLocalEnv(t, local.Options{Shape: local.Shape{MemoryNodes: 2}, Tearing: true, Jitter: 5 * time.Microsecond}, w.keys, collide)
	cs := make([]*client, n)
	for i := range cs {
		cs[i] = e.open(t, i, st, k)
	}
	h := kvModel.NewHistory(e.f.Runtime())
	err := farmemtest.Parallel(e.f.Runtime(), n, func(i int) error { return w.run(context.Background(), cs[i], h) })
	require.NoError(t, err)
	sum := h.Check(t)
	t.Logf("%v on %v: %v; %+v", k, st, sum, sumStats(cs))
}

// TestLinearizableLocal: KV histories on both structures under every synchronizer (CIDER with
// credits, and CIDER with each update's path drawn at random) are linearizable.
func TestLinearizableLocal(t *testing.T) {
	for _, st := range []structure{arrayKV, raceKV} {
		for _, k := range allSyncs {
			t.Run(fmt.Sprintf("%s/%s", st, k), func(t *testing.T) {
				runLocal(t, st, k, hotMix, 6)
				if st == raceKV {
					runLocal(t, st, k, spreadMix, 6)
				}
			})
		}
	}
}

// simFaults pauses one client well past the lock lease (its locks are reset and taken by
// others, and it resumes believing it holds them), pauses another briefly, and crashes a third
// (its locks are held forever, until the lease lets the others reset them).
func simFaults(e *env, cs []*client) {
	s := e.s
	start := s.Now()
	pause := func(c *client, at, d time.Duration) {
		id := c.m.Info().ID
		s.At(start.Add(at), func() { _ = s.PauseClient(id) })
		s.At(start.Add(at+d), func() { _ = s.ResumeClient(id) })
	}
	pause(cs[0], 60*time.Microsecond, 5*e.lease)
	pause(cs[1], 150*time.Microsecond, e.lease/3)
	crashed := cs[2].m.Info().ID
	s.At(start.Add(250*time.Microsecond), func() { _ = s.CrashClient(crashed) })
}

// runSim runs w with n clients using k on st on a simulated ConnectX-6 cluster (tearing and
// jitter on) under simFaults, and checks the history.
func runSim(t *testing.T, seed uint64, st structure, k syncKind, w workload, n int) cider.Stats {
	m := sim.ConnectX6()
	m.MemoryNodes, m.ComputeNodes, m.MemorySize = 2, 3, 4<<20
	m.Tearing, m.Jitter = true, 300*time.Nanosecond
	e := newSimEnv(t, m, seed, w.keys, collide)
	h := kvModel.NewHistory(e.f.Runtime())
	cs := make([]*client, n)
	e.do(func() {
		for i := range cs {
			cs[i] = e.open(t, i, st, k)
		}
		simFaults(e, cs)
		errs := make([]error, n)
		require.NoError(t, e.s.Parallel(n, func(i int) { errs[i] = w.run(context.Background(), cs[i], h) }))
		for i, err := range errs {
			require.NoError(t, err, "client %d", i)
		}
	})
	sum := h.Check(t)
	s := sumStats(cs)
	t.Logf("seed %d, %v on %v: %v; %+v", seed, k, st, sum, s)
	return s
}

// TestLinearizableSim: KV histories under every synchronizer on both structures, on the
// simulator with clients paused past the lock lease, paused briefly and crashed.
func TestLinearizableSim(t *testing.T) {
	for _, st := range []structure{arrayKV, raceKV} {
		for _, k := range allSyncs {
			t.Run(fmt.Sprintf("%s/%s", st, k), func(t *testing.T) {
				for seed := uint64(1); seed <= uint64(2*stressScale()); seed++ {
					runSim(t, seed, st, k, hotMix, 10)
				}
			})
		}
	}
}

// stressScale returns the factor CIDER_STRESS (an integer) asks for, or 1.
func stressScale() int {
	if n, err := strconv.Atoi(os.Getenv("CIDER_STRESS")); err == nil && n > 1 {
		return n
	}
	return 1
}
