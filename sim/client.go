package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// client is one simulated client: a farmem.Memory.
type client struct {
	// Fields a single verb touches come first, its group among them, so that it reads and
	// writes few cache lines; what only faults, messages and reports use comes last.
	transport.Verbs // Do (the single verbs are its own: verbs.go)
	s               *Sim
	n               *node // its compute node
	info            farmem.ClientInfo
	rt              *rtime // read when its proc is woken (prefetchResume)

	closed, crashed bool
	paused          bool
	sgBusy          bool
	parked          *proc // procs parked on this client
	inflight        *group
	qpm             []qp // queue pairs to memory nodes, by id: in place, one load from c

	lat latStats

	// sg is the group of its single verbs, kept with the client for locality (right after
	// the fields above, its hot fields first); while it is still in flight (its verb
	// abandoned on a context), a pooled group serves.
	sg group

	ctr transport.Counters

	handler bool
	lastMsg lastArrive // send.go
	frozen  []*proc    // procs woken while the client or its node was paused
	qpc     []*qp      // queue pairs to compute nodes, by id

	base farmem.Stats // Stats at the start of the statistics window
}

var _ farmem.Memory = (*client)(nil)

// openClient takes a free slot of compute node n (slot, or the first free client slot if slot
// is negative) and returns a client on it. The token must be held.
func (s *Sim) openClient(n *node, slot int) (*client, error) {
	cl, err := s.clients.Open(n.id, slot, func(info farmem.ClientInfo) (*client, *transport.Counters) {
		cl := &client{s: s, n: n, info: info, handler: slot >= 0, qpm: make([]qp, len(s.mem))}
		cl.Verbs.RunOne, cl.Verbs.PostBatch = cl.runOne, cl.Post
		cl.rt = s.newRtime(cl, s.clockFor(info.ID))
		return cl, &cl.ctr
	})
	if err != nil {
		return nil, err
	}
	base := cl.info.Slice.Offset()
	clear(n.words[base/8 : (base+s.m.SliceSize)/8])
	return cl, nil
}

func (c *client) Info() farmem.ClientInfo    { return c.info }
func (c *client) Topology() *farmem.Topology { return &c.s.topo }
func (c *client) Runtime() farmem.Runtime    { return c.rt }
func (c *client) Stats() farmem.Stats        { return c.ctr.Snapshot() }

// Close implements farmem.Memory.
func (c *client) Close() error {
	s := c.s
	p, adopted := s.enter()
	defer s.exit(p, adopted)
	c.close()
	return nil
}

func (c *client) close() {
	if c.closed {
		return
	}
	c.closed = true
	c.wakeParked(wakeClosed, parkWait, parkCall, parkOther)
	c.s.clients.Release(c.info.ID, c)
}

// crash makes c fail-stop: its waiters end with ErrNodeDown at once.
func (c *client) crash() {
	if c.crashed {
		return
	}
	c.crashed = true
	err := fmt.Errorf("sim: client %d crashed: %w", c.info.ID, farmem.ErrNodeDown)
	c.s.failInflight(c, err)
	c.wakeParked(wakeCrashed)
}

// usable reports why c cannot be used, or nil.
func (c *client) usable() error {
	switch {
	case c.closed:
		return fmt.Errorf("sim: client %d: %w", c.info.ID, farmem.ErrClosed)
	case c.crashed:
		return fmt.Errorf("sim: client %d crashed: %w", c.info.ID, farmem.ErrNodeDown)
	}
	return nil
}

func (c *client) isPaused() bool { return c.paused || c.n.c.paused }

// gate blocks p while c is paused, so that a paused client does nothing new.
func (c *client) gate(p *proc) {
	for c.isPaused() && !c.crashed && !c.closed {
		c.parkOn(p, parkOther)
		c.s.prepark(p)
		c.s.await(p, nil)
	}
}

// qp returns c's queue pair to node n. Those to memory nodes are in a table made for every
// memory node when c opens (one load from c, no pointer to follow), those to compute nodes
// are made on first use.
func (c *client) qp(n *node) *qp {
	if n.c == nil {
		return &c.qpm[n.id]
	}
	i := int(n.id.ComputeID())
	if i >= len(c.qpc) {
		nt := make([]*qp, i+1)
		copy(nt, c.qpc)
		c.qpc = nt
	}
	q := c.qpc[i]
	if q == nil {
		q = &qp{}
		c.qpc[i] = q
	}
	return q
}

// opErr returns why op cannot run, or nil, and its target.
func (c *client) check(op *farmem.Op) (*node, error) {
	n := c.s.node(op.Addr.Node())
	if n == nil {
		return nil, transport.NoSuchNode(op.Addr.Node())
	}
	return n, transport.CheckOp(op, n.size)
}

