package local

import (
	"context"
	"fmt"
	"time"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// Send implements farmem.Memory. The message joins the target node's inbox (one FIFO lane per
// sender, at most transport.InboxMessages messages queued on a node; a sender that finds it full
// waits, until ctx ends) and Send returns; the target runs it later on a handler client, after
// half the fabric's latency. A crashed target fails the Send at once; a message to a hung
// target waits in its inbox and runs if the node resumes within the down timeout, else it is
// dropped; a message across a partition is dropped (delivery is at most once).
func (c *client) Send(ctx context.Context, id farmem.NodeID, method uint16, req []byte) error {
	if err := c.Usable(); err != nil {
		return err
	}
	if err := transport.CheckSend(id, req); err != nil {
		return err
	}
	n := c.f.nodes[id]
	if n == nil {
		return fmt.Errorf("local: send to %v: no such node: %w", id, farmem.ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	switch c.f.reach(c, n) {
	case transport.Down:
		return fmt.Errorf("local: send %s to %v: crashed: %w", transport.MethodName(method), id, farmem.ErrNodeDown)
	case transport.Silent:
		if n.state.Load() != stateHung {
			c.Counters.CountMessage(len(req)) // lost in the partition
			return nil
		}
	}
	m := transport.Message{From: c.ClientInfo.ID, Method: method, Req: append([]byte(nil), req...)}
	if err := n.inbox.Put(ctx, n.ctx.Done(), m); err != nil {
		return fmt.Errorf("local: send %s to %v: %w", transport.MethodName(method), id, err)
	}
	c.Counters.CountMessage(len(req))
	return nil
}

// deliver runs one message from n's inbox: the request leg's latency, then the handler once
// the node is reachable (dropped if it stays hung past the down timeout or crashes).
func (n *node) deliver(m transport.Message) {
	f := n.f
	if d := f.delay(); d > 0 {
		if f.rt.Sleep(n.ctx, d/2) != nil {
			return
		}
	}
	if f.awaitReach(n.ctx, nil, n, time.Now().Add(f.opts.DownTimeout)) != nil {
		return
	}
	n.handlers.ServeMessage(n.ctx, m.Method, m.From, m.Req)
}
