package replcheck_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/race"
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
// third replica's never-written copy toward a majority.
func TestReplicatedPartitionLocal(t *testing.T) {
	t.Parallel() // mostly waiting out down timeouts
	e := replEnvWith(t, 4, 3, replLayout, true)
	const n = 4
	cs := make([]*client, n)
	for i := range cs {
		cs[i] = e.open(t, i, race.Options{Lease: 20 * time.Millisecond})
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
				w.ops, w.unknown = 30, unknown
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

	require.NoError(t, e.f.HealNodes(replicas[2], e.comp[0]))
	require.NoError(t, e.f.PartitionNodes(replicas[1], e.comp...))
	for _, err := range phase(2, 1000) {
		require.NoError(t, err)
	}
	sum, verdict = h.Verify()
	t.Logf("after phase 3 (reads through the replica that missed writes): %v", sum)
	require.NoError(t, verdict, "a stale value became visible")
}
