package sim

import (
	"context"
	"fmt"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// One-way messages (Send) in the simulator. A message is a call whose reply leg never
// happens: the request crosses the sender's NIC, the link and the target's NIC exactly like a
// Call's request, and then joins its sender's lane on the target. Each lane (one per sending
// client) runs its messages one at a time, in the order sent, on the node's handler clients
// (the same pool, CallCPU and queueing as Calls). In flight, a message to a (sender, node)
// pair never arrives before an earlier one, whatever the jitter. A node holds at most
// transport.InboxMessages messages sent to it and not yet finished; a sender that finds it
// full parks, in virtual time, until one finishes or its ctx ends.

// msgLane is one sender's queue of messages on a compute node.
type msgLane struct {
	q       []*call
	running bool // a message of the lane is running or waits for a handler client
}

// msgState is what a compute node keeps for one-way messages.
type msgState struct {
	lanes   map[farmem.ClientID]*msgLane
	ready   []*msgLane // lanes waiting for a handler client
	held    int        // messages sent to the node and not finished
	waiters []msgWaiter
}

type msgWaiter struct {
	p   *proc
	seq uint64
}

// lastArrive is the arrival time of a client's last message to each node (FIFO in flight).
type lastArrive map[farmem.NodeID]int64

// Send implements farmem.Memory: see the comment at the top of this file. It returns once the
// sender's NIC has the message, having charged OpCPU to the sender's cores.
func (c *client) Send(ctx context.Context, id farmem.NodeID, method uint16, req []byte) error {
	s := c.s
	p, adopted := s.enter()
	defer s.exit(p, adopted)
	c.gate(p)
	if err := c.usable(); err != nil {
		return err
	}
	n := s.node(id)
	switch {
	case n == nil:
		return fmt.Errorf("sim: send to %v: no such node: %w", id, farmem.ErrInvalid)
	case n.c == nil:
		return fmt.Errorf("sim: send to memory node %v: %w", id, farmem.ErrInvalid)
	case len(req) > farmem.MaxCallBytes:
		return fmt.Errorf("sim: message of %d bytes exceeds %d: %w", len(req), farmem.MaxCallBytes, farmem.ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.m.OpCPU > 0 {
		s.sleepUntil(p, c.n.c.cpu.run(s.nowNs, s.m.OpCPU), c)
	}
	ms := n.c.msgs()
	for ms.held >= transport.InboxMessages {
		if n.state == stateCrashed {
			break
		}
		c.parkOn(p, parkCall)
		ms.waiters = append(ms.waiters, msgWaiter{p, s.prepark(p)})
		if r := s.await(p, ctx); r != wakeEvent {
			return c.wakeErr(ctx, r)
		}
		if err := c.usable(); err != nil {
			return err
		}
	}
	if n.state == stateCrashed {
		return fmt.Errorf("sim: send %s to %v: crashed: %w", transport.MethodName(method), id, farmem.ErrNodeDown)
	}
	cl := &call{s: s, from: c, to: n, method: method, req: append([]byte(nil), req...), posted: s.nowNs, oneway: true}
	ms.held++
	t := c.n.nic.issueAt(s.nowNs, int64(c.n.model.Issue), uint64(len(req)))
	at := t + s.lat(c.n.id, n.id)
	if c.lastMsg == nil {
		c.lastMsg = make(lastArrive)
	}
	if last, ok := c.lastMsg[id]; ok && at <= last {
		at = last + 1
	}
	c.lastMsg[id] = at
	s.pushCall(at, cl, callArrive)
	c.ctr.CountMessage(len(req))
	return nil
}

func (c *cnode) msgs() *msgState {
	if c.msg == nil {
		c.msg = &msgState{lanes: make(map[farmem.ClientID]*msgLane)}
	}
	return c.msg
}

// msgArrived puts message cl, which the target's NIC has received, on its sender's lane.
func (s *Sim) msgArrived(cl *call) {
	n := cl.to
	if n.state == stateCrashed {
		s.msgDropped(cl)
		return
	}
	ms := n.c.msgs()
	l := ms.lanes[cl.from.info.ID]
	if l == nil {
		l = &msgLane{}
		ms.lanes[cl.from.info.ID] = l
	}
	l.q = append(l.q, cl)
	if !l.running {
		l.running = true
		ms.ready = append(ms.ready, l)
		s.pumpMessages(n)
	}
}

// pumpMessages starts the lanes waiting for a handler client while there are idle ones.
func (s *Sim) pumpMessages(n *node) {
	if n.c.msg == nil {
		return
	}
	ms := n.c.msg
	for len(ms.ready) > 0 && len(n.c.hidle) > 0 && n.state != stateCrashed {
		l := ms.ready[0]
		ms.ready = ms.ready[1:]
		cl := l.q[0]
		l.q = l.q[1:]
		h := n.c.handlers[cl.method]
		if h == nil {
			method := cl.method
			h = func(context.Context, farmem.Memory, farmem.ClientID, []byte) ([]byte, error) {
				return nil, fmt.Errorf("sim: method %s on %v: %w", transport.MethodName(method), n.id, farmem.ErrNoHandler)
			}
		}
		s.startHandler(cl, h)
	}
}

// msgFinished ends message cl after its handler ran on hc with error err: a failure is
// counted on hc, the lane moves on, and a sender waiting for room wakes.
func (s *Sim) msgFinished(cl *call, hc *client, err error) {
	if err != nil {
		hc.ctr.CountMessageFailure()
	}
	n := cl.to
	ms := n.c.msgs()
	if l := ms.lanes[cl.from.info.ID]; l != nil {
		if len(l.q) > 0 {
			ms.ready = append(ms.ready, l)
		} else {
			l.running = false
			delete(ms.lanes, cl.from.info.ID)
		}
	}
	s.msgDropped(cl)
}

// msgDropped releases message cl's place in its target's bound and wakes a waiting sender.
func (s *Sim) msgDropped(cl *call) {
	cl.done = true
	ms := cl.to.c.msgs()
	ms.held--
	for len(ms.waiters) > 0 {
		w := ms.waiters[0]
		ms.waiters = ms.waiters[1:]
		if w.p.seq == w.seq && w.p.parked {
			s.wakeSeq(w.p, w.seq, wakeEvent)
			break
		}
	}
}
