package rdma

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// client is one goroutine's farmem.Memory on a Fabric.
type client struct {
	transport.ClientState // info, runtime, counters, closed and crashed; the verbs and Do
	f                     *Fabric
	handler               bool

	qmu  sync.Mutex
	qps  map[farmem.NodeID]qp
	lost map[farmem.NodeID]error // nodes whose unsignaled ops a failed connection may have lost

	// one and sg serve single verbs without allocating; both are replaced when a verb is
	// abandoned in flight (its context ended).
	one *farmem.Batch
	sg  *single

	// lazy lists the queue pairs holding lazy frames of this client's posts (tcpQP.writeLocked),
	// written by flushLazy before the client blocks; lazyN is its length.
	lmu   sync.Mutex
	lazy  []*tcpQP
	lazyN atomic.Int32

	// lead hands the reader role of a shared connection to the client's waiting goroutine
	// (tlink.handOff).
	lead chan struct{}

	// hints holds, per node id below its length, the client's live queue pair to the node and
	// the node's region size, for posts to find both without a lock or a map (qp fills it;
	// closing the client and a lost node clear it).
	hints [16]atomic.Pointer[qpHint]
}

// qpHint is a node's entry in client.hints.
type qpHint struct {
	q    qp
	size uint64
}

// hint returns the queue pair to node and the node's region size if the client's hints hold
// a live one.
func (c *client) hint(node farmem.NodeID) (qp, uint64, bool) {
	if int(node) < len(c.hints) {
		if h := c.hints[node].Load(); h != nil && h.q.alive() {
			return h.q, h.size, true
		}
	}
	return nil, 0, false
}

var _ farmem.Memory = (*client)(nil)

// single is the sink of a single verb.
type single struct {
	c   *client
	b   *farmem.Batch
	ch  chan struct{}
	val uint64
	err error
}

// Complete is complete, for providers whose engines take a verbs.Sink.
func (s *single) Complete(i int, val uint64, err error) { s.complete(i, val, err) }

func (s *single) complete(i int, val uint64, err error) {
	s.c.Counters.CountResult(&s.b.Ops[0], val, err)
	s.counted(i, val, err)
}

func (s *single) counted(_ int, val uint64, err error) {
	s.val, s.err = val, err
	select {
	case s.ch <- struct{}{}:
	default:
	}
}

// batchSink reports a posted batch's outcomes to its Pending.
type batchSink struct {
	c    *client
	comp transport.Completer
}

// Complete is complete, for providers whose engines take a verbs.Sink.
func (s *batchSink) Complete(i int, val uint64, err error) { s.complete(i, val, err) }

func (s *batchSink) complete(i int, val uint64, err error) {
	s.c.Counters.CountResult(&s.comp.Batch().Ops[i], val, err)
	s.comp.Complete(i, val, err)
}

// counted completes op i for the tcp reader, which completes each op of a post once (a
// request's slot is released once, under its queue pair's lock).
func (s *batchSink) counted(i int, val uint64, err error) { s.comp.CompleteOwned(i, val, err) }

func (c *client) Topology() *farmem.Topology { return c.f.Topology() }

// Close implements farmem.Memory.
func (c *client) Close() error {
	if !c.SetClosed() {
		return nil
	}
	c.closeQPs(fmt.Errorf("rdma: client %d: %w", c.ClientInfo.ID, farmem.ErrClosed))
	c.f.release(c)
	return nil
}

// crash makes the client fail-stop (a fault, or its node crashed).
func (c *client) crash() {
	c.SetCrashed()
	c.closeQPs(fmt.Errorf("rdma: client %d crashed: %w", c.ClientInfo.ID, farmem.ErrNodeDown))
}

func (c *client) closeQPs(err error) {
	c.qmu.Lock()
	qs := make([]qp, 0, len(c.qps))
	for _, q := range c.qps {
		qs = append(qs, q)
	}
	clear(c.qps)
	for i := range c.hints {
		c.hints[i].Store(nil)
	}
	c.qmu.Unlock()
	for _, q := range qs {
		q.close(err)
	}
}

