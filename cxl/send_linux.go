package cxl

import (
	"context"
	"fmt"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// metaOneWay marks a mailbox request as a one-way message (bit 48 of the slot's meta word). A
// process that does not know the flag serves it as a Call, which the sender also accepts.
const metaOneWay = 1 << 48

// Send implements farmem.Memory. The message travels like a Call's request, through a mailbox
// of the target's control block; the target's dispatcher takes it without a handler client,
// queues it in the node's inbox (one FIFO lane per sender, bounded by transport.InboxMessages
// and transport.InboxBytes) and at once answers an empty reply that frees the mailbox. Send
// returns then: it waits for the target to take the message, never for its handler, and
// while the target's inbox is full it waits for room (until ctx ends). Because a client has
// one message in a mailbox at a time and the target queues it before answering, a client's
// messages to a node run in the order sent. A message whose Send failed with ctx's error or
// ErrNodeDown may or may not run (delivery is at most once).
func (c *client) Send(ctx context.Context, node farmem.NodeID, method uint16, req []byte) error {
	if err := c.Usable(); err != nil {
		return err
	}
	if err := transport.CheckSend(node, req); err != nil {
		return fmt.Errorf("cxl: %w", err)
	}
	s := c.m.seg(node)
	if s == nil {
		return fmt.Errorf("cxl: send to %v: no such compute node: %w", node, farmem.ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, err := c.call(ctx, s, method, req, metaOneWay); err != nil {
		return err
	}
	c.Counters.CountMessage(len(req))
	return nil
}

// queue puts a one-way message the server has read into the node's inbox, waiting for room,
// and answers the sender with an empty reply.
func (sv *server) queue(meta uint64, from farmem.ClientID, method uint16, req []byte) {
	f := sv.f
	m := transport.Message{From: from, Method: method, Req: req}
	if err := f.inbox.Put(f.ctx, f.stop, m); err != nil {
		sv.reply(meta, transport.CodeOf(err), false, []byte(err.Error()))
		return
	}
	sv.reply(meta, transport.CodeOK, false, nil)
}

// runMessage runs one message of the inbox on a handler client.
func (f *Fabric) runMessage(m transport.Message) {
	f.handlers.ServeMessage(f.ctx, m.Method, m.From, m.Req)
}