// runOne is single for a value op (the runner of transport.Verbs).
func (c *client) runOne(ctx context.Context, op farmem.Op) (uint64, error) { return c.single(ctx, &op) }

// single runs a one-op batch and returns its result. It allocates nothing. Its rare paths (the
// checks that fail, a CPU access to the own region) are calls, so that its frame stays small:
// a simulated goroutine's stack is cold when it resumes, and each line of it a verb writes is a
// cache miss.
func (c *client) single(ctx context.Context, op *farmem.Op) (uint64, error) {
	s := c.s
	p, adopted := s.enter()
	if adopted {
		defer s.exit(p, true) // only then: a proc's call has nothing to undo
	}
	n, err := c.admitOne(ctx, p, op)
	if err != nil {
		return 0, err
	}
	if n == c.n && !n.viaNIC(op) {
		return c.singleLocal(p, n, op)
	}
	at := s.nowNs
	if s.m.OpCPU > 0 {
		at = c.n.c.cpu.run(at, s.m.OpCPU)
	}
	var g *group
	if !c.sgBusy {
		g = &c.sg
		g.s, g.c, g.n, g.q, g.limit = s, c, n, c.qp(n), -1
		g.own = true
		c.sgBusy = true
	} else {
		g = s.getGroup(c, n)
	}
	g.single(op)
	g.held = true
	g.waiter = p
	// Not listed on the client: a crash reaches the waiter through its group.
	p.client, p.kind = c, parkVerb
	g.wseq = s.prepark(p)
	s.send(g, at)
	// await, inline: a coroutine switches from this frame (see await).
	if ctx != nil {
		s.watchCtx(p, ctx)
	}
	if p.parked {
		if p.yield != nil {
			p.blocking = true
			p.markStack()
			p.yield(blocked)
			p.blocking = false
		} else {
			s.block(p)
		}
	}
	reason := p.reason
	g.held = false
	if g.delivered {
		val, err := g.val1[0], g.err1[0]
		s.maybeRecycle(g)
		return val, err
	}
	g.waiter = nil
	s.maybeRecycle(g)
	return 0, c.wakeErr(ctx, reason)
}

// admitOne waits while c is paused, checks that c may run op now, and counts it; it returns
// op's target.
//
//go:noinline
func (c *client) admitOne(ctx context.Context, p *proc, op *farmem.Op) (*node, error) {
	c.gate(p)
	if err := c.usable(); err != nil {
		return nil, err
	}
	n, err := c.check(op)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.ctr.CountOp(op, c.info.Node)
	return n, nil
}

// singleLocal runs op as a CPU access to the caller's own region n: no NIC, no link
// (Model.LocalAccess).
//
//go:noinline
func (c *client) singleLocal(p *proc, n *node, op *farmem.Op) (uint64, error) {
	s := c.s
	if d := s.localCost(op); d > 0 {
		s.sleepUntil(p, c.n.c.cpu.run(s.nowNs, d), c)
	}
	val := n.apply(op, 0, uint64(len(op.Buf)))
	c.ctr.CountResult(op, val, nil)
	return val, nil
}

// wakeErr is the error a blocking call returns when woken for reason r instead of by what it
// waited for.
func (c *client) wakeErr(ctx context.Context, r wakeReason) error {
	switch r {
	case wakeCtx:
		if err := ctx.Err(); err != nil {
			return err
		}
		return context.Canceled
	case wakeDeadlock:
		return ErrDeadlock
	}
	if err := c.usable(); err != nil {
		return err
	}
	if c.n.state == stateCrashed {
		return fmt.Errorf("sim: %v crashed: %w", c.n.id, farmem.ErrNodeDown)
	}
	return fmt.Errorf("sim: client %d woken for no reason (a simulator bug): %w", c.info.ID, farmem.ErrInvalid)
}

