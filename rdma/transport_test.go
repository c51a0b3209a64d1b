package rdma

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/internal/wire"
)

func openOne(t testing.TB, f *Fabric) farmem.Memory {
	t.Helper()
	m, err := f.Open(context.Background(), f.Hosted()[0])
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// Many batches outstanding on one connection apply in posting order.
func TestPipelinedBatchesApplyInOrder(t *testing.T) {
	for _, limit := range []int{256, 3} {
		_, cl := startServers(t, 1, 1<<20)
		f := dialN(t, cl, 1, Options{MaxOutstanding: limit})[0]
		m := openOne(t, f)
		ctx := context.Background()
		a := farmem.MakeAddr(1, 64<<10)
		const n = 64
		bs := make([]farmem.Batch, n)
		ps := make([]*farmem.Pending, n)
		for i := range bs {
			bs[i].FAA(a, 1)
			if i%2 == 0 {
				bs[i].Unsignaled(bs[i].FAA(a.Add(8), 1))
			}
			ps[i] = m.Post(ctx, &bs[i])
		}
		for i := range ps {
			require.NoError(t, ps[i].Wait(ctx, 0))
			prev, err := bs[i].Result(0)
			require.NoError(t, err)
			require.Equal(t, uint64(i), prev, "limit %d: batch %d applied out of posting order", limit, i)
		}
		buf := make([]byte, 8)
		require.NoError(t, m.Read(ctx, a.Add(8), buf))
		require.Equal(t, uint64(n/2), binary.LittleEndian.Uint64(buf), "unsignaled ops applied before the next op")
		st := m.Stats()
		require.Equal(t, uint64(n+1), st.RoundTrips)
		require.Equal(t, uint64(n/2), st.Unsignaled)
	}
}

// A batch larger than the frame limit is split into consecutive frames and still applies in
// order.
func TestLargeBatchSplitsFrames(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 48 MiB")
	}
	servers, cl := startServers(t, 1, 64<<20)
	cl.DownTimeout = 20 * time.Second // 48 MiB through race-instrumented code on both ends
	f := dialN(t, cl, 1, Options{})[0]
	m := openOne(t, f)
	ctx := context.Background()
	const chunk = 8 << 20
	var b farmem.Batch
	for i := range 3 {
		data := make([]byte, chunk)
		for j := range data {
			data[j] = byte(i + 1)
		}
		b.Write(farmem.MakeAddr(1, 64<<10+uint64(i)*chunk), data)
	}
	got := make([]byte, 3*chunk)
	for i := range 3 {
		b.Read(farmem.MakeAddr(1, 64<<10+uint64(i)*chunk), got[i*chunk:(i+1)*chunk])
	}
	before := servers[0].Status().Batches
	require.NoError(t, m.Do(ctx, &b))
	require.Greater(t, servers[0].Status().Batches-before, uint64(1), "the batch went as several frames")
	for i := range 3 {
		require.Equal(t, byte(i+1), got[i*chunk], "chunk %d", i)
		require.Equal(t, byte(i+1), got[(i+1)*chunk-1], "chunk %d", i)
	}
	require.Equal(t, uint64(1), m.Stats().RoundTrips, "still one batch, one round trip")
}

// An unsignaled op lost with its connection is never silent: the client's next op to the node
// reports it, and the one after works again.
func TestLostUnsignaledOpIsReported(t *testing.T) {
	// The default down timeout: nothing here waits it out (the lost op is reported from the
	// connection the node closes as it resumes), and a 100 ms one failed the connect itself
	// on a busy machine.
	servers, cl := startServers(t, 1, 1<<20)
	f := dialN(t, cl, 1, Options{})[0]
	m := openOne(t, f)
	ctx := context.Background()
	a := farmem.MakeAddr(1, 64<<10)
	_, err := m.FAA(ctx, a, 1) // connect
	require.NoError(t, err)
	require.NoError(t, servers[0].Hang())
	var b farmem.Batch
	b.Unsignaled(b.FAA(a, 1))
	require.NoError(t, m.Post(ctx, &b).Wait(ctx, 0))
	// Resume only once the hung node has read the frame and dropped it: a frame it reads after
	// Resume applies (a fixed sleep here let a busy machine's node read it late).
	id := m.(*client).ClientInfo.ID
	require.Eventually(t, func() bool { return droppedFrameOf(servers[0], id) }, 30*time.Second, time.Millisecond,
		"the hung node never dropped the client's frame")
	require.NoError(t, servers[0].Resume())
	var err2 error
	require.Eventually(t, func() bool {
		_, err2 = m.FAA(ctx, a, 0)
		return err2 != nil
	}, 30*time.Second, time.Millisecond, "an op after the lost one must fail once")
	require.ErrorIs(t, err2, farmem.ErrNodeDown)
	prev, err := m.FAA(ctx, a, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(1), prev, "the unsignaled FAA was dropped by the hung node")
}

