package replcheck_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/replmem"
	"github.com/farmem/farmem/sim"
)

// TestReplicatedHangSharedHealthSim: a table replicated on three nodes of the simulator, six
// clients on two compute nodes, the clients of each node sharing one replmem.Health. The
// first replica hangs (fail-silent: verbs to it fail after the down timeout, 2 ms here) early
// in the run and resumes before the suspicion's first period ends; the clients pause past that
// period and run again. The history is linearizable and no operation fails; the down timeouts
// the clients paid are at most two per client (the rounds in flight when the hang began) plus
// one per probe of the shared Healths; and a probe finds the replica back.
func TestReplicatedHangSharedHealthSim(t *testing.T) {
	t.Parallel() // a simulation: virtual time, unmoved by other tests
	model := sim.ConnectX6()
	model.MemoryNodes, model.ComputeNodes, model.MemorySize = 4, 2, 16<<20
	model.Tearing, model.Jitter, model.DownTimeout = true, 300*time.Nanosecond, 2*time.Millisecond
	s, err := sim.New(model, 3)
	require.NoError(t, err)
	defer s.Close()
	h := kvModel.NewHistory(s.Runtime())
	const n = 6
	var suspected uint64
	var hs replmem.HealthStats
	s.Run(func() {
		ctx := context.Background()
		comp := s.Topology().ComputeNodes()
		m0, err := s.Open(ctx, comp[0])
		require.NoError(t, err)
		require.NoError(t, alloc.FormatAll(ctx, m0, alloc.FormatOptions{SymmetricSize: 8 << 20}))
		a0, err := alloc.New(ctx, m0, replAlloc)
		require.NoError(t, err)
		p := replLayout
		p.IndexReplicas = 3
		root, err := race.Create(ctx, m0, a0, p)
		require.NoError(t, err)
		healths := map[farmem.NodeID]*replmem.Health{comp[0]: new(replmem.Health), comp[1]: new(replmem.Health)}
		cs := make([]*client, n)
		for i := range cs {
			node := comp[i%len(comp)]
			m, err := s.Open(ctx, node)
			require.NoError(t, err)
			a, err := alloc.New(ctx, m, replAlloc)
			require.NoError(t, err)
			tab, err := race.Open(ctx, m, a, root, race.Options{Lease: 20 * time.Millisecond, Health: healths[node]})
			require.NoError(t, err)
			cs[i] = &client{m: m, a: a, tab: tab}
		}
		hung := s.Topology().MemoryNodes()[1]
		start := s.Now()
		s.At(start.Add(200*time.Microsecond), func() { require.NoError(t, s.Hang(hung)) })
		s.At(start.Add(12*time.Millisecond), func() { require.NoError(t, s.Resume(hung)) })
		errs := make([]error, n)
		// The load, a pause past the suspicion's first period (the replica is back by then),
		// and the load again on other keys: its first rounds probe the replica.
		require.NoError(t, s.Parallel(n, func(i int) {
			w := replLoad
			w.Ops = 200
			if errs[i] = w.run(ctx, cs[i], h, 0); errs[i] != nil {
				return
			}
			if errs[i] = s.Runtime().Sleep(ctx, start.Add(30*time.Millisecond).Sub(s.Now())); errs[i] != nil {
				return
			}
			errs[i] = w.run(ctx, cs[i], h, 1000)
		}))
		for i, err := range errs {
			require.NoError(t, err, "client %d", i)
		}
		t.Logf("run took %v of virtual time", s.Now().Sub(start))
		for _, c := range cs {
			suspected += c.tab.Replicated().ProtocolStats().Suspected
			require.NoError(t, c.tab.Close())
			require.NoError(t, c.a.Close())
		}
		for _, hh := range healths {
			st := hh.Stats()
			hs.Suspicions += st.Suspicions
			hs.Resuspicions += st.Resuspicions
			hs.Probes += st.Probes
			hs.Cleared += st.Cleared
		}
	})
	sum, verdict := h.Verify()
	t.Logf("%v; %d down timeouts paid; shared Healths %+v", sum, suspected, hs)
	require.NoError(t, verdict)
	require.Zero(t, sum.Unknown+sum.Failed, "operations failed while one replica hung")
	require.NotZero(t, hs.Suspicions, "the clients met the hang")
	require.LessOrEqual(t, suspected, 2*uint64(n)+hs.Probes)
	require.NotZero(t, hs.Cleared, "a probe after the resume found the replica back")
}
