package kvstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/lincheck"
	"github.com/farmem/farmem/kvstore"
	"github.com/farmem/farmem/kvstore/kvstoretest"
	"github.com/farmem/farmem/sim"
)

// newSim returns a simulated ConnectX-6 cluster of two memory and two compute nodes, with
// tearing and jitter.
func newSim(t testing.TB, seed uint64) *sim.Sim {
	t.Helper()
	model := sim.ConnectX6()
	model.MemoryNodes, model.ComputeNodes, model.MemorySize = 2, 2, 64<<20
	model.Tearing, model.Jitter = true, 300*time.Nanosecond
	return startSim(t, model, seed)
}

// shortLeases are allocator options with leases short enough that a paused client outlives its
// own (kvstoretest.ShortLeases).
var shortLeases = kvstoretest.ShortLeases

// simRun is the outcome of one simulated lincheck run.
type simRun struct {
	summary lincheck.Summary
	verdict error
	digest  string
}

// lincheckSim runs the mix on two stores of one simulated fabric, 4 sessions each and 4
// goroutines through the stores' pools, with one session's client paused past its allocator
// lease, one paused briefly and one crashed.
func lincheckSim(t *testing.T, seed uint64) simRun {
	s := newSim(t, seed)
	h := kvModel.NewHistory(s.Runtime())
	w := mix
	w.ops = 150 * stressScale()
	var out simRun
	s.Run(func() {
		ctx := context.Background()
		var stores [2]*kvstore.Store
		for i := range stores {
			var err error
			stores[i], err = kvstore.Open(ctx, s, kvstore.Options{Alloc: shortLeases,
				Nodes: []farmem.NodeID{farmem.ComputeID(1 + i).Node()}})
			require.NoError(t, err)
		}
		var sessions []*kvstore.Session
		for i := range 8 {
			ss, err := stores[i%2].Session(ctx)
			require.NoError(t, err)
			sessions = append(sessions, ss)
		}
		start := s.Now()
		pause := func(ss *kvstore.Session, at, d time.Duration) {
			id := ss.Memory().Info().ID
			s.At(start.Add(at), func() { _ = s.PauseClient(id) })
			s.At(start.Add(at+d), func() { _ = s.ResumeClient(id) })
		}
		pause(sessions[0], 100*time.Microsecond, 8*time.Millisecond)
		pause(sessions[1], 300*time.Microsecond, 300*time.Microsecond)
		crashed := sessions[2].Memory().Info().ID
		s.At(start.Add(500*time.Microsecond), func() { _ = s.CrashClient(crashed) })

		errs := make([]error, 12)
		require.NoError(t, s.Parallel(12, func(g int) {
			rng := s.Runtime().NewRand()
			if g < len(sessions) {
				errs[g] = w.run(ctx, sessions[g], g, rng, h)
				return
			}
			errs[g] = w.run(ctx, stores[g%2], g, rng, h)
		}))
		for g, err := range errs {
			require.NoError(t, err, "goroutine %d", g)
		}
		for i, ss := range sessions {
			if err := ss.Close(); i != 2 { // the crashed client cannot withdraw its announcement
				require.NoError(t, err)
			}
		}
		st := stores[0].Stats().Add(stores[1].Stats())
		out.digest = fmt.Sprintf("%v %v %v", s.Now(), st, s.Stats())
		_ = stores[0].Close() // holds the crashed client, whose close fails
		require.NoError(t, stores[1].Close())
	})
	out.summary, out.verdict = h.Verify()
	return out
}

// TestLinearizableSim checks histories on the simulator over several seeds, with paused and
// crashed clients.
func TestLinearizableSim(t *testing.T) {
	t.Parallel() // its own simulation: deterministic beside other tests
	for seed := range uint64(2 * stressScale()) {
		r := lincheckSim(t, seed+1)
		t.Logf("seed %d: %v", seed+1, r.summary)
		require.NoError(t, r.verdict, "seed %d", seed+1)
	}
}

// TestSimDeterministic: the store takes time, randomness and scheduling only from the fabric,
// so one seed gives one run.
func TestSimDeterministic(t *testing.T) {
	t.Parallel() // its own simulation: deterministic beside other tests
	a, b := lincheckSim(t, 7), lincheckSim(t, 7)
	require.Equal(t, a.digest, b.digest)
	a.summary.Elapsed, b.summary.Elapsed = 0, 0 // the checker's own time
	require.Equal(t, a.summary, b.summary)
}