// droppedFrameOf reports whether s dropped a frame of client's own data connection while it was
// silent to it.
func droppedFrameOf(s *Server, client farmem.ClientID) bool {
	s.s.mu.Lock()
	defer s.s.mu.Unlock()
	for c := range s.s.conns {
		if !c.shared && c.client == client && c.dropped.Load() {
			return true
		}
	}
	return false
}

func TestMembershipDenseIDs(t *testing.T) {
	t.Parallel() // waits out a lease
	servers, cl := startServers(t, 2, 1<<20)
	// A lease a busy machine keeps renewed (every third of it, each renewal within the down
	// timeout): with 300 ms and 100 ms, two renewals slower than 100 ms let the first process's
	// lease lapse while the test dialled the second, which took its id.
	cl.Lease = 2 * time.Second
	fs := dialN(t, cl, 3, Options{})
	for i, f := range fs {
		require.Equal(t, farmem.ComputeID(i+1), f.ComputeID())
	}
	require.Equal(t, 3, servers[0].Status().Members, "the lowest memory node keeps membership")
	require.Equal(t, 0, servers[1].Status().Members)
	// Every fabric learns the others, through renewals or a lookup on first use.
	m := openOne(t, fs[0])
	require.NoError(t, m.Write(context.Background(), farmem.MakeAddr(fs[2].Hosted()[0], fs[2].Topology().SharedBase()), []byte("hi")))
	require.Eventually(t, func() bool { return len(fs[2].Topology().ComputeNodes()) == 3 }, 30*time.Second, 10*time.Millisecond)

	// Leaving frees the id; the next process to join takes the lowest free one.
	require.NoError(t, fs[1].Close())
	f4 := dialN(t, cl, 1, Options{})[0]
	require.Equal(t, farmem.ComputeID(2), f4.ComputeID())

	// A crashed process's id is freed when its lease runs out.
	fs[2].crash(nil)
	require.Eventually(t, func() bool {
		f, err := Dial(context.Background(), cl, Options{Secret: testSecret, Logger: testLogger(), ComputeID: 3})
		if err != nil {
			require.ErrorIs(t, err, farmem.ErrNoSpace)
			return false
		}
		t.Cleanup(func() { _ = f.Close() })
		return f.ComputeID() == 3
	}, 30*time.Second, 50*time.Millisecond)
}

func TestStaticComputeNodes(t *testing.T) {
	_, cl := startServers(t, 1, 1<<20)
	addrs := make([]string, 2)
	for i := range addrs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addrs[i] = ln.Addr().String()
		require.NoError(t, ln.Close())
	}
	text := cl.String() + "compute 1 " + addrs[0] + "\ncompute 2 " + addrs[1] + "\n"
	cl2, err := ParseCluster(strings.NewReader(text))
	require.NoError(t, err)
	a := dialN(t, cl2, 1, Options{ComputeID: 1})[0]
	b := dialN(t, cl2, 1, Options{ComputeID: 2})[0]
	require.Equal(t, addrs[1], b.Addr())
	require.Len(t, a.Topology().ComputeNodes(), 2)
	require.NoError(t, b.Handle(b.Hosted()[0], 1, func(context.Context, farmem.Memory, farmem.ClientID, []byte) ([]byte, error) {
		return []byte("static"), nil
	}))
	r, err := openOne(t, a).Call(context.Background(), b.Hosted()[0], 1, nil)
	require.NoError(t, err)
	require.Equal(t, "static", string(r))
	_, err = Dial(context.Background(), cl2, Options{Secret: testSecret, ComputeID: 3, Logger: testLogger()})
	require.ErrorIs(t, err, farmem.ErrInvalid, "a compute id the file does not list")
}

