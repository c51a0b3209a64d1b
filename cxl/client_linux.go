package cxl

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/farmem/farmem/atomics"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// client is one goroutine's farmem.Memory on a Fabric's compute node.
type client struct {
	transport.ClientState // info, runtime, counters, closed and crashed; the verbs
	f                     *Fabric
	m                     *mapping
	handler               bool

	// waitBucket is 1 + the wake bucket a Wait of this client sleeps on, or 0.
	waitBucket atomic.Int32

	// Batches that cannot run inline (a fault is set) go through per-node queues, which keep
	// this client's batches to one node in posting order. While any runs, every batch goes
	// through them.
	qps transport.Queues
}

var _ farmem.Memory = (*client)(nil)

// job is the part of a batch that goes to one node.
type job struct {
	ctx    context.Context
	s      *seg
	idx    []int
	comp   transport.Completer
	posted time.Time
}

func (c *client) Topology() *farmem.Topology { return &c.m.topo }

// Close implements farmem.Memory.
func (c *client) Close() error {
	if !c.SetClosed() {
		return nil
	}
	c.wakeWait()
	c.f.clients.Release(c.ClientInfo.ID, c)
	return nil
}

// crash makes the client fail-stop.
func (c *client) crash() {
	c.SetCrashed()
	c.wakeWait()
}

// wakeWait wakes a Wait of this client, so it sees the client closed or crashed.
func (c *client) wakeWait() {
	if b := c.waitBucket.Load(); b > 0 {
		_ = atomics.Guard(func() { bump(c.f.ctl().bucketSeq(int(b - 1))) })
	}
}

// apply applies one checked op to s under the policy and returns the word it found (atomics).
// Writes and atomics to a compute node's region wake the Waits they may satisfy.
func (s *seg) apply(op *farmem.Op, uncached bool) uint64 {
	off := op.Addr.Offset()
	switch op.Kind {
	case farmem.OpRead:
		if uncached && len(op.Buf) > 0 {
			atomics.FlushForRead(unsafe.Add(s.base, off), uintptr(len(op.Buf)))
		}
		s.read(off, op.Buf)
		return 0
	case farmem.OpWrite:
		s.write(off, op.Buf)
		if uncached && len(op.Buf) > 0 {
			atomics.WriteBack(unsafe.Add(s.base, off), uintptr(len(op.Buf)))
		}
		if s.cid != 0 {
			s.wake(off, uint64(len(op.Buf)))
		}
		return 0
	default:
		p := unsafe.Add(s.base, off)
		if uncached {
			atomics.FlushForRead(p, 8)
		}
		prev := s.mem.Atomic(op, off)
		if uncached {
			atomics.WriteBack(p, 8)
		}
		if s.cid != 0 {
			s.wake(off, 8)
		}
		return prev
	}
}

// exec runs one checked op on s: the liveness check of a peer compute node, the injected
// latency, and the op itself, with a memory fault (a truncated file) turned into an error.
func (c *client) exec(s *seg, op *farmem.Op) (val uint64, err error) {
	if gerr := atomics.Guard(func() { val, err = c.execUnguarded(s, op) }); gerr != nil {
		return 0, faultErr(op, gerr)
	}
	return val, err
}

// execUnguarded is exec for a caller that guards against memory faults itself.
func (c *client) execUnguarded(s *seg, op *farmem.Op) (uint64, error) {
	f := c.f
	if f.inject > 0 {
		f.injector.Delay(f.inject)
	}
	if s.cid != 0 && s.cid != f.cid && !c.m.leaseLive(s) {
		return 0, fmt.Errorf("cxl: %s at %v: compute node down: %w", op.Kind, op.Addr, farmem.ErrNodeDown)
	}
	return s.apply(op, f.uncached), nil
}

// faultErr is the error of an op that met a memory fault.
func faultErr(op *farmem.Op, gerr error) error {
	return fmt.Errorf("cxl: %s at %v: %w: %w", op.Kind, op.Addr, farmem.ErrNodeDown, gerr)
}

// inline reports whether a batch may run in the caller: no fault set in this process and
// nothing of this client's queued.
func (c *client) inline() bool { return c.m.faults.active.Load() == 0 && !c.qps.Busy() }

// single runs a one-op batch.
func (c *client) single(ctx context.Context, op farmem.Op) (uint64, error) {
	if err := c.Usable(); err != nil {
		return 0, err
	}
	if c.inline() {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		s := c.m.seg(op.Addr.Node())
		if s == nil {
			return 0, transport.NoSuchNode(op.Addr.Node())
		}
		if err := transport.CheckOp(&op, s.size); err != nil {
			return 0, err
		}
		if s.cid == 0 && !op.Unsignaled && c.f.inject == 0 && !c.f.uncached {
			// A signaled verb of a memory node, applied here with nothing of the policies
			// to apply, and counted by this goroutine alone (Counters.CountLone).
			val, err := applyOne(s, &op)
			c.Counters.CountLone(&op, val, err)
			return val, err
		}
		c.Counters.CountOp(&op, c.ClientInfo.Node)
		val, err := c.exec(s, &op)
		c.Counters.CountResult(&op, val, err)
		return val, err
	}
	return c.PostOne(ctx, op)
}

