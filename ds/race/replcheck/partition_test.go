package replcheck_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/replmem"
)

// TestReplicatedPartitionLocal: a table replicated on three memory nodes of the local
// transport, four clients on two compute nodes. Phase 1 runs with every node reachable;
// in phase 2 the third replica is cut off from the first compute node's clients
// (local.Fabric.PartitionNodes), so their writes miss it; in phase 3 it is healed and the
// second replica is cut off from every client, so each operation's majority includes the
// replica that missed phase 2's writes. The whole history is linearizable: the replica that
// missed writes never makes a stale value visible. Phase 2 fails no operation. Phase 3's
// failed operations (ErrNodeDown, outcome unknown) are logged: a word laid out while the third
// replica was cut off is then on the first replica alone, and the protocol does not count the
// third replica's never-written copy toward a majority. A verb to a cut-off replica fails
// after 50 ms (the transport's default is 200 ms): the test spends most of its time waiting
// for such failures, and a reachable node never times out, however slow the machine.
func TestReplicatedPartitionLocal(t *testing.T) {
	t.Parallel() // mostly waiting out down timeouts
	e := replEnvDown(t, 4, 3, replLayout, true, 50*time.Millisecond)
	const n = 4
	cs := make([]*client, n)
	// The clients of a compute node share their suspicion of replicas, as a store's do.
	healths := map[farmem.NodeID]*replmem.Health{}
	for i := range cs {
		node := e.comp[i%len(e.comp)]
		if healths[node] == nil {
			healths[node] = new(replmem.Health)
		}
		cs[i] = e.open(t, i, race.Options{Lease: 20 * time.Millisecond, Health: healths[node]})
	}
	ctx := context.Background()
	h := kvModel.NewHistory(e.f.Runtime())
	replicas := e.f.Topology().MemoryNodes()[1:]
	phase := func(p int, unknown int) []error {
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i, c := range cs {
			wg.Go(func() {
				w := replLoad
				w.Ops, w.Unknown = 30, unknown
				errs[i] = w.run(ctx, c, h, p*1000)
			})
		}
		wg.Wait()
		return errs
	}
	for _, err := range phase(0, 1) {
		require.NoError(t, err)
	}
	require.NoError(t, e.f.PartitionNodes(replicas[2], e.comp[0]))
	for _, err := range phase(1, 1) {
		require.NoError(t, err)
	}
	sum, verdict := h.Verify()
	require.NoError(t, verdict)
	require.Zero(t, sum.Unknown+sum.Failed, "no operation fails while one replica is cut off from some clients")
	var suspected uint64
	for _, c := range cs {
		suspected += c.tab.Replicated().ProtocolStats().Suspected
	}
	require.NotZero(t, suspected, "the cut-off clients met the partition")
	require.NotZero(t, healths[e.comp[0]].Stats().Suspicions, "the cut-off node's shared Health suspected the replica")
	require.Zero(t, healths[e.comp[1]].Stats().Suspicions, "the other compute node reaches every replica")

	require.NoError(t, e.f.HealNodes(replicas[2], e.comp[0]))
	require.NoError(t, e.f.PartitionNodes(replicas[1], e.comp...))
	for _, err := range phase(2, 1000) {
		require.NoError(t, err)
	}
	sum, verdict = h.Verify()
	var heals uint64
	for _, c := range cs {
		heals += c.tab.Replicated().ProtocolStats().Heals
	}
	t.Logf("after phase 3 (reads through the replica that missed writes): %v; %d ranges copied to a replica that lacked them", sum, heals)
	require.NoError(t, verdict, "a stale value became visible")
}
