package rdma

import (
	"context"
	"fmt"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
	"github.com/farmem/farmem/internal/wire"
)

// Send implements farmem.Memory. A message to another compute node is a Msg frame on this
// client's connection to it, in a slot of the connection's outstanding window like a Call: Send
// waits (until ctx ends) only for a connection still being set up (so a Send to a crashed node
// fails with ErrNodeDown) and when the window is full, and returns once the frame is written or
// queued for the connection's writer. The target queues it in its inbox, one FIFO lane per sender, runs it on a handler
// client, and then acknowledges it with an empty CallReply, which frees the slot; a lost
// connection frees it with the rest of the window (delivery is at most once). A message to
// this client's own node joins the inbox directly. See the package doc for the bounds.
func (c *client) Send(ctx context.Context, node farmem.NodeID, method uint16, req []byte) error {
	if err := c.usable(); err != nil {
		return err
	}
	if err := transport.CheckSend(node, req); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	var err error
	if node == c.ClientInfo.Node {
		m := transport.Message{From: c.ClientInfo.ID, Method: method, Req: append([]byte(nil), req...)}
		err = c.f.inbox.Put(ctx, c.f.ctx.Done(), m)
	} else if c.f.peer(ctx, node) == nil {
		err = fmt.Errorf("rdma: send to %v: no such compute node: %w", node, farmem.ErrInvalid)
	} else {
		var q *tcpQP
		if q, err = c.tcp(ctx, node); err == nil {
			err = q.sendMsg(ctx, method, c.ClientInfo.ID, req)
		}
	}
	if err != nil {
		return fmt.Errorf("rdma: send %s to %v: %w", transport.MethodName(method), node, err)
	}
	c.Counters.CountMessage(len(req))
	return nil
}

// sendMsg writes a Msg frame in a slot of the window; the slot is freed by the target's
// acknowledgement, which the connection's reader takes.
func (q *tcpQP) sendMsg(ctx context.Context, method uint16, from farmem.ClientID, req []byte) error {
	l := q.l
	if l.shared {
		return fmt.Errorf("rdma: message on a shared connection to %v: %w", q.p.id, farmem.ErrNotSupported)
	}
	// A connection being set up has not taken the message yet: wait for its handshake (bounded
	// by the down timeout), so that a Send to a node that refuses connections (crashed) fails.
	select {
	case <-l.upCh:
	case <-q.deadCh:
		return q.deadErr()
	case <-ctx.Done():
		return ctx.Err()
	}
	cw := &callWait{ch: make(chan struct{}, 1)} // nobody waits on it
	id, _, err := q.acquire(ctx, qslot{call: cw})
	if err != nil {
		return err
	}
	l.wmu.Lock()
	buf, start := wire.BeginFrame(l.wbuf[:0], wire.TypeMsg, 0, id)
	buf = wire.EndFrame(wire.AppendCall(buf, method, from, req), start)
	err = l.writeLocked(q, buf, true, false)
	l.wmu.Unlock()
	if err != nil {
		q.fail(err)
		return err
	}
	l.kickReader()
	return nil
}

// serveMessage queues a message that arrived on a connection. A full inbox drops it (the
// sender's window already bounds what one connection has in flight); done acknowledges it.
func (f *Fabric) serveMessage(from farmem.ClientID, method uint16, req []byte, done func()) {
	full, cancel := context.WithCancel(context.Background())
	cancel() // never wait for room: the connection's reader must not block
	m := transport.Message{From: from, Method: method, Req: req, Done: done}
	if err := f.inbox.Put(full, f.ctx.Done(), m); err != nil {
		f.log.Debug("message dropped", "method", transport.MethodName(method), "from", from, "err", err)
		done()
	}
}

// runMessage runs one message of the inbox on a handler client.
func (f *Fabric) runMessage(m transport.Message) {
	f.handlers.ServeMessage(f.ctx, m.Method, m.From, m.Req)
}

// msg takes a Msg frame: it counts against the connection's outstanding limit like a Call
// until its handler has run, and is acknowledged then.
func (c *sconn) msg(h wire.Header, p []byte) error {
	method, from, req, err := wire.DecodeCall(p)
	if err != nil {
		return err
	}
	if c.s.msgs == nil {
		c.reply(h.ID, fmt.Errorf("rdma: message to memory node %v: %w", c.s.node, farmem.ErrInvalid), nil)
		return nil
	}
	if int(c.calls.Add(1)) > c.s.lim.maxOutstanding {
		return fmt.Errorf("more than %d calls and messages outstanding", c.s.lim.maxOutstanding)
	}
	req = append([]byte(nil), req...) // the frame buffer is reused
	c.s.msgs(from, method, req, func() {
		c.calls.Add(-1)
		if c.s.silent(c.client) || c.s.state.Load() == stateCrashed {
			return
		}
		c.reply(h.ID, nil, nil)
		if err := c.flush(); err != nil {
			c.abort()
		}
	})
	return nil
}
