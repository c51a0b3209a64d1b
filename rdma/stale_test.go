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
	servers, cl, f, a, busy, idle := twoClientsOfNode1(t)
	ctx := context.Background()
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

// TestPostedBeforeAdoptNeverReachesNewMemory: a queue pair made while the fabric held a node's
// old incarnation (its handshake not yet done when the node restarted and the fabric, through
// another client, met the new process and adopted it) fails what was posted on it with
// ErrNodeLost: farmem.Restarts promises that a verb posted before an adoption never reaches the
// new memory. The next op, on a new queue pair, reaches it.
func TestPostedBeforeAdoptNeverReachesNewMemory(t *testing.T) {
	servers, cl, f, a, late, other := twoClientsOfNode1(t)
	ctx := context.Background()
	c := late.(*client)
	p := c.f.peer(ctx, 1)
	require.NotNil(t, p)
	old := p.adopted()
	require.NotZero(t, old)

	// late's next connection is made now, against the incarnation adopted now, and its
	// handshake is held back (connect is not started) while the node restarts.
	q := newQP(c, p)
	installQP(c, 1, q)
	c.f.addLive(q.l)
	done := faaAsync(ctx, late, a, 100)
	// The FAA is posted (waiting in the link's buffer for the handshake) before the node
	// restarts: a post that came later, after the fabric met the new process, would rightly
	// go elsewhere.
	require.Eventually(t, func() bool { return q.l.outstanding.Load() != 0 }, time.Minute, time.Millisecond,
		"the FAA was never posted on the held-back queue pair")

	s := restartNode1(t, servers, cl)
	_, err := other.FAA(ctx, a, 1)
	if errors.Is(err, farmem.ErrNodeDown) && !errors.Is(err, farmem.ErrNodeLost) {
		_, err = other.FAA(ctx, a, 1)
	}
	require.ErrorIs(t, err, farmem.ErrNodeLost, "the new incarnation fences the node")
	require.NoError(t, f.Adopt(ctx, 1))
	require.NotEqual(t, old, p.adopted())

	go q.l.connect(c.ClientInfo.ID) // the handshake meets the new process, which the fabric has adopted
	r := <-done
	require.ErrorIs(t, r.err, farmem.ErrNodeLost, "an FAA posted to the old incarnation reached the new memory (it returned %d)", r.v)
	buf := make([]byte, 8)
	s.s.reg.mem.ReadAt(buf, a.Offset(), nil)
	require.Equal(t, make([]byte, 8), buf, "the new incarnation's memory was touched")

	v, err := late.FAA(ctx, a, 1)
	require.NoError(t, err, "a new queue pair reaches the adopted process")
	require.Zero(t, v)
}

// twoClientsOfNode1 starts one node, dials a fabric to it and opens two clients, each of which
// has added 1 to the word at the address it returns (so each has a connection to the node).
func twoClientsOfNode1(t *testing.T) ([]*Server, *Cluster, *Fabric, farmem.Addr, farmem.Memory, farmem.Memory) {
	t.Helper()
	servers, cl := startServers(t, 1, 1<<20)
	cl.DownTimeout = 500 * time.Millisecond
	f := dialN(t, cl, 1, Options{})[0]
	a := farmem.MakeAddr(1, 64<<10)
	m1, m2 := openOne(t, f), openOne(t, f)
	for _, m := range []farmem.Memory{m1, m2} {
		_, err := m.FAA(context.Background(), a, 1)
		require.NoError(t, err)
	}
	return servers, cl, f, a, m1, m2
}

// installQP makes q client c's queue pair to node, closing the one it replaces.
func installQP(c *client, node farmem.NodeID, q qp) {
	c.qmu.Lock()
	prev := c.qps[node]
	c.qps[node] = q
	c.qmu.Unlock()
	if prev != nil {
		prev.close(errors.New("replaced by the test"))
	}
}

// faaResult is what faaAsync's FAA returned.
type faaResult struct {
	v   uint64
	err error
}

// faaAsync adds delta to the word at a through m in another goroutine; the channel gets the
// result.
func faaAsync(ctx context.Context, m farmem.Memory, a farmem.Addr, delta uint64) <-chan faaResult {
	done := make(chan faaResult, 1)
	go func() {
		v, err := m.FAA(ctx, a, delta)
		done <- faaResult{v, err}
	}()
	return done
}
