package sim

import (
	"context"
	"fmt"
	"slices"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// call is one Call in progress.
type call struct {
	s      *Sim
	from   *client
	to     *node
	method uint16
	req    []byte
	reply  []byte
	err    error
	posted int64
	waiter *proc
	wseq   uint64
	done   bool // its outcome is known to the caller
	oneway bool // a message (send.go): no reply leg
}

// Stages of a call, the arg of its events.
const (
	callArrive  uint64 = iota // the request reaches the target's NIC
	callQueue                 // the NIC has received it: it waits for a handler
	callReply                 // the reply reaches the caller's NIC
	callDeliver               // the caller's NIC has received it
	callDown                  // the down timeout of a silent target
)

// Call implements farmem.Memory. The request crosses the caller's NIC, the link and the
// target's NIC; the target charges CallCPU to its cores and runs the handler on one of its
// handler clients (at most MaxHandlers at once, the rest queue); the reply comes back the same
// way.
func (c *client) Call(ctx context.Context, id farmem.NodeID, method uint16, req []byte) ([]byte, error) {
	s := c.s
	p, adopted := s.enter()
	defer s.exit(p, adopted)
	c.gate(p)
	if err := c.usable(); err != nil {
		return nil, err
	}
	n := s.node(id)
	switch {
	case n == nil:
		return nil, fmt.Errorf("sim: call to %v: no such node: %w", id, farmem.ErrInvalid)
	case n.c == nil:
		return nil, fmt.Errorf("sim: call to memory node %v: %w", id, farmem.ErrInvalid)
	case len(req) > farmem.MaxCallBytes:
		return nil, fmt.Errorf("sim: call request of %d bytes exceeds %d: %w", len(req), farmem.MaxCallBytes, farmem.ErrInvalid)
	}
	reply, err := c.call(p, ctx, n, method, req)
	c.ctr.CountCall(len(req), len(reply))
	return reply, err
}

func (c *client) call(p *proc, ctx context.Context, n *node, method uint16, req []byte) ([]byte, error) {
	s := c.s
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.m.OpCPU > 0 {
		s.sleepUntil(p, c.n.c.cpu.run(s.nowNs, s.m.OpCPU), c)
	}
	if n.state == stateCrashed {
		return nil, fmt.Errorf("sim: call %d to %v: crashed: %w", method, n.id, farmem.ErrNodeDown)
	}
	cl := &call{s: s, from: c, to: n, method: method, req: append([]byte(nil), req...), posted: s.nowNs}
	t := c.n.nic.issueAt(s.nowNs, int64(c.n.model.Issue), uint64(len(req)))
	n.c.calls = append(n.c.calls, cl)
	s.pushCall(t+s.lat(c.n.id, n.id), cl, callArrive)
	c.parkOn(p, parkCall)
	cl.waiter, cl.wseq = p, s.prepark(p)
	r := s.await(p, ctx)
	if cl.done {
		return cl.reply, cl.err
	}
	cl.waiter = nil
	return nil, c.wakeErr(ctx, r)
}

// finish reports the call's outcome to its caller, once.
func (cl *call) finish(reply []byte, err error) {
	if cl.done {
		return
	}
	cl.done = true
	cl.reply, cl.err = reply, err
	c := cl.to.c
	if i := slices.Index(c.calls, cl); i >= 0 {
		c.calls = slices.Delete(c.calls, i, i+1)
	}
	if cl.waiter != nil {
		cl.s.wakeSeq(cl.waiter, cl.wseq, wakeEvent)
	}
}

func (cl *call) downErr(why string) error {
	return fmt.Errorf("sim: call %d to %v: %s: %w", cl.method, cl.to.id, why, farmem.ErrNodeDown)
}

// callStep advances call cl to its next stage.
func (s *Sim) callStep(cl *call, stage uint64) {
	if cl.done {
		return
	}
	n := cl.to
	switch stage {
	case callArrive:
		if cl.oneway && s.reach(cl.from, n) != reachOK {
			s.msgDropped(cl) // at most once: lost with a down or unreachable target
			return
		}
		switch s.reach(cl.from, n) {
		case reachDown:
			cl.err = cl.downErr("crashed")
			s.pushCall(s.nowNs+s.lat(n.id, cl.from.n.id), cl, callReply)
			return
		case reachSilent:
			s.pushCall(max(cl.posted+int64(s.m.DownTimeout), s.nowNs), cl, callDown)
			return
		}
		n.nic.sends++
		_, ready := n.nic.serve(s.nowNs, int64(n.model.Send), uint64(len(cl.req)), false, 0, 0)
		s.pushCall(ready, cl, callQueue)
	case callQueue:
		if cl.oneway {
			s.msgArrived(cl)
			return
		}
		if n.state == stateCrashed {
			cl.finish(nil, cl.downErr("crashed"))
			return
		}
		h := n.c.handlers[cl.method]
		if h == nil {
			cl.err = fmt.Errorf("sim: method %d on %v: %w", cl.method, n.id, farmem.ErrNoHandler)
			s.sendReply(cl)
			return
		}
		if len(n.c.hidle) == 0 {
			n.c.callQ = append(n.c.callQ, cl)
			return
		}
		s.startHandler(cl, h)
	case callReply:
		if s.reachBack(cl.from, n) == reachSilent {
			s.pushCall(max(cl.posted+int64(s.m.DownTimeout), s.nowNs), cl, callDown)
			return
		}
		src := cl.from.n
		src.nic.sends++
		_, ready := src.nic.serve(s.nowNs, int64(src.model.Send), uint64(len(cl.reply)), false, 0, 0)
		s.pushCall(ready, cl, callDeliver)
	case callDeliver:
		cl.finish(cl.reply, cl.err)
	case callDown:
		cl.finish(nil, cl.downErr(fmt.Sprintf("silent for %v", s.m.DownTimeout)))
	}
}

// startHandler runs cl's handler on an idle handler client of its target.
func (s *Sim) startHandler(cl *call, h farmem.Handler) {
	n := cl.to
	hc := n.c.hidle[len(n.c.hidle)-1]
	n.c.hidle = n.c.hidle[:len(n.c.hidle)-1]
	s.spawn(func() {
		reply, err := s.runHandler(s.cur.Load(), hc, h, cl.from.info.ID, cl.req)
		if err != nil {
			err = transport.RemoteError(transport.CodeOf(err), err.Error())
			reply = nil
		} else if len(reply) > farmem.MaxCallBytes {
			err = fmt.Errorf("sim: reply of %d bytes exceeds %d: %w", len(reply), farmem.MaxCallBytes, farmem.ErrInvalid)
			reply = nil
		}
		// The handler client is free again: the next queued call takes it.
		n.c.hidle = append(n.c.hidle, hc)
		if cl.oneway {
			s.msgFinished(cl, hc, err)
		}
		for len(n.c.callQ) > 0 && len(n.c.hidle) > 0 && n.state != stateCrashed {
			next := n.c.callQ[0]
			n.c.callQ = n.c.callQ[1:]
			if next.done {
				continue
			}
			if nh := n.c.handlers[next.method]; nh != nil {
				s.startHandler(next, nh)
			} else {
				next.err = fmt.Errorf("sim: method %d on %v: %w", next.method, n.id, farmem.ErrNoHandler)
				s.sendReply(next)
			}
		}
		s.pumpMessages(n)
		if n.state == stateCrashed || cl.oneway {
			return
		}
		cl.reply, cl.err = append([]byte(nil), reply...), err
		s.sendReply(cl)
	}, false)
}

// sendReply sends cl's reply (cl.reply, cl.err) back from its target.
func (s *Sim) sendReply(cl *call) {
	n := cl.to
	t := n.nic.issueAt(s.nowNs, int64(n.model.Issue), uint64(len(cl.reply)))
	s.pushCall(t+s.lat(n.id, cl.from.n.id), cl, callReply)
}

// runHandler runs handler h for a message from client from on handler client hc, in the calling
// simulated goroutine p, and returns what it returned. It is the CPU model of a message a
// compute node handles (Model.CallCPU): CallCPU is charged to the cores of hc's node, queued
// behind their other work, before h runs; h runs as hc, so its Runtime.Compute calls and the
// OpCPU of its verbs queue on the same cores. Calls and one-way messages both reach it through
// startHandler once a handler client is free (a message's reply is dropped).
func (s *Sim) runHandler(p *proc, hc *client, h farmem.Handler, from farmem.ClientID, req []byte) ([]byte, error) {
	n := hc.n
	if s.m.CallCPU > 0 {
		s.sleepUntil(p, n.c.cpu.run(s.nowNs, s.m.CallCPU), hc)
	}
	return transport.RunHandler(n.c.ctx, h, hc, from, req)
}
