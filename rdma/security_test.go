package rdma

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/internal/wire"
)

// rawConn is a hand-driven client connection, for sending what a Fabric never would.
type rawConn struct {
	t   testing.TB
	nc  net.Conn
	br  *bufio.Reader
	w   wire.Welcome
	hdr [wire.HeaderSize]byte
}

func dialRaw(t testing.TB, addr string, secret []byte, client farmem.ClientID) (*rawConn, error) {
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(nc)
	w, err := wire.ClientHandshake(nc, br, 0, client, wire.PurposeData, secret)
	return &rawConn{t: t, nc: nc, br: br, w: w}, err
}

// batch sends ops (addressed by offset, with region key) and returns the Result's statuses
// and values.
func (r *rawConn) batch(id uint64, key uint32, ops ...farmem.Op) ([]wire.Status, []uint64) {
	b, start := wire.BeginFrame(nil, wire.TypeBatch, 0, id)
	b = wire.AppendBatchCount(b, len(ops))
	for i := range ops {
		b = wire.AppendOp(b, &ops[i], key)
	}
	_, err := r.nc.Write(wire.EndFrame(b, start))
	require.NoError(r.t, err)
	h, p, err := wire.ReadFrame(r.br, &r.hdr, nil, wire.DefaultMaxFrame)
	require.NoError(r.t, err)
	require.Equal(r.t, wire.TypeResult, h.Type)
	require.Equal(r.t, id, h.ID)
	var rs wire.Results
	n, err := rs.Reset(p)
	require.NoError(r.t, err)
	require.Equal(r.t, len(ops), n)
	var sts []wire.Status
	var vals []uint64
	for i := range ops {
		st, v, _, err := rs.Next(ops[i].Kind, len(ops[i].Buf))
		require.NoError(r.t, err)
		sts = append(sts, st)
		vals = append(vals, v)
	}
	require.NoError(r.t, rs.End())
	return sts, vals
}

func TestWrongSecretRefused(t *testing.T) {
	servers, cl := startServers(t, 1, 1<<20)
	_, err := Dial(context.Background(), cl, Options{Secret: []byte("another-secret-of-enough-bytes"), Logger: testLogger()})
	require.ErrorIs(t, err, ErrAuth)
	require.ErrorContains(t, err, "authentication failed")
	_, err = dialRaw(t, cl.Memory[0].Addr, []byte("another-secret-of-enough-bytes"), 1)
	var re *wire.RefusedError
	require.ErrorAs(t, err, &re)
	require.Equal(t, wire.ReasonAuth, re.Reason)
	require.Equal(t, uint64(2), servers[0].Status().Refused)

	// A node that does not hold the secret cannot pass for one: the client checks its proof.
	imp, err := NewServer(ServerOptions{Node: 1, Size: 1 << 20, Secret: []byte("impostor-secret-0123456789"), Logger: testLogger()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = imp.Close() })
	addr, err := imp.Listen("127.0.0.1:0")
	require.NoError(t, err)
	_, err = QueryStatus(context.Background(), addr, testSecret, time.Second)
	require.ErrorIs(t, err, ErrAuth)
}

func TestServerChecksEveryOp(t *testing.T) {
	servers, cl := startServers(t, 1, 1<<20)
	r, err := dialRaw(t, cl.Memory[0].Addr, testSecret, 1)
	require.NoError(t, err)
	key := r.w.Key
	a := farmem.MakeAddr(1, 64<<10)
	good := farmem.Op{Kind: farmem.OpWrite, Addr: a, Buf: []byte{1, 2, 3, 4, 5, 6, 7, 8}}
	for _, tc := range []struct {
		name string
		op   farmem.Op
		key  uint32
		want error
	}{
		{"out of range", farmem.Op{Kind: farmem.OpRead, Addr: farmem.MakeAddr(1, 1<<20-4), Buf: make([]byte, 8)}, key, farmem.ErrOutOfRange},
		{"past the end", farmem.Op{Kind: farmem.OpFAA, Addr: farmem.MakeAddr(1, 1<<20), Swap: 1}, key, farmem.ErrOutOfRange},
		{"misaligned", farmem.Op{Kind: farmem.OpCAS, Addr: a.Add(4), Cmp: 0, Swap: 1}, key, farmem.ErrMisaligned},
		{"misaligned mcas", farmem.Op{Kind: farmem.OpMaskedCAS, Addr: a.Add(1), SwapMask: 1, Swap: 1}, key, farmem.ErrMisaligned},
		{"wrong key", farmem.Op{Kind: farmem.OpFAA, Addr: a.Add(8), Swap: 1}, key + 1, ErrBadKey},
	} {
		// The bad op goes with a good write, which must not apply.
		b, start := wire.BeginFrame(nil, wire.TypeBatch, 0, 7)
		b = wire.AppendBatchCount(b, 2)
		b = wire.AppendOp(b, &good, key)
		b = wire.AppendOp(b, &tc.op, tc.key)
		_, err := r.nc.Write(wire.EndFrame(b, start))
		require.NoError(t, err)
		h, p, err := wire.ReadFrame(r.br, &r.hdr, nil, wire.DefaultMaxFrame)
		require.NoError(t, err, tc.name)
		require.Equal(t, wire.TypeResult, h.Type)
		var rs wire.Results
		_, err = rs.Reset(p)
		require.NoError(t, err)
		st0, _, _, err := rs.Next(farmem.OpWrite, 8)
		require.NoError(t, err)
		st1, _, _, err := rs.Next(tc.op.Kind, len(tc.op.Buf))
		require.NoError(t, err)
		require.ErrorIs(t, st0.Err(), farmem.ErrAborted, tc.name)
		require.ErrorIs(t, st1.Err(), tc.want, tc.name)
	}
	sts, _ := r.batch(8, key, farmem.Op{Kind: farmem.OpRead, Addr: a, Buf: make([]byte, 8)})
	require.Equal(t, []wire.Status{wire.StatusOK}, sts)
	buf := make([]byte, 8)
	servers[0].s.reg.mem.ReadAt(buf, a.Offset(), nil)
	require.Equal(t, make([]byte, 8), buf, "a refused batch applied its good op")

	// The same errors through a Fabric: bounds and alignment are checked before sending too.
	f := dialN(t, cl, 1, Options{})[0]
	m, err := f.Open(context.Background(), f.Hosted()[0])
	require.NoError(t, err)
	ctx := context.Background()
	require.ErrorIs(t, m.Read(ctx, farmem.MakeAddr(1, 1<<20-4), make([]byte, 8)), farmem.ErrOutOfRange)
	_, err = m.CAS(ctx, a.Add(4), 0, 1)
	require.ErrorIs(t, err, farmem.ErrMisaligned)
}

