package flexcheck_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem/lincheck"
	"github.com/farmem/farmem/kvstore"
	"github.com/farmem/farmem/kvstore/kvstoretest"
	"github.com/farmem/farmem/sim"
)

// What the FlexKV tests that crash a proxy's compute node mid-lincheck share (the manager's
// and the coordinator's recovery tests).

// crashSim starts their simulation: ConnectX-6 with 2 memory nodes and 3 compute nodes (the
// coordinator, a survivor, the node that fails), torn accesses, jitter and a 2 ms down
// timeout.
func crashSim(t *testing.T, seed uint64) *sim.Sim {
	model := sim.ConnectX6()
	model.MemoryNodes, model.ComputeNodes, model.MemorySize = 2, 3, 64<<20
	model.Tearing, model.Jitter = true, 300*time.Nanosecond
	model.DownTimeout = 2 * time.Millisecond
	return startSim(t, model, seed)
}

// endWithReads ends h with a survivor's read of every key of flexMix through s (as client
// id, after the workers), so that an acknowledged write the crash lost would contradict them,
// and requires the history to linearize.
func endWithReads(t *testing.T, ctx context.Context, s *kvstore.Store, h *kvstoretest.History, id int, seed uint64) lincheck.Summary {
	rec := h.Client(id)
	for i := range flexMix.Keys {
		op := rec.Call(kvModel.Get(i))
		got, err := s.Get(ctx, key(i))
		switch {
		case errors.Is(err, kvstore.ErrNotFound):
			op.End(kvModel.Missing(), nil)
		case err != nil:
			require.NoError(t, err, "key %d after the crash", i)
		default:
			x, err := unval(got)
			require.NoError(t, err)
			op.End(kvModel.Found(x), nil)
		}
	}
	sum, verdict := h.Verify()
	require.NoError(t, verdict, "seed %d", seed)
	return sum
}
