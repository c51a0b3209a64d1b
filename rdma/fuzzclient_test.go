package rdma

import (
	"bufio"
	"context"
	"net"
	"testing"
	"time"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
	"github.com/farmem/farmem/internal/wire"
)

// FuzzClientConn plays a node that answers a batch with arbitrary bytes: the client never
// panics, and every op completes (with its result, or an error) once the stream ends.
func FuzzClientConn(f *testing.F) {
	res := wire.AppendResultCount(nil, 3)
	res, dst := wire.AppendRead(res, 8)
	copy(dst, "abcdefgh")
	res = wire.AppendWord(res, 7)
	res = wire.AppendWriteOK(res)
	frame, start := wire.BeginFrame(nil, wire.TypeResult, 0, 1<<32)
	f.Add(wire.EndFrame(append(frame, res...), start))
	f.Add(wire.AppendHeader(nil, wire.Header{Type: wire.TypePong}))
	e, start := wire.BeginFrame(nil, wire.TypeError, 0, 0)
	f.Add(wire.EndFrame(wire.AppendMessage(e, 5, "bye"), start))
	fab := &Fabric{down: time.Second, log: testLogger(), live: map[*tlink]struct{}{}, opts: Options{MaxOutstanding: 8}}
	fab.ctx = context.Background()
	f.Fuzz(func(t *testing.T, reply []byte) {
		c := &client{f: fab, qps: map[farmem.NodeID]qp{}}
		c.Init(farmem.ClientInfo{ID: 1}, nil, c.single, c.Post)
		p := newPeer(1, "pipe", 1<<20, nil)
		p.learn(wire.Welcome{Key: 9})
		q := newQP(c, p)
		cli, srv := net.Pipe()
		q.attachAsync(cli)
		a := farmem.MakeAddr(1, 64)
		var b farmem.Batch
		b.Read(a, make([]byte, 8))
		b.FAA(a, 1)
		b.Write(a, []byte("12345678"))
		// The node reads the request, answers with the fuzz input, and hangs up. (A pipe is
		// synchronous: it runs beside the client.)
		nodeErr := make(chan error, 1)
		go func() {
			defer srv.Close()
			var hdr [wire.HeaderSize]byte
			_ = srv.SetDeadline(time.Now().Add(5 * time.Second))
			if _, _, err := wire.ReadFrame(bufio.NewReader(srv), &hdr, nil, wire.DefaultMaxFrame); err != nil {
				nodeErr <- err
				return
			}
			_, _ = srv.Write(reply)
			nodeErr <- nil
		}()
		pend, comp := transport.NewPending(&b, transport.NewChanParker())
		q.post(context.Background(), &b, nil, &batchSink{c: c, comp: comp})
		if err := <-nodeErr; err != nil {
			t.Fatalf("reading the request: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := pend.Wait(ctx, 0); err != nil {
			t.Fatalf("ops did not complete: %v", err)
		}
		q.close(farmem.ErrClosed)
	})
}