// listLazy puts q on the client's lazy list (q.l.wmu held).
func (c *client) listLazy(q *tcpQP) {
	c.lmu.Lock()
	c.lazy = append(c.lazy, q)
	c.lazyN.Store(int32(len(c.lazy)))
	c.lmu.Unlock()
}

// flushLazy writes the lazy frames the client's posts left on its connections, before the
// client blocks, so that batches posted to several nodes travel together whichever the client
// waits on first. keep, if not nil, is the connection the client is about to read itself: its
// frames are written by that read (and it stays listed). It costs an atomic load when nothing
// is listed.
func (c *client) flushLazy(keep *tcpQP) {
	if c.lazyN.Load() == 0 {
		return
	}
	var buf [8]*tcpQP
	c.lmu.Lock()
	qs := append(buf[:0], c.lazy...)
	clear(c.lazy)
	c.lazy = c.lazy[:0]
	for _, q := range qs {
		if q == keep {
			c.lazy = append(c.lazy, q)
		}
	}
	c.lazyN.Store(int32(len(c.lazy)))
	c.lmu.Unlock()
	for _, q := range qs {
		if q != keep {
			q.flushLazy()
		}
	}
}

// usable reports why the client cannot post, or nil.
func (c *client) usable() error {
	if err := c.Usable(); err != nil {
		return err
	}
	if c.f.crashed.Load() {
		return fmt.Errorf("rdma: %v is down: %w", c.f.self, farmem.ErrNodeDown)
	}
	return nil
}

// qp returns the client's queue pair to node, connecting a new one if there is none or the
// last one died. It fails once, with ErrNodeDown, after a connection died with unsignaled ops
// unconfirmed: they may not have been applied, and the next op is where the client learns it.
func (c *client) qp(ctx context.Context, node farmem.NodeID) (qp, error) {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	if err := c.lost[node]; err != nil {
		delete(c.lost, node)
		return nil, fmt.Errorf("rdma: unsignaled ops to %v may be lost: %w", node, err)
	}
	q := c.qps[node]
	if q == nil || !q.alive() {
		p := c.f.peer(ctx, node)
		if p == nil {
			return nil, fmt.Errorf("rdma: no node %v: %w", node, farmem.ErrOutOfRange)
		}
		if err := p.fenced(); err != nil {
			return nil, err
		}
		q = c.f.prov.connect(c, p)
		c.qps[node] = q
	}
	if int(node) < len(c.hints) {
		if h := c.hints[node].Load(); h == nil || h.q != q {
			if p := c.f.peer(ctx, node); p != nil {
				if size := p.regionSize(); size != 0 { // (a node's size, once known, stays)
					c.hints[node].Store(&qpHint{q: q, size: size})
				}
			}
		}
	}
	return q, nil
}

// tcp returns the client's tcp connection to node, for Calls.
func (c *client) tcp(ctx context.Context, node farmem.NodeID) (*tcpQP, error) {
	q, err := c.qp(ctx, node)
	if err != nil {
		return nil, err
	}
	if t, ok := q.(*tcpQP); ok {
		return t, nil
	}
	return nil, fmt.Errorf("rdma: calls need the tcp provider to compute nodes: %w", farmem.ErrNotSupported)
}

func (c *client) markLost(node farmem.NodeID, err error) {
	c.qmu.Lock()
	if c.lost == nil {
		c.lost = make(map[farmem.NodeID]error)
	}
	c.lost[node] = err
	if int(node) < len(c.hints) {
		c.hints[node].Store(nil)
	}
	c.qmu.Unlock()
}