// Post implements farmem.Memory.
func (c *client) Post(ctx context.Context, b *farmem.Batch) *farmem.Pending {
	s := c.s
	p, adopted := s.enter()
	defer s.exit(p, adopted)
	c.gate(p)
	b, rej := transport.Admit(b, c.usable(), s.sizeOf)
	if rej != nil {
		return rej
	}
	if err := ctx.Err(); err != nil {
		return transport.Rejected(b, err, nil)
	}
	c.ctr.CountBatch(b, c.info.Node)
	pend, comp := transport.NewPendingOn(b, &parker{s: s, c: c}, c.rt)
	// CPU: OpCPU per op the NIC carries, LocalAccess per CPU access to the own region. Once
	// an op to the own region goes through the NIC (an atomic to a NIC-reached word), the
	// batch's later ops to it follow, to keep their order.
	var cpu time.Duration
	own := 0 // index from which own-region ops go through the NIC; len(b.Ops) if none
	for own < len(b.Ops) {
		op := &b.Ops[own]
		if op.Addr.Node() == c.n.id && c.n.viaNIC(op) {
			break
		}
		own++
	}
	for i := range b.Ops {
		op := &b.Ops[i]
		if op.Addr.Node() == c.n.id && i < own {
			cpu += s.localCost(op)
		} else {
			cpu += s.m.OpCPU
		}
	}
	if cpu > 0 {
		s.sleepUntil(p, c.n.c.cpu.run(s.nowNs, cpu), c)
	}
	// Split by node, keeping batch order within each; CPU accesses to the caller's own region
	// are applied now, the rest is sent.
	var groups [4]*group
	gs := groups[:0]
	for i := range b.Ops {
		op := &b.Ops[i]
		n := s.node(op.Addr.Node())
		if n == c.n && i < own {
			val := n.apply(op, 0, uint64(len(op.Buf)))
			if !op.Unsignaled {
				c.ctr.CountResult(op, val, nil)
			}
			comp.Complete(i, val, nil)
			continue
		}
		var g *group
		for _, x := range gs {
			if x.n == n {
				g = x
				break
			}
		}
		if g == nil {
			g = s.getGroup(c, n)
			gs = append(gs, g)
		}
		g.bidx = append(g.bidx, i)
	}
	for _, g := range gs {
		g.batchOf(b, comp)
		s.send(g, s.nowNs)
	}
	return pend
}

// Wait implements farmem.Memory.
func (c *client) Wait(ctx context.Context, a farmem.Addr, until func(uint64) bool) (uint64, error) {
	s := c.s
	p, adopted := s.enter()
	defer s.exit(p, adopted)
	c.gate(p)
	n := c.n
	off, err := transport.AdmitWait(c.usable(), &c.ctr, a, n.id, n.size, until)
	if err != nil {
		return 0, err
	}
	for {
		if n.state == stateCrashed {
			return 0, fmt.Errorf("sim: %v crashed: %w", n.id, farmem.ErrNodeDown)
		}
		if v := n.load(off); until(v) {
			return v, nil
		}
		if err := c.usable(); err != nil {
			return 0, err
		}
		c.parkOn(p, parkWait)
		s.prepark(p)
		n.c.addWatch(p, off)
		switch r := s.await(p, ctx); r {
		case wakeEvent:
		default:
			return 0, c.wakeErr(ctx, r)
		}
	}
}

// parker is the transport.Parker of a Pending: it parks the simulated goroutine that waits.
type parker struct {
	s    *Sim
	c    *client
	flag bool
	p    *proc
	seq  uint64
}

// Park implements transport.Parker.
func (k *parker) Park(ctx context.Context) error {
	s := k.s
	p, adopted := s.enter()
	defer s.exit(p, adopted)
	if k.flag {
		k.flag = false
		return nil
	}
	k.c.parkOn(p, parkVerb)
	k.p, k.seq = p, s.prepark(p)
	r := s.await(p, ctx)
	k.p = nil
	if r == wakeEvent {
		k.flag = false
		return nil
	}
	return k.c.wakeErr(ctx, r)
}

// Unpark implements transport.Parker; the simulator calls it from its event loop.
func (k *parker) Unpark() {
	if k.p != nil && k.p.parked && k.p.seq == k.seq {
		k.s.wakeProc(k.p, wakeEvent)
		return
	}
	k.flag = true
}

// latStats summarises a client's round-trip latencies (post to answer) in virtual time.
type latStats struct {
	n        uint64
	sum, max int64
}

func (c *client) recordLatency(d int64) {
	c.lat.n++
	c.lat.sum += d
	c.lat.max = max(c.lat.max, d)
	c.s.verbHist.record(d)
}

// rtime is a runtime of the simulation: the fabric's (c == nil) or a client's.
//
// It is one cache line, its random source included (Rand returns rnd, whose source is pcg):
// a client that draws from it on every op, as load clients do, reads one line for it.
type rtime struct {
	rnd rand.Rand
	pcg rand.PCG
	s   *Sim
	c   *client
	clk clock // a client's clock; the fabric's is true time
}

// newRtime returns the runtime of client c (nil: the simulation's own), with its own random
// source.
func (s *Sim) newRtime(c *client, clk clock) *rtime {
	r := &rtime{s: s, c: c, clk: clk}
	s.initRand(&r.rnd, &r.pcg)
	return r
}
