package rdma

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/internal/wire"
)

// Repeated lines of one kind are cut to the burst per window, and the first line of a later
// window says how many were dropped; other kinds are not affected.
func TestRateLogSuppresses(t *testing.T) {
	var out syncBuffer
	const every = 200 * time.Millisecond
	rl := newRateLog(slog.New(slog.NewTextHandler(&out, nil)), every, 3)
	start := time.Now()
	for range 50 {
		rl.warn("a", "line a")
	}
	rl.warn("b", "line b")
	if time.Since(start) >= every {
		t.Skip("the machine is too slow to log 51 lines within one window")
	}
	require.Equal(t, 3, strings.Count(out.String(), "line a"))
	require.Equal(t, 1, strings.Count(out.String(), "line b"))
	time.Sleep(every + every/2)
	rl.warn("a", "line a")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Contains(t, lines[len(lines)-1], "suppressed=47")
}

// The node-wide budget makes a second large holder wait until the first gives back; buffers
// given back are kept for reuse only while small and nobody waits, and make room when needed.
func TestBudgetWaitsAndKeeps(t *testing.T) {
	const limit = 4 << 20
	b := newBudget(limit)
	stop := make(chan struct{})
	x, ok := b.get(3<<20, stop)
	require.True(t, ok)
	require.Equal(t, 3<<20, cap(x))
	got := make(chan []byte, 1)
	go func() { y, _ := b.get(3<<20, stop); got <- y }()
	select {
	case <-got:
		t.Fatal("got past the limit")
	case <-time.After(50 * time.Millisecond):
	}
	b.put(x) // someone waits: freed, not kept
	y := <-got
	require.NotNil(t, y)
	require.Equal(t, uint64(1), b.waits.Load())
	b.put(y) // over a quarter of the limit: freed
	require.Zero(t, b.inUse.Load())
	require.Zero(t, b.keptB.Load())

	s1, _ := b.get(100<<10, stop)
	require.Equal(t, 128<<10, cap(s1), "rounded up to its class")
	b.put(s1)
	require.Equal(t, int64(128<<10), b.keptB.Load(), "kept")
	require.Zero(t, b.inUse.Load())
	s2, _ := b.get(70<<10, stop)
	require.Same(t, &s1[:1][0], &s2[:1][0], "the kept buffer is reused")
	b.put(s2)

	whole, ok := b.get(limit, stop) // the kept buffer makes room
	require.True(t, ok)
	require.Equal(t, limit, cap(whole))
	require.Zero(t, b.keptB.Load())
	require.Equal(t, int64(limit), b.inUse.Load())
	go func() { y, _ := b.get(1, stop); got <- y }()
	close(stop)
	require.Nil(t, <-got, "a closed server ends the wait")
	b.put(whole)
	require.Zero(t, b.inUse.Load())
}

// In process: with a handshake budget of 16, 300 silent connections do not keep a client
// that holds the secret out, and the node's counters show the evictions.
func TestSilentConnectionsDoNotLockOut(t *testing.T) {
	t.Parallel()
	sv, err := NewServer(ServerOptions{Node: 1, Size: 1 << 16, Secret: testSecret, MaxUnauth: 16, MaxConns: 8})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sv.Close() })
	addr, err := sv.Listen("127.0.0.1:0")
	require.NoError(t, err)
	var silent []net.Conn
	t.Cleanup(func() {
		for _, c := range silent {
			_ = c.Close()
		}
	})
	for range 300 {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		silent = append(silent, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for range 3 {
		st, err := QueryStatus(ctx, addr, testSecret, 10*time.Second)
		require.NoError(t, err, "a client holding the secret gets in")
		require.Equal(t, farmem.NodeID(1), st.Node)
	}
	m := sv.Metrics()
	require.GreaterOrEqual(t, m.Refused["evicted"], uint64(280), "silent connections were pushed out")
	require.LessOrEqual(t, m.ConnsHandshaking, 16)
	require.Zero(t, m.Refused["busy"])
}

// adversaryConn is an authenticated data connection driven by hand.
type adversaryConn struct {
	nc net.Conn
	br *bufio.Reader
	w  wire.Welcome
}

func dialAdversary(t *testing.T, addr string) *adversaryConn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = nc.Close() })
	br := bufio.NewReader(nc)
	w, err := wire.ClientHandshake(nc, br, 0, 7, wire.PurposeData, testSecret)
	require.NoError(t, err)
	return &adversaryConn{nc: nc, br: br, w: w}
}