// syncBuffer is a log sink tests can read while servers write to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestMalformedFrameClosesOnlyItsConnection(t *testing.T) {
	var logs syncBuffer
	s, err := NewServer(ServerOptions{Node: 1, Size: 1 << 20, Secret: testSecret, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	addr, err := s.Listen("127.0.0.1:0")
	require.NoError(t, err)
	good, err := dialRaw(t, addr, testSecret, 1)
	require.NoError(t, err)

	for i, garbage := range [][]byte{
		{0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},                             // bad magic
		wire.AppendHeader(nil, wire.Header{Type: wire.TypeBatch, Len: wire.DefaultMaxFrame + 1}), // too long
		append(wire.AppendHeader(nil, wire.Header{Type: wire.TypeBatch, Len: 3}), 1, 0, 99),      // bad op kind
		wire.AppendHeader(nil, wire.Header{Type: wire.TypeResult}),                               // a reply sent to the server
	} {
		bad, err := dialRaw(t, addr, testSecret, 2)
		require.NoError(t, err)
		_, err = bad.nc.Write(garbage)
		require.NoError(t, err)
		h, p, err := wire.ReadFrame(bad.br, &bad.hdr, nil, wire.DefaultMaxFrame)
		require.NoError(t, err, "case %d: the server says why before closing", i)
		require.Equal(t, wire.TypeError, h.Type)
		_, msg, err := wire.DecodeMessage(p)
		require.NoError(t, err)
		t.Logf("case %d: %s", i, msg)
		_, _, err = wire.ReadFrame(bad.br, &bad.hdr, nil, wire.DefaultMaxFrame)
		require.ErrorIs(t, err, io.EOF, "case %d: the connection is closed", i)
		// The other connection is unaffected.
		sts, _ := good.batch(uint64(i+1), good.w.Key, farmem.Op{Kind: farmem.OpFAA, Addr: farmem.MakeAddr(1, 64<<10), Swap: 1})
		require.Equal(t, []wire.Status{wire.StatusOK}, sts)
	}
	require.Equal(t, uint64(4), s.Status().Violations)
	require.Equal(t, 4, strings.Count(logs.String(), "protocol violation"), logs.String())
}

func TestStaleKeyAfterRestart(t *testing.T) {
	servers, cl := startServers(t, 1, 1<<20)
	cl.DownTimeout = 200 * time.Millisecond
	f := dialN(t, cl, 1, Options{})[0]
	m, err := f.Open(context.Background(), f.Hosted()[0])
	require.NoError(t, err)
	ctx := context.Background()
	a := farmem.MakeAddr(1, 64<<10)
	_, err = m.FAA(ctx, a, 5)
	require.NoError(t, err)

	// The node restarts at the same address: new memory, new key.
	s := restartNode1(t, servers, cl)

	_, err = m.FAA(ctx, a, 1)
	if errors.Is(err, farmem.ErrNodeDown) {
		// This op found the old connection still open and learned of its end; the next one
		// connects to the new incarnation.
		_, err = m.FAA(ctx, a, 1)
	}
	require.ErrorIs(t, err, farmem.ErrNodeLost, "the new incarnation fences the node")
	require.ErrorIs(t, err, farmem.ErrNodeDown)
	require.NotErrorIs(t, err, farmem.ErrOutOfRange)
	buf := make([]byte, 8)
	s.s.reg.mem.ReadAt(buf, a.Offset(), nil)
	require.Equal(t, make([]byte, 8), buf, "the new incarnation's memory was not touched")
	st, err := f.NodeStatus(1)
	require.NoError(t, err)
	require.Equal(t, farmem.NodeLost, st.State)
	require.Equal(t, s.s.inc, st.Seen)
	require.NotEqual(t, st.Seen, st.Incarnation)

	// Adoption lifts the fence: this fabric now reaches the new, zeroed memory.
	require.NoError(t, f.Adopt(ctx, 1))
	st, err = f.NodeStatus(1)
	require.NoError(t, err)
	require.Equal(t, farmem.NodeStatus{ID: 1, State: farmem.NodeUp, Incarnation: s.s.inc, Seen: s.s.inc}, st)
	prev, err := m.FAA(ctx, a, 3)
	require.NoError(t, err)
	require.Zero(t, prev, "the new incarnation's memory")

	// A fabric dialed now learns the new key.
	f2 := dialN(t, cl, 1, Options{})[0]
	m2, err := f2.Open(ctx, f2.Hosted()[0])
	require.NoError(t, err)
	prev, err = m2.FAA(ctx, a, 1)
	require.NoError(t, err)
	require.Equal(t, uint64(3), prev, "the first fabric's op after adoption landed in the new memory")
}