func TestClusterFile(t *testing.T) {
	text := `# a cluster
memory 2 127.0.0.1:7002 size=4GiB   # stated size
memory 1 127.0.0.1:7001
secret-file secret
down-timeout 250ms
lease 3s
clients-per-node 32
slice-size 8KiB
shared-size 2MiB
`
	c, err := ParseCluster(strings.NewReader(text))
	require.NoError(t, err)
	require.Equal(t, []NodeAddr{{ID: 2, Addr: "127.0.0.1:7002", Size: 4 << 30}, {ID: 1, Addr: "127.0.0.1:7001"}}, c.Memory)
	require.Equal(t, farmem.NodeID(1), c.Registry, "default registry: the lowest memory id")
	require.Equal(t, 250*time.Millisecond, c.DownTimeout)
	require.Equal(t, 3*time.Second, c.Lease)
	require.Equal(t, 32, c.ClientsPerNode)
	require.Equal(t, uint64(8<<10), c.SliceSize)
	require.Equal(t, uint64(2<<20), c.SharedSize)
	again, err := ParseCluster(strings.NewReader(c.String()))
	require.NoError(t, err)
	require.Equal(t, c, again, "String writes what ParseCluster reads")

	for _, bad := range []string{
		"", "memory 0 a:1", "memory 1 nohostport", "memory 1 a:1\nmemory 1 a:2", "memory 1 a:1 size=x",
		"memory 40000 a:1", "compute 1 a:1", "memory 1 a:1\nregistry 2", "memory 1 a:1\nlease -1s",
		"memory 1 a:1\nbogus 1", "memory 1 a:1\nclients-per-node 1",
	} {
		_, err := ParseCluster(strings.NewReader(bad))
		require.ErrorIs(t, err, farmem.ErrInvalid, "%q", bad)
	}
	for s, want := range map[string]uint64{"0": 0, "64": 64, "4k": 4096, "1MiB": 1 << 20, "2GB": 2 << 30, "1T": 1 << 40} {
		got, err := ParseSize(s)
		require.NoError(t, err, s)
		require.Equal(t, want, got, s)
	}
	for _, s := range []string{"", "x", "1X", "-1", "99999999999T"} {
		_, err := ParseSize(s)
		require.Error(t, err, s)
	}
}

func FuzzParseCluster(f *testing.F) {
	f.Add("memory 1 127.0.0.1:1 size=1M\nregistry 1\nlease 2s\n")
	f.Add("memory 1 a:1\ncompute 1 b:2\nslice-size 1K # c\n")
	f.Fuzz(func(t *testing.T, text string) {
		c, err := ParseCluster(strings.NewReader(text))
		if err != nil {
			return
		}
		again, err := ParseCluster(strings.NewReader(c.String()))
		if err != nil {
			t.Fatalf("String() of a parsed cluster does not parse: %v\n%s", err, c.String())
		}
		require.Equal(t, c, again)
	})
}

// FuzzServerConn feeds arbitrary bytes to an authenticated server connection: the server
// never panics, answers or closes, and keeps serving others.
func FuzzServerConn(f *testing.F) {
	op := farmem.Op{Kind: farmem.OpFAA, Addr: farmem.MakeAddr(1, 64), Swap: 1}
	b, start := wire.BeginFrame(nil, wire.TypeBatch, 0, 1)
	b = wire.EndFrame(wire.AppendOp(wire.AppendBatchCount(b, 1), &op, 0), start)
	f.Add(b)
	f.Add(wire.AppendHeader(nil, wire.Header{Type: wire.TypePing, ID: 3}))
	c, start := wire.BeginFrame(nil, wire.TypeCtl, 0, 2)
	f.Add(wire.EndFrame(append(c, byte(wire.CtlJoin), '{', '}'), start))
	d, start := wire.BeginFrame(nil, wire.TypeCall, 0, 2)
	f.Add(wire.EndFrame(wire.AppendCall(d, 1, 1, nil), start))
	e, start := wire.BeginFrame(nil, wire.TypeMsg, 0, 3)
	f.Add(wire.EndFrame(wire.AppendCall(e, 1, 1, []byte("m")), start))
	s := newSrv(1, heapRegion(1<<16), testSecret, testLogger(), limits{maxConns: 16, maxOutstanding: 4,
		maxFrame: wire.DefaultMaxFrame, handshake: time.Second, writeTimeout: time.Second})
	s.members = newRegistry()
	f.Fuzz(func(t *testing.T, input []byte) {
		client, server := net.Pipe()
		sc := &sconn{s: s, nc: server, br: bufio.NewReaderSize(server, 64<<10)}
		s.mu.Lock()
		s.conns[sc] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		done := make(chan struct{})
		go func() { sc.run(); close(done) }()
		_ = client.SetDeadline(time.Now().Add(2 * time.Second))
		_, err := wire.ClientHandshake(client, client, 0, 1, wire.PurposeData, testSecret)
		if err != nil {
			t.Fatalf("handshake: %v", err)
		}
		go func() { _, _ = io.Copy(io.Discard, client) }()
		_, _ = client.Write(input)
		_ = client.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("the server connection did not end")
		}
	})
}