// Post implements farmem.Memory.
func (c *client) Post(ctx context.Context, b *farmem.Batch) *farmem.Pending {
	if err := ctx.Err(); err != nil {
		return transport.Rejected(b, err, nil)
	}
	var hq qp
	var hnode farmem.NodeID
	var hsize uint64
	hit := false
	if b != nil && len(b.Ops) > 0 {
		hnode = b.Ops[0].Addr.Node()
		hq, hsize, hit = c.hint(hnode)
	}
	b, rej := transport.Admit(b, c.usable(), func(n farmem.NodeID) (uint64, error) {
		if hit && n == hnode {
			return hsize, nil
		}
		return c.f.sizeOf(ctx, n)
	})
	if rej != nil {
		return rej
	}
	c.Counters.CountBatch(b, c.ClientInfo.Node)
	self := c.ClientInfo.Node
	first := b.Ops[0].Addr.Node()
	oneNode, remote := true, false
	for i := range b.Ops {
		n := b.Ops[i].Addr.Node()
		oneNode = oneNode && n == first
		remote = remote || (n != self && !b.Ops[i].Unsignaled)
	}
	_, tcp := c.f.prov.(tcpProvider)
	if oneNode && first != self {
		// One remote node: its queue pair's parker may collect the answers as it waits.
		q, err := hq, error(nil)
		if !hit {
			q, err = c.qp(ctx, first)
		}
		if tq, ok := q.(*tcpQP); ok && err == nil {
			// The waiter reads the answers itself unless someone reads the connection now.
			var rq *tcpQP
			if remote && !tq.l.reading.Load() {
				rq = tq
			}
			st := c.startPost(b, rq)
			if rq != nil {
				tq.postWaited(ctx, b, nil, &st.sink)
			} else {
				tq.post(ctx, b, nil, &st.sink)
			}
			return &st.pend
		}
		var park transport.Parker
		waited := false
		if err == nil && remote {
			park = q.parker()
			waited = park != nil
			if !waited {
				park = &clientParker{c: c, ch: make(chan struct{}, 1)}
			}
		}
		p, comp := transport.NewPendingOn(b, park, c.Runtime())
		s := &batchSink{c: c, comp: comp}
		switch {
		case err != nil:
			failOps(b, nil, 0, len(b.Ops), s, err)
		case waited:
			q.postWaited(ctx, b, nil, s)
		default:
			q.post(ctx, b, nil, s)
		}
		return p
	}
	var p *farmem.Pending
	var s *batchSink
	var st *postState
	if tcp {
		st = c.startPost(b, nil)
		p, s = &st.pend, &st.sink
	} else {
		var park transport.Parker
		if remote {
			park = &clientParker{c: c, ch: make(chan struct{}, 1)}
		}
		var comp transport.Completer
		p, comp = transport.NewPendingOn(b, park, c.Runtime())
		s = &batchSink{c: c, comp: comp}
	}
	if oneNode {
		c.dispatch(ctx, first, b, nil, s)
		return p
	}
	// Several nodes: each gets its ops in batch order, on its own queue pair, in parallel.
	var gs []transport.Group
	if st != nil {
		gs = st.group(b)
	} else {
		var buf [4]transport.Group
		gs = transport.GroupByNode(b, buf[:0])
	}
	for _, g := range gs {
		c.dispatch(ctx, g.Node, b, g.Idx, s)
	}
	return p
}

// dispatch sends the ops of b at idx (all when nil), all addressed to node.
func (c *client) dispatch(ctx context.Context, node farmem.NodeID, b *farmem.Batch, idx []int, s sink) {
	if node == c.ClientInfo.Node {
		// Unsignaled local ops are completed too (the Completer does not count them), so every
		// op is applied before the batch can be done.
		if idx == nil {
			for i := range b.Ops {
				s.complete(i, c.f.applyLocal(&b.Ops[i]), nil)
			}
		} else {
			for _, i := range idx {
				s.complete(i, c.f.applyLocal(&b.Ops[i]), nil)
			}
		}
		return
	}
	q, err := c.qp(ctx, node)
	if err != nil {
		n := len(b.Ops)
		if idx != nil {
			n = len(idx)
		}
		failOps(b, idx, 0, n, s, err)
		return
	}
	q.post(ctx, b, idx, s)
}

// single runs a one-op batch without building a Pending.
func (c *client) single(ctx context.Context, op farmem.Op) (uint64, error) {
	if err := c.usable(); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	node := op.Addr.Node()
	q, size, hit := c.hint(node)
	var err error
	if !hit {
		size, err = c.f.sizeOf(ctx, node)
	}
	if err == nil {
		err = transport.CheckOp(&op, size)
	}
	if err != nil {
		return 0, err
	}
	c.Counters.CountOp(&op, c.ClientInfo.Node)
	if node == c.ClientInfo.Node {
		val := c.f.applyLocal(&op)
		c.Counters.CountResult(&op, val, nil)
		return val, nil
	}
	if !hit {
		if q, err = c.qp(ctx, node); err != nil {
			return 0, err
		}
	}
	if c.one == nil {
		c.one = &farmem.Batch{Ops: make([]farmem.Op, 1)}
		c.sg = &single{c: c, b: c.one, ch: make(chan struct{}, 1)}
	}
	c.one.Ops[0] = op
	if err := q.do(ctx, c.one, c.sg, c.sg.ch); err != nil {
		// The op is still in flight and its batch the transport's: leave both behind.
		c.one, c.sg = nil, nil
		return 0, err
	}
	c.one.Ops[0] = farmem.Op{}
	return c.sg.val, c.sg.err
}

