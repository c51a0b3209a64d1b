package farmemtest

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
)

// hungBacklog is how many batches the quorum test posts to a hung node before it posts to the
// live ones: more than any transport's per-node window of outstanding requests (rdma's default
// is 256), so a window shared by all nodes would be full.
const hungBacklog = 300

// drainPause is how long the quorum test lets a resumed node run before it checks that none of
// the requests reported failed took effect: a paused process reads what its socket held first.
const drainPause = 200 * time.Millisecond

// testQuorum checks node quorums (Pending.WaitNodes), the completion hook (Pending.Then) and
// that a hung node does not hold up posts to the others. With one of three memory nodes hung,
// a batch of two ops per node reaches a quorum of two while the hung node's ops are still
// outstanding (on a fabric in virtual time, within about one round trip of the live nodes);
// hundreds of batches then posted to the hung node do not keep a batch to the live nodes from
// completing; the hook runs once the hung node's ops failed, no sooner than its down timeout,
// with every op's outcome in place; and none of the failed ops takes effect after the node
// resumes.
func testQuorum(t *testing.T, open Open) {
	e := newEnv(t, open, DefaultConfig)
	fi := e.faults(t)
	ctx := e.ctx()
	m := e.client(0)
	nodes := e.tp.MemoryNodes()[:3]
	live := nodes[:2]
	hung := nodes[2]
	_, virtual := e.cl.Fabrics[0].(interface{ Run(func()) })

	batch := func(ns []farmem.NodeID, v uint64) *farmem.Batch {
		var b farmem.Batch
		for i := range ns {
			b.Write(e.mem(i, base), words(v+uint64(i)))
			b.FAA(e.mem(i, base+8), 1)
		}
		return &b
	}
	// A round trip to the live nodes, for the bound in virtual time.
	rtt := e.timed(func() { require.NoError(t, m.Do(ctx, batch(live, 100))) })

	// Connected to the node that will hang, so its requests reach it (a paused process holds
	// them in its socket).
	_, err := m.FAA(ctx, e.mem(2, base+16), 0)
	require.NoError(t, err)

	skipUnsupported(t, fi.Hang(hung))
	defer func() { _ = fi.Resume(hung) }()

	b := batch(nodes, 200)
	var hookAt atomic.Int64
	var hookErrs [6]error
	hooked := make(chan struct{})
	start := e.rt.Now()
	p := m.Post(ctx, b)
	require.NoError(t, p.Then(func(q *farmem.Pending) {
		for i := range hookErrs {
			_, hookErrs[i] = b.Result(i)
		}
		hookAt.Store(int64(e.rt.Now()))
		close(hooked)
	}))
	require.NoError(t, p.WaitNodes(ctx, 2))
	took := e.rt.Now().Sub(start)
	require.False(t, p.OpDone(4) || p.OpDone(5), "WaitNodes(2) returned only after the hung node's ops finished")
	require.Equal(t, live, p.NodesDone(nil))
	require.True(t, p.NodeDone(live[0]) && p.NodeDone(live[1]) && !p.NodeDone(hung))
	for i := range 4 {
		_, err := b.Result(i)
		require.NoError(t, err, "op %d to a live node", i)
	}
	if virtual {
		require.LessOrEqual(t, took, 2*rtt, "WaitNodes(2) took %v, a live round trip %v", took, rtt)
	}
	t.Logf("quorum of 2 after %v (a live round trip %v, down timeout %v)", took, rtt, e.tp.DownTimeout)
	select {
	case <-hooked:
		t.Fatal("the completion hook ran with the hung node's ops outstanding")
	default:
	}

	// Fill any window of outstanding requests with ops to the hung node, then post to the live
	// nodes: their batch completes while the hung node's first ops are still outstanding.
	var stuck [hungBacklog]*farmem.Pending
	for i := range stuck {
		var hb farmem.Batch
		hb.Write(e.mem(2, base+64+8*uint64(i%64)), words(uint64(i)+1))
		stuck[i] = m.Post(ctx, &hb)
	}
	require.NoError(t, m.Do(ctx, batch(live, 300)), "a batch to the live nodes")
	require.False(t, p.OpDone(4), "the batch to the live nodes waited for the hung node")

	// The stragglers fail with ErrNodeDown and the hook delivers them, once.
	for left := e.downBound(); ; left -= pollEvery {
		select {
		case <-hooked:
		default:
			require.Positive(t, left, "the hook did not run within %v", e.downBound())
			_ = e.rt.Sleep(ctx, pollEvery)
			continue
		}
		break
	}
	for i := range 4 {
		require.NoError(t, hookErrs[i], "op %d to a live node, as the hook saw it", i)
	}
	require.ErrorIs(t, hookErrs[4], farmem.ErrNodeDown)
	require.ErrorIs(t, hookErrs[5], farmem.ErrNodeDown)
	waited := farmem.Time(hookAt.Load()).Sub(start)
	require.GreaterOrEqual(t, waited, e.tp.DownTimeout, "the hung node's ops failed before its down timeout")
	if virtual {
		require.LessOrEqual(t, waited, e.tp.DownTimeout+2*rtt, "the hook ran late")
	}
	for _, sp := range stuck {
		require.NoError(t, sp.Wait(ctx, 0))
	}
	_, err = m.FAA(ctx, e.mem(0, base+8), 0)
	require.NoError(t, err)
	require.NoError(t, fi.Resume(hung))
	// Nothing reported failed takes effect once the node resumes (a paused process may still
	// hold the requests in its socket; they have expired).
	_ = e.rt.Sleep(ctx, drainPause) // time for a resumed process to act on what it held
	prev, err := m.FAA(ctx, e.mem(2, base+8), 0)
	require.NoError(t, err, "a resumed node serves again")
	require.Zero(t, prev, "an FAA reported failed was applied after the node resumed")
	got := make([]byte, 8+64*8)
	require.NoError(t, m.Read(ctx, e.mem(2, base), got[:8]))
	require.NoError(t, m.Read(ctx, e.mem(2, base+64), got[8:]))
	for i := 0; i < len(got); i += 8 {
		require.Zero(t, word(got[i:]), "a write reported failed was applied after the node resumed (byte %d)", i)
	}
}