// A Call whose handler runs longer than the down timeout on a live node succeeds: the caller
// pings the quiet connection and the node answers.
func TestSlowCallIsNotDown(t *testing.T) {
	t.Parallel() // waits out a slow handler
	_, cl := startServers(t, 1, 1<<20)
	// A down timeout a busy machine's handshakes and pings stay within (100 ms did not always),
	// and a handler four times as slow.
	const down = 500 * time.Millisecond
	cl.DownTimeout = down
	fs := dialN(t, cl, 2, Options{})
	require.NoError(t, fs[1].Handle(fs[1].Hosted()[0], 1, func(ctx context.Context, _ farmem.Memory, _ farmem.ClientID, _ []byte) ([]byte, error) {
		time.Sleep(4 * down)
		return []byte("done"), nil
	}))
	r, err := openOne(t, fs[0]).Call(context.Background(), fs[1].Hosted()[0], 1, nil)
	require.NoError(t, err)
	require.Equal(t, "done", string(r))
}

func TestConnectionLimit(t *testing.T) {
	s, err := NewServer(ServerOptions{Node: 1, Size: 1 << 20, Secret: testSecret, MaxConns: 1, Logger: testLogger()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	addr, err := s.Listen("127.0.0.1:0")
	require.NoError(t, err)
	_, err = dialRaw(t, addr, testSecret, 1)
	require.NoError(t, err)
	_, err = QueryStatus(context.Background(), addr, testSecret, time.Second)
	require.ErrorIs(t, err, ErrRefused)
	require.ErrorContains(t, err, "too many connections")
}

// A node that hangs under an established connection is reported down by the monitor within
// the down timeout (farmemtest's hang test opens fresh clients, whose handshake times out).
func TestHangOnEstablishedConnection(t *testing.T) {
	t.Parallel() // waits out a down timeout
	servers, cl := startServers(t, 1, 1<<20)
	// A down timeout a busy machine's connect stays within (100 ms did not always).
	const down = 500 * time.Millisecond
	cl.DownTimeout = down
	m := openOne(t, dialN(t, cl, 1, Options{})[0])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := farmem.MakeAddr(1, 64<<10)
	_, err := m.FAA(ctx, a, 1)
	require.NoError(t, err)
	require.NoError(t, servers[0].Hang())
	start := time.Now()
	_, err = m.FAA(ctx, a, 1)
	require.ErrorIs(t, err, farmem.ErrNodeDown)
	took := time.Since(start)
	require.GreaterOrEqual(t, took, down, "reported down before the down timeout")
	// Not the connection's own (minutes-long) TCP timeout; generous for a loaded machine, as
	// the conformance suite's bound is.
	require.Less(t, took, 2*down+5*time.Second)
	var b farmem.Batch
	b.FAA(a, 1)
	require.NoError(t, servers[0].Resume())
	require.NoError(t, m.Do(ctx, &b), "the resumed node serves a new connection")
}

// A batch nobody waits for still completes: the monitor finds its answer without a reader.
func TestUnwaitedBatchCompletes(t *testing.T) {
	_, cl := startServers(t, 1, 1<<20)
	cl.DownTimeout = 200 * time.Millisecond
	m := openOne(t, dialN(t, cl, 1, Options{})[0])
	var b farmem.Batch
	b.FAA(farmem.MakeAddr(1, 64<<10), 1)
	p := m.Post(context.Background(), &b)
	require.Eventually(t, func() bool { return p.OpDone(0) }, time.Second, time.Millisecond)
	_, err := b.Result(0)
	require.NoError(t, err)
	time.Sleep(300 * time.Millisecond)
	prev, err := m.FAA(context.Background(), farmem.MakeAddr(1, 64<<10), 1)
	require.NoError(t, err, "the connection was not mistaken for a dead one")
	require.Equal(t, uint64(1), prev)
}

// A caller whose context ends stops reading between frames: the connection stays intact for
// the next request.
func TestCanceledWaitLeavesConnectionIntact(t *testing.T) {
	_, cl := startServers(t, 1, 1<<20)
	cl.DownTimeout = 5 * time.Second
	fs := dialN(t, cl, 2, Options{})
	require.NoError(t, fs[1].Handle(fs[1].Hosted()[0], 1, func(_ context.Context, _ farmem.Memory, _ farmem.ClientID, req []byte) ([]byte, error) {
		if len(req) > 0 {
			time.Sleep(2 * time.Second)
		}
		return []byte("pong"), nil
	}))
	m := openOne(t, fs[0])
	node := fs[1].Hosted()[0]
	_, err := m.Call(context.Background(), node, 1, nil) // connect
	require.NoError(t, err)
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		start := time.Now()
		_, err = m.Call(ctx, node, 1, []byte("slow"))
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Less(t, time.Since(start), time.Second, "the canceled read returned before the answer")
		r, err := m.Call(context.Background(), node, 1, nil)
		require.NoError(t, err, "the connection survived the canceled read")
		require.Equal(t, "pong", string(r))
	}
}
