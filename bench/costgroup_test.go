package bench

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
)

// readingStore is costStore whose sessions count how often the harness reads their costs.
type readingStore struct {
	costStore
	readings *atomic.Int64
}

type readingSession struct {
	*costSession
	readings *atomic.Int64
}

func (r readingStore) Open(ctx context.Context) (Session, error) {
	s, err := r.costStore.Open(ctx)
	if err != nil {
		return nil, err
	}
	return readingSession{s.(*costSession), r.readings}, nil
}

func (r readingSession) Costs() farmem.Stats {
	r.readings.Add(1)
	return r.costSession.Costs()
}

// A run of operations of one kind costs the harness one reading of the session's costs, not
// one per operation, and the costs stay exact: a read-only workload reads them a few times per
// worker whatever its length.
func TestCostsReadPerRunOfOneKind(t *testing.T) {
	w := smallWorkload(t, "c", map[string]string{"operationcount": "6000"})
	var readings atomic.Int64
	rep, err := Run(t.Context(), Config{Workload: w, Stores: []Store{readingStore{costStore{NewMapStore()}, &readings}},
		Clients: 3, LoadClients: 3})
	require.NoError(t, err)
	load, run := runRow(t, rep, "costed", PhaseLoad), runRow(t, rep, "costed", PhaseRun)
	require.Equal(t, 2.0, load.Costs.RoundTrips)
	require.Equal(t, uint64(4000), load.Costs.Total.RoundTrips)
	require.Equal(t, uint64(6000), run.Ops)
	require.Equal(t, 1.0, run.Costs.RoundTrips)
	require.Equal(t, 100.0, run.Costs.BytesIn)
	require.Equal(t, uint64(6000), run.Costs.Total.RoundTrips)
	// Per worker: before and after its part of the load, at most one to open the run's
	// group (none when the load's last reading serves) and one to settle it.
	require.LessOrEqual(t, readings.Load(), int64(3*4), "costs read per operation")
}

// With a measured window, the operations begun inside it are charged by runs; those begun
// before it (warm-up) or after it one by one, and only if they ended inside it. The costs per
// operation stay exact, averaged over the operations whose costs were read.
func TestCostsWindowedExact(t *testing.T) {
	w := smallWorkload(t, "f", nil) // reads and read-modify-writes
	rep, err := Run(t.Context(), Config{Workload: w, Stores: []Store{costStore{NewMapStore()}}, Clients: 2,
		Warmup: 20 * time.Millisecond, Duration: 60 * time.Millisecond})
	require.NoError(t, err)
	run := runRow(t, rep, "costed", PhaseRun)
	require.NotZero(t, run.Ops)
	rd, rmw := run.ByOp["read"], run.ByOp["readmodifywrite"]
	require.Equal(t, 1.0, rd.Costs.RoundTrips)
	require.Equal(t, 100.0, rd.Costs.BytesIn)
	require.Equal(t, 3.0, rmw.Costs.RoundTrips)
	require.Equal(t, 1.0, rmw.Costs.FailedCAS)
	// Each worker's last operation may have ended after the window: charged, not timed.
	charged := run.Costs.Total.RoundTrips
	timed := rd.Ops + 3*rmw.Ops
	require.GreaterOrEqual(t, charged, timed)
	require.LessOrEqual(t, charged, timed+2*3)
}