// Wait implements farmem.Memory. It parks on the word and is woken by every write or atomic
// that lands on it, whether a local client's or a peer's arriving through this node's listener.
func (c *client) Wait(ctx context.Context, a farmem.Addr, until func(uint64) bool) (uint64, error) {
	off, err := transport.AdmitWait(c.usable(), &c.Counters, a, c.ClientInfo.Node, c.f.reg.size, until)
	if err != nil {
		return 0, err
	}
	c.flushLazy(nil)
	w := c.f.watch.Add(off)
	defer c.f.watch.Remove(off, w)
	for {
		if v := c.f.reg.mem.Load(off); until(v) {
			return v, nil
		}
		select {
		case <-w:
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-c.Done():
			return 0, c.usable()
		case <-c.f.ctx.Done():
			if err := c.usable(); err != nil {
				return 0, err
			}
			return 0, fmt.Errorf("rdma: fabric closed: %w", farmem.ErrClosed)
		}
	}
}

// Call implements farmem.Memory.
func (c *client) Call(ctx context.Context, node farmem.NodeID, method uint16, req []byte) ([]byte, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	if err := transport.CheckCall(node, req); err != nil {
		return nil, err
	}
	var reply []byte
	var err error
	if node == c.ClientInfo.Node {
		reply, err = c.f.serveCall(ctx, c.ClientInfo.ID, method, append([]byte(nil), req...))
		var he *handlerError
		if errors.As(err, &he) {
			err = transport.RemoteError(transport.CodeOf(he.err), he.err.Error())
		}
	} else if c.f.peer(ctx, node) == nil {
		err = fmt.Errorf("rdma: call to %v: no such compute node: %w", node, farmem.ErrInvalid)
	} else {
		var q *tcpQP
		if q, err = c.tcp(ctx, node); err == nil {
			reply, err = q.call(ctx, method, c.ClientInfo.ID, req)
		}
	}
	c.Counters.CountCall(len(req), len(reply))
	return reply, err
}

// failAhead is failOps for the ops of the released slot sl whose bytes the reader counted
// ahead (transport.Counters.ReceiveAhead): each is counted back before it fails.
func failAhead(c *client, sl qslot, err error) {
	b, idx := sl.b, sl.idx
	last := -1
	for k := sl.lo; k < sl.hi; k++ {
		if !b.Ops[opAt(idx, k)].Unsignaled {
			last = k
		}
	}
	for k := sl.lo; k <= last; k++ {
		if i := opAt(idx, k); !b.Ops[i].Unsignaled {
			c.Counters.CountResultAhead(&b.Ops[i], 0, err)
			sl.sink.counted(i, 0, err)
		}
	}
}

// opAt is the position in the batch of the k-th op of idx (the k-th op when idx is nil).
func opAt(idx []int, k int) int {
	if idx == nil {
		return k
	}
	return idx[k]
}

// failOps completes the signaled ops at positions [lo, hi) of idx (of b itself when idx is
// nil) with err. Once the last of them is completed the batch may be reused, so nothing of it
// is read after that.
func failOps(b *farmem.Batch, idx []int, lo, hi int, s sink, err error) {
	at := func(k int) int {
		if idx == nil {
			return k
		}
		return idx[k]
	}
	last := -1
	for k := lo; k < hi; k++ {
		if !b.Ops[at(k)].Unsignaled {
			last = k
		}
	}
	for k := lo; k <= last; k++ {
		if i := at(k); !b.Ops[i].Unsignaled {
			s.complete(i, 0, err)
		}
	}
}
