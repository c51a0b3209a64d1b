package rdma

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
)

// A signaled batch posted to one node and never waited on still reaches the node: the monitor
// finds it waiting without a reader and writes it (lazy frames have no other writer here).
func TestLazyBatchNobodyWaitsForIsWritten(t *testing.T) {
	t.Parallel()
	_, cl := startServers(t, 1, 1<<20)
	cl.DownTimeout = 400 * time.Millisecond // the monitor looks every 50 ms
	fs := dialN(t, cl, 2, Options{})
	m, other := openOne(t, fs[0]), openOne(t, fs[1])
	ctx := context.Background()
	a := farmem.MakeAddr(1, 4096)
	require.NoError(t, m.Write(ctx, a, make([]byte, 8))) // the connection is up
	var b farmem.Batch
	b.Write(a, binary.LittleEndian.AppendUint64(nil, 42))
	p := m.Post(ctx, &b) // nothing else of this client blocks from here on
	buf := make([]byte, 8)
	require.Eventually(t, func() bool {
		require.NoError(t, other.Read(ctx, a, buf))
		return binary.LittleEndian.Uint64(buf) == 42
	}, 20*time.Second, 5*time.Millisecond, "a posted batch nobody waits for never reached the node")
	require.NoError(t, p.Wait(ctx, 0))
	_, err := b.Result(0)
	require.NoError(t, err)
}

// Batches posted to two nodes travel together whichever the client waits on first: waiting on
// the first writes the second's lazy frame too, before the waiter blocks. A round checks this
// only if the second frame was left lazy and the first batch is not answered yet: a reader of a
// connection at post time (a background reader kicked in an earlier round, or the reader role
// of the last wait, not yet left) sends the frame at once, and a wait that does not block
// writes nothing, as the package doc says. Most rounds must check it.
func TestLazyFramesLeaveWhenTheClientBlocks(t *testing.T) {
	t.Parallel()
	_, cl := startServers(t, 2, 1<<20)
	cl.DownTimeout = time.Minute // the monitor stays out of it
	f := dialN(t, cl, 1, Options{})[0]
	m := openOne(t, f)
	ctx := context.Background()
	a1, a2 := farmem.MakeAddr(1, 4096), farmem.MakeAddr(2, 4096)
	buf := make([]byte, 8)
	require.NoError(t, m.Read(ctx, a1, buf)) // both connections are up
	require.NoError(t, m.Read(ctx, a2, buf))
	c := m.(*client)
	c.qmu.Lock()
	q2 := c.qps[2].(*tcpQP)
	c.qmu.Unlock()
	// lazy reports whether a frame waits in q2's output buffer for the client to block (a frame
	// queued there for a reader about to wait on the socket, or for the writer goroutine, does
	// not).
	lazy := func() bool {
		q2.l.wmu.Lock()
		defer q2.l.wmu.Unlock()
		return q2.lazyListed && len(q2.l.out) > 0 && !q2.l.flushing
	}
	const rounds = 20
	checked := 0
	for range rounds {
		var b1, b2 farmem.Batch
		b1.FAA(a1, 1)
		b2.FAA(a2, 1)
		p1 := m.Post(ctx, &b1)
		p2 := m.Post(ctx, &b2)
		if lazy() && !p1.OpDone(0) {
			require.NoError(t, p1.Wait(ctx, 0))
			require.False(t, lazy(), "waiting on the first batch left the second unwritten")
			checked++
		}
		require.NoError(t, p1.Wait(ctx, 0))
		require.NoError(t, p2.Wait(ctx, 0))
		for _, b := range []*farmem.Batch{&b1, &b2} {
			_, err := b.Result(0)
			require.NoError(t, err)
		}
	}
	t.Logf("%d of %d rounds left a lazy frame to check", checked, rounds)
	require.Greater(t, checked, rounds/2, "most rounds left no lazy frame to check")
}

// Lazy and eager frames mixed on connections whose background readers are busy, waited on in
// every order: every batch completes (a lazy frame left behind a reader that waits on the socket
// would make the connection silent and fail it after the down timeout), and the counters add up.
func TestLazyAndEagerFramesMixed(t *testing.T) {
	t.Parallel()
	_, cl := startServers(t, 2, 1<<20)
	cl.DownTimeout = 2 * time.Second
	f := dialN(t, cl, 1, Options{MaxOutstanding: 8})[0]
	m := openOne(t, f)
	ctx := context.Background()
	a1, a2 := farmem.MakeAddr(1, 4096), farmem.MakeAddr(2, 4096)
	rng := rand.New(rand.NewPCG(1, 2))
	const rounds = 400
	var want1, want2 uint64
	for range rounds {
		var ps []*farmem.Pending
		var bs []*farmem.Batch
		for range 1 + rng.IntN(6) {
			b := new(farmem.Batch)
			switch rng.IntN(4) {
			case 0: // to both nodes: eager, read by the background readers
				b.FAA(a1, 1)
				b.FAA(a2, 1)
				want1++
				want2++
			case 1:
				b.FAA(a1, 1)
				want1++
			case 2:
				b.FAA(a2, 1)
				want2++
			default: // an unsignaled op before a signaled one
				b.Unsignaled(b.FAA(a1, 1))
				b.FAA(a1, 1)
				want1 += 2
			}
			bs = append(bs, b)
			ps = append(ps, m.Post(ctx, b))
		}
		for _, i := range rng.Perm(len(ps)) {
			require.NoError(t, ps[i].Wait(ctx, 0))
			for j := range bs[i].Ops {
				if !bs[i].Ops[j].Unsignaled {
					_, err := bs[i].Result(j)
					require.NoError(t, err)
				}
			}
		}
	}
	buf := make([]byte, 8)
	require.NoError(t, m.Read(ctx, a1, buf))
	require.Equal(t, want1, binary.LittleEndian.Uint64(buf))
	require.NoError(t, m.Read(ctx, a2, buf))
	require.Equal(t, want2, binary.LittleEndian.Uint64(buf))
}