// Do implements farmem.Memory.
func (c *client) Do(ctx context.Context, b *farmem.Batch) error {
	return c.do(ctx, b, !c.f.uncached)
}

// do is Do, asking for the lines of the batch's reads and atomics as it checks the batch when
// hint is set.
func (c *client) do(ctx context.Context, b *farmem.Batch, hint bool) error {
	if c.inline() && c.Usable() == nil && ctx.Err() == nil {
		if ran, err := c.doPlain(b, hint); ran {
			return err
		}
	}
	return c.doGeneral(ctx, b, hint)
}

// doGeneral is do for a batch that is not plain or may not run inline.
func (c *client) doGeneral(ctx context.Context, b *farmem.Batch, hint bool) error {
	if !c.inline() || ctx.Err() != nil || c.Usable() != nil {
		return transport.Finish(ctx, c.Post(ctx, b))
	}
	if c.admitInline(b, hint) {
		// What Post does inline, without a Pending. The lines were asked for while the batch
		// was checked; a batch without atomics is counted while they come (its counts do not
		// depend on outcomes unless an op fails), others once run.
		ahead := c.Counters.CountAhead(b, c.ClientInfo.Node)
		err := c.applyInline(b)
		switch {
		case !ahead:
			c.Counters.CountDone(b, c.ClientInfo.Node)
		case err != nil:
			c.Counters.UncountFailed(b)
		}
		return err
	}
	return transport.Finish(ctx, c.Post(ctx, b))
}

// runInline applies b's ops in the caller, in batch order, leaving each op's outcome in the op,
// and returns the first signaled op's error, as transport.Err would report it. The batch is
// checked; the caller counts it and its outcomes. One fault guard covers the whole batch (see
// runGuarded).
func (c *client) runInline(b *farmem.Batch) error {
	if !c.f.uncached {
		c.prefetch(b)
	}
	return c.applyInline(b)
}

// applyInline is runInline after the prefetches.
func (c *client) applyInline(b *farmem.Batch) error {
	var first error
	for i := 0; i < len(b.Ops); {
		i = c.runGuarded(b, i, &first)
	}
	return first
}

// prefetchMax is the most bytes of one op that prefetch asks for.
const prefetchMax = 4096

// prefetch asks the CPU for the lines every op of the checked batch b reads or changes
// (atomics.Prefetch: a hint that never faults), before any is applied, so that the batch's
// cache misses, independent of each other, overlap instead of following one another.
func (c *client) prefetch(b *farmem.Batch) {
	for i := range b.Ops {
		op := &b.Ops[i]
		s := c.m.seg(op.Addr.Node())
		n := uintptr(8)
		switch op.Kind {
		case farmem.OpRead:
			n = uintptr(min(len(op.Buf), prefetchMax))
		case farmem.OpWrite:
			continue
		}
		atomics.Prefetch(unsafe.Add(s.base, op.Addr.Offset()), n)
	}
}

// runGuarded applies b's ops from i on, as runInline does, under one fault guard: the
// goroutine's panic-on-fault is set for the run and the caller's setting restored after it.
// An op that meets a memory fault (a truncated file) completes with an error wrapping
// farmem.ErrNodeDown and atomics.ErrFault, and the run stops after it; it returns the index of
// the next op to apply. Other panics propagate, with the setting restored.
func (c *client) runGuarded(b *farmem.Batch, i int, first *error) (next int) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			gerr := atomics.FaultOf(r)
			if gerr == nil {
				panic(r)
			}
			op := &b.Ops[next]
			c.complete(op, 0, faultErr(op, gerr), first)
			next++
		}
	}()
	for next = i; next < len(b.Ops); next++ {
		op := &b.Ops[next]
		val, err := c.execUnguarded(c.m.seg(op.Addr.Node()), op)
		c.complete(op, val, err, first)
	}
	return next
}

// complete records an inline op's outcome (not counted), and its error in first if it is the
// batch's first signaled failure.
func (c *client) complete(op *farmem.Op, val uint64, err error, first *error) {
	transport.SetResult(op, val, err)
	if err != nil && *first == nil && !op.Unsignaled {
		*first = err
	}
}