func (r *adversaryConn) send(t *testing.T, id uint64, ops ...farmem.Op) {
	t.Helper()
	b, start := wire.BeginFrame(nil, wire.TypeBatch, 0, id)
	b = wire.AppendBatchCount(b, len(ops))
	for i := range ops {
		b = wire.AppendOp(b, &ops[i], r.w.Key)
	}
	_, err := r.nc.Write(wire.EndFrame(b, start))
	require.NoError(t, err)
}

// The node-wide output budget bounds the large replies held for clients that do not read: with
// room for one, a second such client waits (reading nothing) while the first holds it, a client
// of small replies is not held up, and the budget passes on when the first goes away.
func TestOutputBudgetIsNodeWide(t *testing.T) {
	t.Parallel()
	const wt = time.Minute // never reached: the clients that do not read close themselves
	sv, err := NewServer(ServerOptions{Node: 1, Size: 32 << 20, Secret: testSecret, MaxBuffer: 1, WriteTimeout: wt})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sv.Close() })
	addr, err := sv.Listen("127.0.0.1:0")
	require.NoError(t, err)
	limit := sv.Metrics().BufferLimit
	require.Equal(t, int64(wire.DefaultMaxFrame+wire.HeaderSize), limit, "the budget is at least one largest frame")

	big := farmem.Op{Kind: farmem.OpRead, Addr: farmem.MakeAddr(1, 0), Buf: make([]byte, farmem.MaxOpBytes)}
	a, b := dialAdversary(t, addr), dialAdversary(t, addr)
	for i := range 4 {
		a.send(t, uint64(i+1), big)
	}
	waitFor(t, func() bool { return sv.Metrics().OutputBuffered > 0 }, "the first large reply holds the budget")
	for i := range 4 {
		b.send(t, uint64(i+1), big)
	}
	waitFor(t, func() bool { return sv.Metrics().OutputWaits > 0 }, "the second client waits for the budget")
	m := sv.Metrics()
	require.LessOrEqual(t, m.OutputBuffered, limit)

	// Small replies do not need the budget.
	c := dialAdversary(t, addr)
	w := farmem.Op{Kind: farmem.OpFAA, Addr: farmem.MakeAddr(1, 64), Swap: 1}
	for i := range 20 {
		c.send(t, uint64(i+1), w)
		var hdr [wire.HeaderSize]byte
		_ = c.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
		h, _, err := wire.ReadFrame(c.br, &hdr, nil, wire.DefaultMaxFrame)
		require.NoError(t, err, "a small op while the budget is spent")
		require.Equal(t, wire.TypeResult, h.Type)
	}
	require.Equal(t, uint64(1), sv.Metrics().OutputWaits, "only the second large reader waited")

	// The first goes away: its reply's charge passes to the second, then it goes too.
	_ = a.nc.Close()
	waitFor(t, func() bool { m := sv.Metrics(); return m.OutputBuffered > 0 && m.ConnsAuthenticated == 2 }, "the second client holds the budget")
	_ = b.nc.Close()
	waitFor(t, func() bool { return sv.Metrics().OutputBuffered == 0 }, "the budget is free again")
	waitFor(t, func() bool { return sv.Metrics().OutputWriting == 0 }, "nothing is being written")
}

