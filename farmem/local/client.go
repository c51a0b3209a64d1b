package local

import (
	"context"
	"fmt"
	"time"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// client is one goroutine's farmem.Memory.
type client struct {
	transport.ClientState // info, runtime, counters, closed and crashed; the verbs and Do
	f                     *Fabric
	node                  *node
	handler               bool

	qps transport.Queues // this client's batches to each node, in posting order
}

var _ farmem.Memory = (*client)(nil)
var _ transport.StrictMemory = (*client)(nil)

// job is the part of a batch that goes to one node.
type job struct {
	ctx    context.Context
	c      *client
	n      *node
	idx    []int
	comp   transport.Completer
	posted time.Time
	// inc is the incarnation of n's memory the job may reach: the one the fabric had adopted
	// when it was posted, or 0 if n was fenced as lost then (adopt.go).
	inc uint64
}

func (c *client) Topology() *farmem.Topology { return &c.f.topo }
func (c *client) ForgetAtomic(a farmem.Addr, n uint64) {
	if nd := c.f.nodes[a.Node()]; nd != nil {
		nd.forgetAtomic(a.Offset(), n)
	}
}

// Close implements farmem.Memory.
func (c *client) Close() error {
	if !c.SetClosed() {
		return nil
	}
	c.f.clients.Release(c.ClientInfo.ID, c)
	return nil
}

func (c *client) crash() { c.SetCrashed() }

// sizeOf returns the size of node id's region.
func (f *Fabric) sizeOf(id farmem.NodeID) (uint64, error) {
	if n := f.nodes[id]; n != nil {
		return n.size, nil
	}
	return 0, transport.NoSuchNode(id)
}

// fast reports whether a batch to n may run inline in the caller: no delay to model, n
// reachable, and nothing of this client's still queued for n.
func (c *client) fast(n *node) bool {
	if c.f.opts.Latency != 0 || c.f.opts.Jitter != 0 || c.f.reach(c, n) != transport.Reachable {
		return false
	}
	return c.qps.Idle(n.id)
}

// Post implements farmem.Memory.
func (c *client) Post(ctx context.Context, b *farmem.Batch) *farmem.Pending {
	b, rej := transport.Admit(b, c.Usable(), c.f.sizeOf)
	if rej != nil {
		return rej
	}
	c.Counters.CountBatch(b, c.ClientInfo.Node)

	var buf [4]transport.Group
	groups := transport.GroupByNode(b, buf[:0])
	inline := true
	for _, g := range groups {
		if !c.fast(c.f.nodes[g.Node]) {
			inline = false
			break
		}
	}
	var park transport.Parker
	if !inline {
		park = transport.NewChanParker()
	}
	p, comp := transport.NewPendingOn(b, park, c.Runtime())
	now := time.Now()
	for _, g := range groups {
		n := c.f.nodes[g.Node]
		j := &job{ctx: ctx, c: c, n: n, idx: g.Idx, comp: comp, posted: now, inc: c.f.bound(n)}
		if inline {
			c.f.run(j, 0)
		} else {
			c.qps.Push(g.Node, func() { c.f.run(j, c.f.delay()) })
		}
	}
	return p
}

// run executes a job: half the delay out, the ops applied in order at the node, half back.
func (f *Fabric) run(j *job, delay time.Duration) {
	b := j.comp.Batch()
	fail := func(from int, err error) { transport.FailFrom(j.comp, j.idx, from, err) }
	if err := j.ctx.Err(); err != nil {
		fail(0, err)
		return
	}
	if delay > 0 {
		if err := f.rt.Sleep(j.ctx, delay/2); err != nil {
			fail(0, err)
			return
		}
	}
	if j.c.Crashed() {
		fail(0, fmt.Errorf("local: client %d crashed: %w", j.c.ClientInfo.ID, farmem.ErrNodeDown))
		return
	}
	if err := f.awaitReach(j.ctx, j.c, j.n, j.posted.Add(f.opts.DownTimeout)); err != nil {
		fail(0, err)
		return
	}
	// The ops apply to the memory of the incarnation the job was posted to, all of them
	// before or after any restart's wipe (adopt.go), or none.
	j.n.life.RLock()
	if got := j.n.inc.Load(); got != j.inc {
		j.n.life.RUnlock()
		fail(0, lostSincePost(j.n.id, j.inc, got))
		return
	}
	limit := len(j.idx)
	crash := false
	if j.n.crashAfter.Load() >= 0 {
		if k := j.n.crashAfter.Swap(-1); k >= 0 && int(k) < limit {
			limit, crash = int(k), true
		}
	}
	between := f.between()
	type result struct {
		val uint64
		err error
	}
	var results []result
	if delay > 0 {
		results = make([]result, limit)
	}
	for k, i := range j.idx[:limit] {
		op := &b.Ops[i]
		val, err := j.n.apply(op, between)
		j.c.Counters.CountResult(op, val, err)
		if results != nil {
			results[k] = result{val, err}
		} else {
			j.comp.Complete(i, val, err)
		}
	}
	j.n.life.RUnlock()
	if crash {
		j.n.setState(stateCrashed)
		f.changes.Notify()
		fail(limit, fmt.Errorf("local: %v crashed during the batch: %w", j.n.id, farmem.ErrNodeDown))
	}
	if results == nil {
		return
	}
	if err := f.rt.Sleep(j.ctx, delay-delay/2); err != nil {
		// The ops were applied; only the answer was lost.
		fail(0, err)
		return
	}
	for k, i := range j.idx[:limit] {
		j.comp.Complete(i, results[k].val, results[k].err)
	}
}

// single runs a one-op batch and returns its result. A verb to a reachable node with no
// latency model runs inline without building a Pending.
func (c *client) single(ctx context.Context, op farmem.Op) (uint64, error) {
	if err := c.Usable(); err != nil {
		return 0, err
	}
	if n := c.f.nodes[op.Addr.Node()]; n != nil && transport.CheckOp(&op, n.size) == nil && ctx.Err() == nil &&
		n.crashAfter.Load() < 0 {
		// Reachable (so not lost) and applied under life: no restart in between.
		n.life.RLock()
		if c.fast(n) {
			c.Counters.CountOp(&op, c.ClientInfo.Node)
			val, err := n.apply(&op, c.f.between())
			n.life.RUnlock()
			c.Counters.CountResult(&op, val, err)
			return val, err
		}
		n.life.RUnlock()
	}
	return c.PostOne(ctx, op)
}

// Wait implements farmem.Memory.
func (c *client) Wait(ctx context.Context, a farmem.Addr, until func(uint64) bool) (uint64, error) {
	n := c.node
	off, err := transport.AdmitWait(c.Usable(), &c.Counters, a, n.id, n.size, until)
	if err != nil {
		return 0, err
	}
	w := n.watch.Add(off)
	defer n.watch.Remove(off, w)
	for {
		if v := n.mem.Load(off); until(v) {
			return v, nil
		}
		select {
		case <-w:
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-c.Done(): // closes only when the client is closed or crashed
			return 0, c.Usable()
		}
	}
}
