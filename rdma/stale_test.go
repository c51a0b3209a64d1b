package rdma

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
)

// TestIdleConnectionsRetiredOnRestart: once the fabric meets a node's new incarnation, the
// connections its clients still hold to the old one (idle ones, which nothing read since the
// old process died) are retired, data and control alike: after the node is adopted, a client
// that was idle through the restart and the fabric's own control requests reach the new
// process at their first attempt, instead of each failing once with ErrNodeDown on the old
// connection's end (one spurious failure per pooled client, which a replicated store counts
// against its quorum).
func TestIdleConnectionsRetiredOnRestart(t *testing.T) {
	servers, cl := startServers(t, 1, 1<<20)
	cl.DownTimeout = 500 * time.Millisecond
	f := dialN(t, cl, 1, Options{})[0]
	ctx := context.Background()
	busy, idle := openOne(t, f), openOne(t, f)
	a := farmem.MakeAddr(1, 64<<10)
	for _, m := range []farmem.Memory{busy, idle} {
		_, err := m.FAA(ctx, a, 1)
		require.NoError(t, err)
	}
	_, err := f.Status(ctx, 1) // the control connection is open too
	require.NoError(t, err)

	// The node restarts at the same address.
	s := restartNode1(t, servers, cl)

	// One client meets the new incarnation (after perhaps its own connection's end).
	_, err = busy.FAA(ctx, a, 1)
	if errors.Is(err, farmem.ErrNodeDown) && !errors.Is(err, farmem.ErrNodeLost) {
		_, err = busy.FAA(ctx, a, 1)
	}
	require.ErrorIs(t, err, farmem.ErrNodeLost, "the new incarnation fences the node")

	// The fabric's control requests and the idle client go to the new process at once.
	st, err := f.Status(ctx, 1)
	require.NoError(t, err, "the control connection to the old process was retired")
	require.Equal(t, s.s.inc, st.Incarnation)
	require.NoError(t, f.Adopt(ctx, 1))
	prev, err := idle.FAA(ctx, a, 1)
	require.NoError(t, err, "the idle client's connection to the old process was retired")
	require.Zero(t, prev, "the new incarnation's memory")
}