// A large request's payload must arrive within the write timeout: a client that sends the
// header of a 16 MiB write and then dribbles does not hold the input budget for longer.
func TestSlowLargeFrameIsClosed(t *testing.T) {
	t.Parallel()
	const wt = 500 * time.Millisecond
	sv, err := NewServer(ServerOptions{Node: 1, Size: 32 << 20, Secret: testSecret, WriteTimeout: wt})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sv.Close() })
	addr, err := sv.Listen("127.0.0.1:0")
	require.NoError(t, err)
	r := dialAdversary(t, addr)
	op := farmem.Op{Kind: farmem.OpWrite, Addr: farmem.MakeAddr(1, 0), Buf: make([]byte, farmem.MaxOpBytes)}
	b, start := wire.BeginFrame(nil, wire.TypeBatch, 0, 1)
	b = wire.EndFrame(wire.AppendOp(wire.AppendBatchCount(b, 1), &op, r.w.Key), start)
	_, err = r.nc.Write(b[:1<<20])
	require.NoError(t, err)
	waitFor(t, func() bool { return sv.Metrics().InputBuffered > 0 }, "the payload is charged to the input budget")
	waitFor(t, func() bool { return sv.Metrics().FrameTimeouts == 1 }, "the slow frame is cut off")
	waitFor(t, func() bool { return sv.Metrics().InputBuffered == 0 }, "its charge is returned")
	_ = r.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = io.Copy(io.Discard, r.br)
	require.NoError(t, err, "the node closed the connection")
}

// waitFor polls cond until it holds, for at most 20 s.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "timed out waiting: %s", what)
	}
}

// A client that pipelines many large reads and reads its replies late gets every one of them,
// in order and intact: the node waits for it (holding one reply at a time) instead of queueing.
func TestBackpressureThenDrain(t *testing.T) {
	t.Parallel()
	sv, err := NewServer(ServerOptions{Node: 1, Size: 4 << 20, Secret: testSecret, WriteTimeout: time.Minute})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sv.Close() })
	addr, err := sv.Listen("127.0.0.1:0")
	require.NoError(t, err)
	r := dialAdversary(t, addr)
	const size, n = 1 << 20, 64
	pattern := make([]byte, 4<<20)
	for i := range pattern {
		pattern[i] = byte(i*7 + i>>12)
	}
	r.send(t, 1, farmem.Op{Kind: farmem.OpWrite, Addr: farmem.MakeAddr(1, 0), Buf: pattern})
	var hdr [wire.HeaderSize]byte
	_, _, err = wire.ReadFrame(r.br, &hdr, nil, wire.DefaultMaxFrame)
	require.NoError(t, err)

	buf := make([]byte, size)
	go func() {
		for i := range n {
			op := farmem.Op{Kind: farmem.OpRead, Addr: farmem.MakeAddr(1, uint64(i%4)*size), Buf: buf}
			b, start := wire.BeginFrame(nil, wire.TypeBatch, 0, uint64(100+i))
			b = wire.EndFrame(wire.AppendOp(wire.AppendBatchCount(b, 1), &op, r.w.Key), start)
			if _, err := r.nc.Write(b); err != nil {
				return
			}
		}
	}()
	// The node fills the socket and waits; what it holds is one reply.
	waitFor(t, func() bool { return sv.Metrics().OutputWriting > 0 }, "the node is blocked writing")
	time.Sleep(100 * time.Millisecond)
	m := sv.Metrics()
	require.LessOrEqual(t, m.OutputWriting, int64(size+wire.HeaderSize+ConnBufferBound))
	require.Less(t, m.Ops["read"], uint64(n), "the node stopped reading the connection")

	_ = r.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	for i := range n {
		h, p, err := wire.ReadFrame(r.br, &hdr, nil, wire.DefaultMaxFrame)
		require.NoError(t, err)
		require.Equal(t, uint64(100+i), h.ID, "in order")
		var rs wire.Results
		_, err = rs.Reset(p)
		require.NoError(t, err)
		st, _, data, err := rs.Next(farmem.OpRead, size)
		require.NoError(t, err)
		require.Equal(t, wire.StatusOK, st)
		off := (i % 4) * size
		require.True(t, bytes.Equal(pattern[off:off+size], data), "reply %d", i)
	}
	require.Equal(t, uint64(n), sv.Metrics().Ops["read"])
}
