package sim

import (
	"fmt"
	"unsafe"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// group is the part of a batch (or the one op of a single verb) that goes to one node. It is
// the unit that crosses the fabric: it departs, arrives, has its ops applied in order at the
// target, and comes back. Groups are recycled, so a single verb allocates nothing.
type group struct {
	// Fields a single verb touches come first, so that it reads and writes few cache lines.
	c     *client
	n     *node
	q     *qp
	k     int   // ops applied so far
	chunk int   // tearing: pieces of op k applied so far
	limit int   // ops to apply before the target crashes (crash-after), or -1
	end   int64 // when the group's service ends: its answer leaves then

	posted int64
	arrive int64
	waiter *proc
	wseq   uint64

	signaled int

	batch     bool
	sliced    bool // ops, idx, vals, errs, ready and fin are the one-op arrays below
	inFabric  bool // fabric events may still reference it
	delivered bool // its outcome has reached the client
	held      bool // a single verb's proc has not read its result yet
	cancelled bool // its client crashed: apply nothing more of it
	own       bool // it is its client's own single-verb group, not the pool's

	anext, pnext *group // the queue pair's arrival and apply chains
	iprev, inext *group // the client's in-flight list

	// A one-op group's op and results, next to the fields above: a single verb reads and
	// writes these and not the slices below (see opAt).
	one    [1]farmem.Op
	idx1   [1]int
	val1   [1]uint64
	err1   [1]error
	ready1 [1]int64
	fin1   [1]int64

	s    *Sim
	comp transport.Completer

	ops   []farmem.Op
	idx   []int // indices in ops of this group's ops, in batch order
	vals  []uint64
	errs  []error
	ready []int64 // when each op may take effect: the start of its service at the target
	fin   []int64 // when each op's service ends
	t0    int64   // tearing: when op k's first piece applied
	perm  []uint8 // tearing: the order op k's pieces are applied in
	// storage of batch groups, kept across reuse
	bidx   []int
	bvals  []uint64
	berrs  []error
	bready []int64
	bfin   []int64
}

// qp orders one client's groups to one node, as an RC queue pair does: they arrive, and take
// effect, in posting order.
type qp struct {
	ahead, atail *group
	lastArrive   int64
	phead, ptail *group
}

func (s *Sim) getGroup(c *client, n *node) *group {
	var g *group
	if k := len(s.groups); k > 0 {
		g = s.groups[k-1]
		s.groups = s.groups[:k-1]
	} else {
		g = &group{s: s}
	}
	g.c, g.n, g.q = c, n, c.qp(n)
	g.limit = -1
	return g
}

// single prepares g for one op, copied into the group.
func (g *group) single(op *farmem.Op) {
	g.one[0] = *op
	if !g.sliced {
		g.ops = g.one[:]
		g.idx = g.idx1[:]
		g.idx1[0] = 0
		g.vals, g.errs, g.ready, g.fin = g.val1[:], g.err1[:], g.ready1[:], g.fin1[:]
		g.sliced = true
	}
	g.err1[0] = nil
	g.val1[0] = 0
	g.signaled = 1
	g.batch = false
}

// A one-op group's hot paths read its op and results through these, from the group's own
// arrays, without loading the slice headers that point at them (three cache lines a verb need
// not touch); a batch's group reads its slices. k is 0 for a one-op group.

func (g *group) size() int {
	if !g.batch {
		return 1
	}
	return len(g.idx)
}

func (g *group) opAt(k int) *farmem.Op {
	if !g.batch {
		return &g.one[0]
	}
	return &g.ops[g.idx[k]]
}

func (g *group) readyAt(k int) *int64 {
	if !g.batch {
		return &g.ready1[0]
	}
	return &g.ready[k]
}

func (g *group) finAt(k int) *int64 {
	if !g.batch {
		return &g.fin1[0]
	}
	return &g.fin[k]
}

func (g *group) valAt(k int) *uint64 {
	if !g.batch {
		return &g.val1[0]
	}
	return &g.vals[k]
}

func (g *group) errAt(k int) *error {
	if !g.batch {
		return &g.err1[0]
	}
	return &g.errs[k]
}

// batchOf prepares g for the ops of batch b whose indices are in idx (g.bidx).
func (g *group) batchOf(b *farmem.Batch, comp transport.Completer) {
	n := len(g.bidx)
	if cap(g.bvals) < n {
		g.bvals = make([]uint64, n, max(n, 4))
		g.berrs = make([]error, n, max(n, 4))
		g.bready = make([]int64, n, max(n, 4))
		g.bfin = make([]int64, n, max(n, 4))
	}
	g.ops, g.idx = b.Ops, g.bidx
	g.vals, g.errs, g.ready, g.fin = g.bvals[:n], g.berrs[:n], g.bready[:n], g.bfin[:n]
	g.sliced = false
	clear(g.vals)
	clear(g.errs)
	g.batch = true
	g.comp = comp
	g.signaled = 0
	for _, i := range g.bidx {
		if !b.Ops[i].Unsignaled {
			g.signaled++
		}
	}
}

func (s *Sim) maybeRecycle(g *group) {
	if g.inFabric || g.held {
		return
	}
	c := g.c
	g.waiter = nil
	g.delivered, g.cancelled = false, false
	g.k, g.chunk = 0, 0
	g.anext, g.pnext, g.iprev, g.inext = nil, nil, nil, nil
	if g.own {
		// The client's own group keeps its client; its op is overwritten by the next verb.
		g.own = false
		c.sgBusy = false
		return
	}
	g.c, g.n, g.q = nil, nil, nil
	g.comp = transport.Completer{}
	g.one[0] = farmem.Op{}
	if g.batch {
		clear(g.errs)
	}
	g.ops, g.idx, g.vals, g.errs, g.ready, g.fin = nil, nil, nil, nil, nil, nil
	g.sliced = false
	g.bidx = g.bidx[:0]
	g.err1[0] = nil
	g.batch = false
	s.groups = append(s.groups, g)
}

// send puts g on its way. Its requests leave the client's node at virtual time at (now, or
// later when they waited for the client's CPU): the client's NIC issues them, in posting
// order, and they cross the link.
func (s *Sim) send(g *group, at int64) {
	g.posted = s.nowNs
	g.inFabric = true
	g.delivered = false
	c := g.c
	g.iprev, g.inext = nil, c.inflight
	if c.inflight != nil {
		c.inflight.iprev = g
	}
	c.inflight = g
	if g.n.state == stateCrashed {
		s.failFrom(g, 0, s.downErr(g, "crashed"))
		s.replyAt(g, s.nowNs)
		return
	}
	for k := range g.size() {
		// The word the op will reach, a read's destination (which nothing touches between
		// two of its client's reads), and for an atomic its slot of the target NIC's atomic
		// unit, into the cache ahead of its arrival (hints: no effect on the simulation). An
		// atomic's slot is one of thousands of a node touched at random, as the word is.
		op := g.opAt(k)
		if off := op.Addr.Offset() >> 3; off < uint64(len(g.n.words)) {
			prefetch(unsafe.Pointer(&g.n.words[off]))
		}
		if op.Kind == farmem.OpRead && len(op.Buf) > 0 {
			prefetch(unsafe.Pointer(&op.Buf[0]))
		}
		if nic := g.n.nic; len(nic.atoms) > 0 && transport.IsAtomic(op.Kind) {
			prefetch(unsafe.Pointer(&nic.atoms[nic.atomSlot(op.Addr)]))
		}
	}
	src := c.n
	t := src.nic.issueAt(at, int64(src.model.Issue)*int64(g.size()), 0)
	var arr int64
	if g.n == src {
		// A loopback through the client's own NIC (Model.LocalAccess): no link, no jitter.
		arr = t + int64(s.m.LoopbackLatency)
	} else {
		arr = t + s.lat(src.id, g.n.id)
	}
	q := g.q
	g.arrive = max(arr, q.lastArrive)
	q.lastArrive = g.arrive
	g.anext = nil
	if q.atail == nil {
		q.ahead, q.atail = g, g
		s.pushGroup(g.arrive, evArrive, g)
	} else {
		q.atail.anext = g
		q.atail = g
	}
}

// arrive is g reaching its target's NIC: its ops are queued for service there.
func (s *Sim) arrive(g *group) {
	q := g.q
	q.ahead = g.anext
	if q.ahead == nil {
		q.atail = nil
	} else {
		s.pushGroup(max(q.ahead.arrive, s.nowNs), evArrive, q.ahead)
	}
	g.anext = nil
	n := g.n
	if g.cancelled {
		g.inFabric = false
		s.maybeRecycle(g)
		return
	}
	switch s.reach(g.c, n) {
	case reachDown:
		s.failFrom(g, 0, s.downErr(g, "crashed"))
		s.replyAt(g, s.nowNs+s.lat(n.id, g.c.n.id))
		return
	case reachSilent:
		s.drop(g)
		return
	}
	if n.crashAfter >= 0 {
		g.limit, n.crashAfter = n.crashAfter, -1
	}
	now := s.nowNs
	au := int64(n.model.AtomicUnit)
	g.end = now
	for k := range g.size() {
		op := g.opAt(k)
		var bytes uint64
		if op.Kind == farmem.OpRead || op.Kind == farmem.OpWrite {
			bytes = uint64(len(op.Buf))
		}
		n.nic.ops[op.Kind]++
		ready, fin := n.nic.serve(now, int64(n.model.Verb[op.Kind]), bytes, transport.IsAtomic(op.Kind), op.Addr, au)
		*g.readyAt(k), *g.finAt(k) = ready, fin
		g.end = max(g.end, fin)
	}
	g.k, g.chunk = 0, 0
	g.pnext = nil
	if q.ptail == nil {
		q.phead, q.ptail = g, g
		s.scheduleApply(g)
	} else {
		q.ptail.pnext = g
		q.ptail = g
	}
}

// torn reports whether op is applied in chunks at n.
func (s *Sim) torn(n *node, op *farmem.Op) bool {
	return n.tearing && len(op.Buf) > 8 && (op.Kind == farmem.OpRead || op.Kind == farmem.OpWrite)
}

// chunks is the number of pieces a torn op is applied in.
func (s *Sim) chunks(op *farmem.Op) int {
	return min(s.m.TearChunks, (len(op.Buf)+7)/8)
}

// applyAt returns when the next piece of g's op k takes effect.
func (s *Sim) applyAt(g *group) int64 {
	op := g.opAt(g.k)
	at := *g.readyAt(g.k)
	if s.torn(g.n, op) && g.chunk > 0 {
		// The pieces of a torn op spread over its service, from its first one to its end.
		if nc, fin := s.chunks(op), *g.finAt(g.k); nc > 1 && fin > g.t0 {
			at = g.t0 + (fin-g.t0)*int64(g.chunk)/int64(nc-1)
		}
	}
	return max(at, s.nowNs)
}

// scheduleApply applies the next piece of g's op k now if its time has come, or schedules it.
func (s *Sim) scheduleApply(g *group) {
	if at := s.applyAt(g); at > s.nowNs {
		s.pushGroup(at, evApply, g)
		return
	}
	s.applyNext(g)
}

// chunkRange returns the byte range of chunk i of nc of an op of length l, cut at word
// boundaries of the target address.
func chunkRange(off uint64, l, i, nc int) (uint64, uint64) {
	cut := func(j int) uint64 {
		switch {
		case j <= 0:
			return 0 // not rounded up: an unaligned op's first bytes belong to its first piece
		case j >= nc:
			return uint64(l)
		}
		b := off + uint64(l)*uint64(j)/uint64(nc)
		b = (b + 7) &^ 7
		return min(max(b, off)-off, uint64(l))
	}
	return cut(i), cut(i + 1)
}

// applyNext applies the next ops (or pieces) of g at its target, as many as are due now.
func (s *Sim) applyNext(g *group) {
	n := g.n
	for {
		if g.cancelled {
			s.failFrom(g, g.k, s.downErr(g, "unreachable: its client crashed"))
			break
		}
		if n.state == stateCrashed {
			s.failFrom(g, g.k, s.downErr(g, "crashed"))
			break
		}
		if g.limit >= 0 && g.k >= g.limit {
			// The crash-after limit is reached: the node crashes now.
			s.crashTarget(n)
			s.failFrom(g, g.k, s.downErr(g, "crashed during the batch"))
			break
		}
		op := g.opAt(g.k)
		var val uint64
		if s.torn(n, op) {
			nc := s.chunks(op)
			if g.chunk == 0 {
				g.t0 = s.nowNs
				// Pieces land in a random order, as DMA does not promise address order.
				g.perm = g.perm[:0]
				for i := range nc {
					g.perm = append(g.perm, uint8(i))
				}
				s.jitter.Shuffle(nc, func(i, j int) { g.perm[i], g.perm[j] = g.perm[j], g.perm[i] })
			}
			lo, hi := chunkRange(op.Addr.Offset(), len(op.Buf), int(g.perm[g.chunk]), nc)
			n.apply(op, lo, hi)
			g.chunk++
			if g.chunk < nc {
				if at := s.applyAt(g); at > s.nowNs {
					s.pushGroup(at, evApply, g)
					return
				}
				continue
			}
			g.chunk = 0
		} else {
			val = n.apply(op, 0, uint64(len(op.Buf)))
			if n.c != nil && g.c.n != n && transport.IsAtomic(op.Kind) {
				n.markNIC(op)
			}
		}
		*g.valAt(g.k) = val
		*g.errAt(g.k) = nil
		g.k++
		if g.k == g.size() {
			break
		}
		if g.limit >= 0 && g.k >= g.limit {
			continue
		}
		if at := s.applyAt(g); at > s.nowNs {
			s.pushGroup(at, evApply, g)
			return
		}
	}
	s.finishAtTarget(g)
}

// finishAtTarget ends g's stay at its target: the next group of its queue pair proceeds and
// g's answer goes back.
func (s *Sim) finishAtTarget(g *group) {
	q := g.q
	q.phead = g.pnext
	if q.phead == nil {
		q.ptail = nil
	} else {
		s.scheduleApply(q.phead)
	}
	g.pnext = nil
	if g.signaled == 0 {
		s.deliver(g)
		g.inFabric = false
		s.maybeRecycle(g)
		return
	}
	back := int64(s.m.LoopbackLatency)
	if g.n != g.c.n {
		back = s.lat(g.n.id, g.c.n.id)
	}
	s.replyAt(g, max(g.end, s.nowNs)+back)
}

func (s *Sim) replyAt(g *group, at int64) { s.pushGroup(max(at, s.nowNs), evReply, g) }

// reply is g's answer reaching its client.
func (s *Sim) reply(g *group) {
	if r := s.reachBack(g.c, g.n); r == reachSilent {
		s.drop(g)
		return
	}
	s.deliver(g)
	g.inFabric = false
	s.maybeRecycle(g)
}

// drop loses g (a silent node or link): its ops fail when the down timeout expires.
func (s *Sim) drop(g *group) {
	s.pushGroup(max(g.posted+int64(s.m.DownTimeout), s.nowNs), evDown, g)
}

func (s *Sim) downTimeout(g *group) {
	s.failFrom(g, g.k, fmt.Errorf("sim: %v silent for %v: %w", g.n.id, s.m.DownTimeout, farmem.ErrNodeDown))
	s.deliver(g)
	g.inFabric = false
	s.maybeRecycle(g)
}

// failFrom sets the outcome of g's ops from k on to err.
func (s *Sim) failFrom(g *group, k int, err error) {
	for j := k; j < len(g.idx); j++ {
		g.vals[j], g.errs[j] = 0, err
	}
	g.k = len(g.idx)
}

func (s *Sim) downErr(g *group, why string) error {
	return fmt.Errorf("sim: %v %s: %w", g.n.id, why, farmem.ErrNodeDown)
}

// deliver reports g's outcome to its client, once.
func (s *Sim) deliver(g *group) {
	if g.delivered {
		return
	}
	g.delivered = true
	c := g.c
	if g.iprev != nil {
		g.iprev.inext = g.inext
	} else if c.inflight == g {
		c.inflight = g.inext
	}
	if g.inext != nil {
		g.inext.iprev = g.iprev
	}
	g.iprev, g.inext = nil, nil
	for k := range g.size() {
		op := g.opAt(k)
		if op.Unsignaled {
			continue
		}
		val, err := *g.valAt(k), *g.errAt(k)
		c.ctr.CountResult(op, val, err)
		if g.batch {
			g.comp.Complete(g.idx[k], val, err)
		}
	}
	if g.signaled > 0 {
		c.recordLatency(s.nowNs - g.posted)
	}
	if !g.batch && g.waiter != nil {
		s.wakeSeq(g.waiter, g.wseq, wakeEvent)
	}
}

// failInflight fails every in-flight group of c at once with err (a crashed client): its
// waiters see err, while its requests still run their course in the fabric.
func (s *Sim) failInflight(c *client, err error) {
	for g := c.inflight; g != nil; {
		nx := g.inext
		g.cancelled = true
		for k := range g.idx {
			g.vals[k], g.errs[k] = 0, err
		}
		s.deliver(g)
		g = nx
	}
}

// reach classifies how client c currently reaches node n.
type reachKind uint8

const (
	reachOK reachKind = iota
	reachSilent
	reachDown
)

func (s *Sim) reach(c *client, n *node) reachKind {
	switch n.state {
	case stateCrashed:
		return reachDown
	case stateHung:
		return reachSilent
	}
	return s.reachBack(c, n)
}

// reachBack reports whether the network between c and n is cut (partitions and links only).
func (s *Sim) reachBack(c *client, n *node) reachKind {
	if len(s.partitions) > 0 && s.partitions[partKey{c.info.ID, n.id}] {
		return reachSilent
	}
	if len(s.links) > 0 {
		if l := s.links[mkLinkKey(c.n.id, n.id)]; l != nil && l.cut {
			return reachSilent
		}
	}
	return reachOK
}

// lat returns one one-way trip between nodes a and b.
func (s *Sim) lat(a, b farmem.NodeID) int64 {
	d := int64(s.m.MemoryLatency)
	if a.IsCompute() && b.IsCompute() {
		d = int64(s.m.ComputeLatency)
	}
	if len(s.links) > 0 {
		if l := s.links[mkLinkKey(a, b)]; l != nil {
			d += int64(l.delay)
		}
	}
	if s.m.Jitter > 0 {
		d += s.jitter.Int64N(int64(s.m.Jitter))
	}
	return d
}
