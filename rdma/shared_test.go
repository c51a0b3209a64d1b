package rdma

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/internal/wire"
)

// serverConns counts a server's authenticated shared connections and its other ones.
func serverConns(s *Server) (shared, other int) {
	s.s.mu.Lock()
	defer s.s.mu.Unlock()
	for c := range s.s.conns {
		switch {
		case c.shared:
			shared++
		case c.authed:
			other++
		}
	}
	return shared, other
}

// linkOf returns client m's link to node.
func linkOf(t *testing.T, m farmem.Memory, node farmem.NodeID) *tlink {
	t.Helper()
	c := m.(*client)
	c.qmu.Lock()
	defer c.qmu.Unlock()
	q, ok := c.qps[node].(*tcpQP)
	require.True(t, ok, "no tcp queue pair to %v", node)
	return q.l
}

// Several clients of one process interleave verbs on the one connection they share: each sees
// its own results, counts one round trip per verb, and the node serves one data connection.
func TestSharedConnInterleaves(t *testing.T) {
	servers, cl := startServers(t, 1, 1<<20)
	f := dialN(t, cl, 1, Options{SharedConns: true})[0]
	ctx := context.Background()
	const clients, rounds = 8, 200
	ms := make([]farmem.Memory, clients)
	for i := range ms {
		ms[i] = openOne(t, f)
	}
	common := farmem.MakeAddr(1, 64<<10)
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			own := farmem.MakeAddr(1, uint64(128<<10+i*64))
			buf := make([]byte, 8)
			for r := range rounds {
				if prev, err := m.FAA(ctx, own, 1); err != nil || prev != uint64(r) {
					errs <- errors.Join(err, errors.New("own counter out of step"))
					return
				}
				if _, err := m.FAA(ctx, common, 1); err != nil {
					errs <- err
					return
				}
				var b farmem.Batch // a batch of two, one round trip
				b.Read(own, buf)
				b.FAA(own.Add(8), 1)
				if err := m.Do(ctx, &b); err != nil {
					errs <- err
					return
				}
				if v := binary.LittleEndian.Uint64(buf); v != uint64(r+1) {
					errs <- errors.New("read its own counter wrong")
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, m := range ms {
		require.Equal(t, uint64(3*rounds), m.Stats().RoundTrips, "one round trip per verb and per batch")
	}
	buf := make([]byte, 8)
	require.NoError(t, ms[0].Read(ctx, common, buf))
	require.Equal(t, uint64(clients*rounds), binary.LittleEndian.Uint64(buf))
	l := linkOf(t, ms[0], 1)
	for _, m := range ms {
		require.Same(t, l, linkOf(t, m, 1), "every client is on the one shared link")
	}
	shared, _ := serverConns(servers[0])
	require.Equal(t, 1, shared, "the node serves one shared connection")
}

// A lone client on a shared connection costs what it costs on its own: each verb one round
// trip, one write and one read on the client's side (counted as the reader writes its frame
// and reads the answer; see the syscall tests in cmd/farmemd for the process counts).
func TestSharedConnRoundTrips(t *testing.T) {
	_, cl := startServers(t, 1, 1<<20)
	f := dialN(t, cl, 1, Options{SharedConns: true})[0]
	m := openOne(t, f)
	ctx := context.Background()
	a := farmem.MakeAddr(1, 64<<10)
	_, err := m.FAA(ctx, a, 1)
	require.NoError(t, err)
	before := m.Stats()
	const n = 50
	for range n {
		_, err := m.FAA(ctx, a, 1)
		require.NoError(t, err)
	}
	var b farmem.Batch
	b.FAA(a, 1)
	b.Read(a.Add(8), make([]byte, 16))
	require.NoError(t, m.Do(ctx, &b))
	after := m.Stats()
	require.Equal(t, uint64(n+1), after.RoundTrips-before.RoundTrips)
}

// A client partitioned from the node on a shared connection fails alone, after the down
// timeout, while the other clients on the connection are served meanwhile; once healed, it is
// served again on the same connection (its channel was detached and another attached), and
// nothing it posted during the partition applied.
func TestSharedConnPartitionOneClient(t *testing.T) {
	t.Parallel() // waits out a down timeout
	servers, cl := startServers(t, 1, 1<<20)
	cl.DownTimeout = 300 * time.Millisecond
	f := dialN(t, cl, 1, Options{SharedConns: true})[0]
	in := NewInjector(servers, []*Fabric{f})
	ctx := context.Background()
	cut, other := openOne(t, f), openOne(t, f)
	a := farmem.MakeAddr(1, 64<<10)
	_, err := cut.FAA(ctx, a, 1)
	require.NoError(t, err)
	_, err = other.FAA(ctx, a.Add(8), 1)
	require.NoError(t, err)
	l := linkOf(t, other, 1)
	require.Same(t, l, linkOf(t, cut, 1))

	require.NoError(t, in.Partition(cut.(*client).ClientInfo.ID, 1))
	done := make(chan error, 1)
	go func() {
		_, err := cut.FAA(ctx, a, 100)
		done <- err
	}()
	served := 0
	for waiting := true; waiting; {
		select {
		case err := <-done:
			require.ErrorIs(t, err, farmem.ErrNodeDown, "the cut-off client's verb times out")
			waiting = false
		default:
			_, err := other.FAA(ctx, a.Add(8), 1)
			require.NoError(t, err, "the other client is served during the partition")
			served++
		}
	}
	require.Positive(t, served)
	require.False(t, l.dead.Load(), "the shared connection outlived the cut-off client's failure")

	require.NoError(t, in.Heal(cut.(*client).ClientInfo.ID, 1))
	var prev uint64
	require.Eventually(t, func() bool {
		prev, err = cut.FAA(ctx, a, 1)
		return err == nil
	}, 30*time.Second, 5*time.Millisecond, "healed")
	require.Equal(t, uint64(1), prev, "nothing posted during the partition applied")
	require.Same(t, l, linkOf(t, cut, 1), "the healed client is back on the same connection")
	require.Same(t, l, linkOf(t, other, 1))
	_, err = other.FAA(ctx, a.Add(8), 1)
	require.NoError(t, err)
	shared, _ := serverConns(servers[0])
	require.Equal(t, 1, shared)
}

// A client that closes, or crashes, while others share its connection takes only itself down;
// its channels are detached, and a client opened later attaches to the same connection.
func TestSharedConnCloseAndCrashOneClient(t *testing.T) {
	servers, cl := startServers(t, 1, 1<<20)
	f := dialN(t, cl, 1, Options{SharedConns: true})[0]
	in := NewInjector(servers, []*Fabric{f})
	ctx := context.Background()
	a := farmem.MakeAddr(1, 64<<10)
	stay := openOne(t, f)
	_, err := stay.FAA(ctx, a, 1)
	require.NoError(t, err)
	l := linkOf(t, stay, 1)
	for _, crash := range []bool{false, true} {
		m, err := f.Open(ctx, f.Hosted()[0])
		require.NoError(t, err)
		_, err = m.FAA(ctx, a, 1)
		require.NoError(t, err)
		// Leave batches in flight as it goes.
		var bs [4]farmem.Batch
		for i := range bs {
			bs[i].FAA(a, 1)
			m.Post(ctx, &bs[i])
		}
		if crash {
			require.NoError(t, in.CrashClient(m.(*client).ClientInfo.ID))
			_, err = m.FAA(ctx, a, 1)
			require.ErrorIs(t, err, farmem.ErrNodeDown)
		}
		require.NoError(t, m.Close())
		for range 20 {
			_, err := stay.FAA(ctx, a, 1)
			require.NoError(t, err, "the other client goes on")
		}
		require.Same(t, l, linkOf(t, stay, 1))
		require.False(t, l.dead.Load())
	}
	later := openOne(t, f)
	_, err = later.FAA(ctx, a, 1)
	require.NoError(t, err)
	require.Same(t, l, linkOf(t, later, 1))
	require.Eventually(t, func() bool {
		// The closed clients' channels are detached: the node holds the two live ones.
		c := sharedConnOf(servers[0])
		c.chmu.Lock()
		defer c.chmu.Unlock()
		return len(c.chans) == 2
	}, 10*time.Second, time.Millisecond)
}

// sharedConnOf returns a server's one shared connection.
func sharedConnOf(s *Server) *sconn {
	s.s.mu.Lock()
	defer s.s.mu.Unlock()
	for c := range s.s.conns {
		if c.shared {
			return c
		}
	}
	return nil
}

// send writes frames as they are.
func (r *rawConn) send(b []byte) {
	_, err := r.nc.Write(b)
	require.NoError(r.t, err)
}

// next reads the next frame.
func (r *rawConn) next() (wire.Header, []byte) {
	h, p, err := wire.ReadFrame(r.br, &r.hdr, nil, wire.DefaultMaxFrame)
	require.NoError(r.t, err)
	return h, append([]byte(nil), p...)
}

// faaFrame is a Batch frame of one FAA at offset off with id.
func faaFrame(id uint64, key uint32, off uint64) []byte {
	b, start := wire.BeginFrame(nil, wire.TypeBatch, 0, id)
	b = wire.AppendBatchCount(b, 1)
	op := farmem.Op{Kind: farmem.OpFAA, Addr: farmem.Addr(off), Swap: 1}
	b = wire.AppendOp(b, &op, key)
	return wire.EndFrame(b, start)
}

// On a shared connection, a request for a channel no Attach bound, or one Detach unbound, is
// refused with a Detached frame and applies nothing, and the connection goes on; binding a
// channel twice, a client 0, or a Call are protocol violations that close it.
func TestSharedConnRefusesUnboundChannels(t *testing.T) {
	servers, cl := startServers(t, 1, 1<<20)
	addr := cl.Memory[0].Addr
	r, err := dialSharedRaw(t, addr)
	require.NoError(t, err)
	key, off := r.w.Key, uint64(64<<10)
	id := wire.ChannelID(5) | 7

	r.send(faaFrame(id, key, off))
	h, _ := r.next()
	require.Equal(t, wire.TypeDetached, h.Type, "a request on an unbound channel is refused")
	require.Equal(t, id, h.ID)

	r.send(append(wire.AppendAttach(nil, 5, 42), faaFrame(id, key, off)...))
	h, _ = r.next()
	require.Equal(t, wire.TypeResult, h.Type, "bound, the channel is served")
	require.Equal(t, id, h.ID)

	r.send(append(wire.AppendDetach(nil, 5), faaFrame(id, key, off)...))
	h, _ = r.next()
	require.Equal(t, wire.TypeDetached, h.Type, "unbound again")

	// Client 42 may be bound to one channel at a time.
	r.send(append(wire.AppendAttach(nil, 6, 42), append(wire.AppendAttach(nil, 7, 42), faaFrame(wire.ChannelID(7)|1, key, off)...)...))
	h, _ = r.next()
	require.Equal(t, wire.TypeDetached, h.Type, "a client bound on another channel binds nothing")

	buf := make([]byte, 8)
	servers[0].s.reg.mem.ReadAt(buf, off, nil)
	require.Equal(t, uint64(1), binary.LittleEndian.Uint64(buf), "only the bound request applied")

	for _, bad := range [][]byte{
		append(wire.AppendAttach(nil, 6, 43), wire.AppendAttach(nil, 6, 44)...), // bound twice
		wire.AppendAttach(nil, 8, 0),     // client 0
		wire.AppendAttach(nil, 0, 45),    // channel 0
		callFrame(wire.ChannelID(6) | 1), // a Call
	} {
		r, err := dialSharedRaw(t, addr)
		require.NoError(t, err)
		r.send(bad)
		h, _ := r.next()
		require.Equal(t, wire.TypeError, h.Type, "a violation closes the connection, saying why")
		_, _, err = wire.ReadFrame(r.br, &r.hdr, nil, wire.DefaultMaxFrame)
		require.Error(t, err)
	}

	// An Attach on a connection of one client's own is a violation too.
	rd, err := dialRaw(t, addr, testSecret, 9)
	require.NoError(t, err)
	rd.send(wire.AppendAttach(nil, 6, 9))
	h, _ = rd.next()
	require.Equal(t, wire.TypeError, h.Type)
}

func callFrame(id uint64) []byte {
	b, start := wire.BeginFrame(nil, wire.TypeCall, 0, id)
	return wire.EndFrame(wire.AppendCall(b, 1, 1, nil), start)
}

// dialSharedRaw opens a hand-driven shared connection.
func dialSharedRaw(t *testing.T, addr string) (*rawConn, error) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(nc)
	w, err := wire.ClientHandshake(nc, br, 0, 0, wire.PurposeShared, testSecret)
	return &rawConn{t: t, nc: nc, br: br, w: w}, err
}

// A peer cannot make a node hold more than maxSharedClients channels on a shared connection:
// an Attach past the limit binds nothing, its channel's requests are refused, and the bound
// ones are served.
func TestSharedConnBoundsChannels(t *testing.T) {
	servers, cl := startServers(t, 1, 1<<20)
	r, err := dialSharedRaw(t, cl.Memory[0].Addr)
	require.NoError(t, err)
	var b []byte
	const extra = 16
	for ch := 1; ch <= maxSharedClients+extra; ch++ {
		b = wire.AppendAttach(b, uint16(ch), farmem.ClientID(ch))
	}
	key, off := r.w.Key, uint64(64<<10)
	last := wire.ChannelID(maxSharedClients+extra) | 1
	first := wire.ChannelID(1) | 1
	b = append(b, faaFrame(last, key, off)...)
	b = append(b, faaFrame(first, key, off)...)
	r.send(b)
	h, _ := r.next()
	require.Equal(t, wire.TypeDetached, h.Type, "the channel past the limit is not bound")
	require.Equal(t, last, h.ID)
	h, _ = r.next()
	require.Equal(t, wire.TypeResult, h.Type)
	require.Equal(t, first, h.ID)
	c := sharedConnOf(servers[0])
	require.NotNil(t, c)
	c.chmu.Lock()
	n := len(c.chans)
	c.chmu.Unlock()
	require.Equal(t, maxSharedClients, n)
}

// A partition of one client that heals before the client gives up: the node detaches the
// client's channel as the partition ends (frames of it were dropped) and says so, and the
// client's request caught by the partition fails then, with ErrNodeDown, without waiting out
// the down timeout, and applies nothing; the client's next verb attaches a new channel.
func TestSharedConnDetachedWhenPartitionHeals(t *testing.T) {
	servers, cl := startServers(t, 1, 1<<20)
	cl.DownTimeout = time.Minute // the client would not give up before the test ends
	f := dialN(t, cl, 1, Options{SharedConns: true})[0]
	in := NewInjector(servers, []*Fabric{f})
	ctx := context.Background()
	cut, other := openOne(t, f), openOne(t, f)
	a := farmem.MakeAddr(1, 64<<10)
	_, err := cut.FAA(ctx, a, 1)
	require.NoError(t, err)
	id := cut.(*client).ClientInfo.ID
	require.NoError(t, in.Partition(id, 1))
	done := make(chan error, 1)
	go func() {
		_, err := cut.FAA(ctx, a, 100)
		done <- err
	}()
	c := sharedConnOf(servers[0])
	require.Eventually(t, func() bool {
		c.chmu.Lock()
		defer c.chmu.Unlock()
		for _, sch := range c.chans {
			if sch.client == id && sch.dropped.Load() {
				return true
			}
		}
		return false
	}, 10*time.Second, time.Millisecond, "the node dropped the cut-off client's frame")
	_, err = other.FAA(ctx, a.Add(8), 1)
	require.NoError(t, err, "the other client is served")
	require.NoError(t, in.Heal(id, 1))
	err = <-done
	require.ErrorIs(t, err, farmem.ErrNodeDown)
	require.Contains(t, err.Error(), "detached")
	prev, err := cut.FAA(ctx, a, 1)
	require.NoError(t, err, "a new channel is attached")
	require.Equal(t, uint64(1), prev, "the request caught by the partition never applied")
	_, err = other.FAA(ctx, a.Add(8), 1)
	require.NoError(t, err)
	require.Zero(t, servers[0].Metrics().BatchesRefused["unbound"], "nothing was sent on the detached channel")
}

// A peer of protocol version 3 (before shared connections) is refused at the handshake with
// both versions named, whichever side is older: never a hang.
func TestOldProtocolRefused(t *testing.T) {
	_, cl := startServers(t, 1, 1<<20)
	nc, err := net.Dial("tcp", cl.Memory[0].Addr)
	require.NoError(t, err)
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	hello := wire.Hello{Client: 1, Purpose: wire.PurposeData}
	b, start := wire.BeginFrame(nil, wire.TypeHello, 0, 0)
	b = wire.EndFrame(hello.Append(b), start)
	b[1] = 3 // a version-3 client's hello
	_, err = nc.Write(b)
	require.NoError(t, err)
	var hdr [wire.HeaderSize]byte
	h, p, err := wire.ReadFrame(bufio.NewReader(nc), &hdr, nil, 4096)
	require.NoError(t, err)
	require.Equal(t, wire.TypeRefused, h.Type)
	_, msg, err := wire.DecodeMessage(p)
	require.NoError(t, err)
	require.Contains(t, msg, "protocol version 3, this build speaks 4")

	// A version-3 node: it refuses this client's hello in its own version's frame.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var hdr [wire.HeaderSize]byte
		_, _, _ = wire.ReadFrame(c, &hdr, nil, 4096)
		b, start := wire.BeginFrame(nil, wire.TypeRefused, 0, 0)
		b = wire.EndFrame(wire.AppendMessage(b, uint8(wire.ReasonProtocol), "the peer speaks protocol version 4, this build speaks 3"), start)
		b[1] = 3
		_, _ = c.Write(b)
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = handshake(c, bufio.NewReader(c), 1, 1, wire.PurposeShared, testSecret)
	require.ErrorIs(t, err, wire.ErrMalformed)
	require.Contains(t, err.Error(), "protocol version 3, this build speaks 4")
}