// Post implements farmem.Memory. A batch is checked whole before anything of it is applied.
// Without faults it runs in the caller, op by op in batch order (every op is a few CPU
// instructions on the mapping), and is done when Post returns.
func (c *client) Post(ctx context.Context, b *farmem.Batch) *farmem.Pending {
	b, rej := transport.Admit(b, c.Usable(), c.m.sizeOf)
	if rej != nil {
		return rej
	}
	c.Counters.CountBatch(b, c.ClientInfo.Node)
	if c.inline() {
		p, comp := transport.NewPendingOn(b, nil, c.Runtime())
		if err := ctx.Err(); err != nil {
			comp.Fail(err)
			return p
		}
		_ = c.runInline(b)
		for i := range b.Ops {
			val, err := b.Result(i)
			c.Counters.CountResult(&b.Ops[i], val, err)
			comp.Complete(i, val, err)
		}
		return p
	}
	p, comp := transport.NewPendingOn(b, transport.NewChanParker(), c.Runtime())
	now := time.Now()
	var buf [4]transport.Group
	for _, g := range transport.GroupByNode(b, buf[:0]) {
		j := &job{ctx: ctx, s: c.m.seg(g.Node), idx: g.Idx, comp: comp, posted: now}
		c.qps.Push(g.Node, func() { c.run(j) })
	}
	return p
}

// run executes a job under this process's fault view: a crashed node fails it at once, a hung
// or partitioned one after the down timeout, and an armed CrashAfter applies only a prefix.
func (c *client) run(j *job) {
	b := j.comp.Batch()
	fail := func(from int, err error) { transport.FailFrom(j.comp, j.idx, from, err) }
	if err := j.ctx.Err(); err != nil {
		fail(0, err)
		return
	}
	if err := c.Usable(); err != nil {
		fail(0, err)
		return
	}
	timeout := c.m.h.DownTimeout
	if err := c.m.faults.awaitReach(j.ctx, c.ClientInfo.ID, j.s.id, j.posted.Add(timeout)); err != nil {
		fail(0, err)
		return
	}
	limit, crash := len(j.idx), false
	if k, ok := c.m.faults.takeCrashAfter(j.s.id); ok && k < limit {
		limit, crash = k, true
	}
	for _, i := range j.idx[:limit] {
		op := &b.Ops[i]
		val, err := c.exec(j.s, op)
		c.Counters.CountResult(op, val, err)
		j.comp.Complete(i, val, err)
	}
	if crash {
		c.m.crashNode(j.s.id)
		fail(limit, fmt.Errorf("cxl: %v crashed during the batch: %w", j.s.id, farmem.ErrNodeDown))
	}
}

// Wait implements farmem.Memory: it sleeps on a futex of the word's wake bucket in the compute
// node's control block, which every verb that writes the node's region bumps when the bucket
// has waiters, in whatever process it runs.
func (c *client) Wait(ctx context.Context, a farmem.Addr, until func(uint64) bool) (uint64, error) {
	s := c.f.seg
	off, err := transport.AdmitWait(c.Usable(), &c.Counters, a, c.ClientInfo.Node, s.size, until)
	if err != nil {
		return 0, err
	}
	var v uint64
	if gerr := atomics.Guard(func() { v, err = c.wait(ctx, s, off, until) }); gerr != nil {
		return 0, fmt.Errorf("cxl: wait at %v: %w: %w", a, farmem.ErrNodeDown, gerr)
	}
	return v, err
}

func (c *client) wait(ctx context.Context, s *seg, off uint64, until func(uint64) bool) (uint64, error) {
	b := bucketOf(off)
	ctl := c.f.ctl()
	seq, waiters := ctl.bucketSeq(b), ctl.bucketWaiters(b)
	atomic.AddUint32(waiters, 1)
	defer atomic.AddUint32(waiters, ^uint32(0))
	c.waitBucket.Store(int32(b) + 1)
	defer c.waitBucket.Store(0)
	stop := context.AfterFunc(ctx, func() { _ = atomics.Guard(func() { bump(seq) }) })
	defer stop()
	word := unsafe.Add(s.base, off)
	for {
		v0 := atomic.LoadUint32(seq)
		if err := c.Usable(); err != nil {
			return 0, err
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if c.f.uncached {
			atomics.FlushForRead(word, 8)
		}
		if v := s.mem.Load(off); until(v) {
			return v, nil
		}
		// Woken by the writers' bumps; the timeout is only a backstop for a wake-up lost to a
		// vanished page (a truncated file), after which the client's crash must still end it.
		futexWait(seq, v0, c.m.h.DownTimeout)
	}
}

func bucketOf(off uint64) int { return int(off>>3) % numBuckets }

// wake bumps the wake buckets of the words [off, off+n) of a compute node's region that have
// waiters. Its load of a bucket's waiter count follows the data's store (a sequentially
// consistent atomic), and a waiter counts itself before it reads the data, so no wake is lost.
func (s *seg) wake(off, n uint64) {
	if n == 0 {
		return
	}
	ctl := ctlBlock{s.ctl}
	first, last := off>>3, (off+n-1)>>3
	if last-first+1 >= numBuckets {
		for b := range numBuckets {
			if atomic.LoadUint32(ctl.bucketWaiters(b)) != 0 {
				bump(ctl.bucketSeq(b))
			}
		}
		return
	}
	for w := first; w <= last; w++ {
		b := int(w % numBuckets)
		if atomic.LoadUint32(ctl.bucketWaiters(b)) != 0 {
			bump(ctl.bucketSeq(b))
		}
	}
}
