package cxl

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/farmem/farmem/atomics"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// A mailbox's state word: a 24-bit sequence (advanced at every claim and every forced free, so
// a party holding a stale view fails its next CAS), 4 bits of flags and a 4-bit phase. Each
// phase is the turn of one side: only that side writes the mailbox's payload and moves it on.
const (
	phFree    = iota // no owner
	phClaimed        // caller: writing the first request chunk
	phReqNew         // target: the first request chunk is posted; the dispatcher takes it
	phReqMore        // target: a later request chunk is posted
	phReqAck         // caller: the target read a chunk and wants the next
	phRunning        // target: reading the request, or running the handler
	phResp           // caller: a reply chunk is posted
	phRespAck        // target: the caller read a reply chunk and wants the next

	flagAbandoned = 1 // set by a caller that gave up during the target's turn
	seqMask       = 1<<24 - 1
)

var phaseNames = [...]string{"free", "claimed", "request", "request-more", "request-ack", "running", "reply", "reply-ack"}

func mkSt(seq, flags, phase uint32) uint32 { return (seq&seqMask)<<8 | flags<<4 | phase }
func stSeq(st uint32) uint32               { return st >> 8 }
func stFlags(st uint32) uint32             { return st >> 4 & 0xf }
func stPhase(st uint32) uint32             { return st & 0xf }

// callerTurn reports whether a phase waits on the caller; a dead caller's mailbox in such a
// phase may be reclaimed by anyone.
func callerTurn(ph uint32) bool { return ph == phClaimed || ph == phReqAck || ph == phResp }

// ctlBlock is a compute node's control block: doorbell, slot-free word, wake buckets, mailboxes.
type ctlBlock struct{ p unsafe.Pointer }

func (c ctlBlock) u32(off uintptr) *uint32     { return (*uint32)(unsafe.Add(c.p, off)) }
func (c ctlBlock) bell() *uint32               { return c.u32(ctlBell) }
func (c ctlBlock) bellSleepers() *uint32       { return c.u32(ctlBell + 4) }
func (c ctlBlock) slotFreeSeq() *uint32        { return c.u32(ctlSlotFree) }
func (c ctlBlock) slotFreeWaiters() *uint32    { return c.u32(ctlSlotFree + 4) }
func (c ctlBlock) bucketSeq(b int) *uint32     { return c.u32(ctlBuckets + uintptr(b)*8) }
func (c ctlBlock) bucketWaiters(b int) *uint32 { return c.u32(ctlBuckets + uintptr(b)*8 + 4) }

// slot is one mailbox.
type slot struct {
	p    unsafe.Pointer
	size uint64 // payload capacity
}

func (m *mapping) slot(s *seg, i int) slot {
	return slot{unsafe.Add(s.ctl, ctlSlots+uintptr(i)*uintptr(m.h.slotSize())), m.h.MailboxSize}
}

func (s slot) u64(off uintptr) *uint64 { return (*uint64)(unsafe.Add(s.p, off)) }
func (s slot) owner() *uint64          { return s.u64(slotOwner) }
func (s slot) st() *uint32             { return (*uint32)(unsafe.Add(s.p, slotState)) }
func (s slot) sleepers() *uint32       { return (*uint32)(unsafe.Add(s.p, slotState+4)) }
func (s slot) payload(n uint64) []byte {
	return unsafe.Slice((*byte)(unsafe.Add(s.p, slotHeader)), n)
}

// put copies one chunk into the payload under the policy.
func (s slot) put(b []byte, uncached bool) {
	copy(s.payload(uint64(len(b))), b)
	if uncached && len(b) > 0 {
		atomics.WriteBack(unsafe.Add(s.p, slotHeader), uintptr(len(b)))
	}
}

// get appends n payload bytes to dst under the policy.
func (s slot) get(dst []byte, n uint64, uncached bool) []byte {
	if uncached && n > 0 {
		atomics.FlushForRead(unsafe.Add(s.p, slotHeader), uintptr(n))
	}
	return append(dst, s.payload(n)...)
}

// freeSlot frees mailbox sl of node s, which is in state st and owned by tok, advancing its
// sequence, and wakes whoever waits on it or for a free mailbox. It fails if sl moved on.
func (m *mapping) freeSlot(s *seg, sl slot, st uint32, tok uint64) bool {
	if !atomic.CompareAndSwapUint32(sl.st(), st, mkSt(stSeq(st)+1, 0, phFree)) {
		return false
	}
	atomic.CompareAndSwapUint64(sl.owner(), tok, 0)
	wake(sl.st(), sl.sleepers())
	c := ctlBlock{s.ctl}
	if atomic.LoadUint32(c.slotFreeWaiters()) != 0 {
		bump(c.slotFreeSeq())
	}
	return true
}

// tokenNode splits a mailbox owner token.
func tokenNode(tok uint64) (farmem.ComputeID, uint32) {
	return farmem.ComputeID(tok >> 32), uint32(tok)
}

// reclaimDead frees the mailboxes of node s whose callers died while it was their turn (a
// dead caller's last reply, or a request it never finished). Mailboxes in the target's turn
// are left to the target, which frees them when it finds the caller gone.
func (m *mapping) reclaimDead(s *seg) int {
	n := 0
	for i := range int(m.h.Mailboxes) {
		sl := m.slot(s, i)
		st := atomic.LoadUint32(sl.st())
		if !callerTurn(stPhase(st)) {
			continue
		}
		tok := atomic.LoadUint64(sl.owner())
		if tok == 0 {
			continue
		}
		if c, g := tokenNode(tok); m.live(c, g) {
			continue
		}
		if m.freeSlot(s, sl, st, tok) {
			n++
		}
	}
	return n
}

// Call implements farmem.Memory. The request goes through a mailbox in the target's control
// block (in chunks of the mailbox size), the target's dispatcher hands it to a handler
// goroutine, and the reply comes back through the same mailbox, each step woken by a futex on
// the mailbox's state word. A target that dies or is fenced fails the call with ErrNodeDown
// within the down timeout; a caller that dies has its mailbox reclaimed.
func (c *client) Call(ctx context.Context, node farmem.NodeID, method uint16, req []byte) ([]byte, error) {
	if err := c.Usable(); err != nil {
		return nil, err
	}
	s := c.m.seg(node)
	switch {
	case !node.IsCompute():
		return nil, fmt.Errorf("cxl: call to memory node %v: %w", node, farmem.ErrInvalid)
	case s == nil:
		return nil, fmt.Errorf("cxl: call to %v: no such compute node: %w", node, farmem.ErrInvalid)
	case len(req) > farmem.MaxCallBytes:
		return nil, fmt.Errorf("cxl: call request of %d bytes exceeds %d: %w", len(req), farmem.MaxCallBytes, farmem.ErrInvalid)
	}
	reply, err := c.call(ctx, s, method, req, 0)
	c.Counters.CountCall(len(req), len(reply))
	return reply, err
}

// call runs a Call, or with flags metaOneWay hands a one-way message over (send_linux.go).
func (c *client) call(ctx context.Context, s *seg, method uint16, req []byte, flags uint64) ([]byte, error) {
	timeout := c.m.h.DownTimeout
	if err := c.m.faults.awaitReach(ctx, c.ClientInfo.ID, s.id, time.Now().Add(timeout)); err != nil {
		return nil, err
	}
	var reply []byte
	var err error
	if gerr := atomics.Guard(func() { reply, err = c.callMapped(ctx, s, method, req, flags) }); gerr != nil {
		return nil, fmt.Errorf("cxl: call %d to %v: %w: %w", method, s.id, farmem.ErrNodeDown, gerr)
	}
	return reply, err
}

// caller is one Call in progress.
type caller struct {
	c     *client
	s     *seg // the target
	gen   uint32
	sl    slot
	seq   uint32
	wake  atomic.Pointer[uint32] // the futex word the call sleeps on, for ctx's waker
	slow  time.Time              // last full liveness check of the target
	phase uint32
	flags uint64 // request meta flags: metaOneWay
}

func (c *client) callMapped(ctx context.Context, s *seg, method uint16, req []byte, flags uint64) ([]byte, error) {
	gen, ok := c.m.liveGen(s)
	if !ok {
		return nil, fmt.Errorf("cxl: call %d to %v: %w", method, s.id, farmem.ErrNodeDown)
	}
	cl := &caller{c: c, s: s, gen: gen, flags: flags}
	stop := context.AfterFunc(ctx, func() {
		_ = atomics.Guard(func() {
			if p := cl.wake.Load(); p != nil {
				futexWake(p)
			}
		})
	})
	defer stop()
	if err := cl.claim(ctx); err != nil {
		return nil, fmt.Errorf("cxl: call %d to %v: %w", method, s.id, err)
	}
	reply, err := cl.exchange(ctx, method, req)
	if err != nil {
		cl.abandon()
		return nil, fmt.Errorf("cxl: call %d to %v: %w", method, s.id, err)
	}
	return reply, nil
}

// alive checks that the target is still the node the call addressed: its lease, and, if
// slow and none was made in the last checkEvery, whether its process lives.
func (cl *caller) alive(slow bool) error {
	m := cl.c.m
	w := atomic.LoadUint64(cl.s.lease())
	if leaseGen(w) != cl.gen || leaseExp(w) <= expCrashed || leaseExp(w) <= m.nowRel() || m.faults.isDown(cl.s.id) {
		m.live(cl.s.cid, cl.gen) // fences an expired lease
		return fmt.Errorf("target down: %w", farmem.ErrNodeDown)
	}
	if slow && (cl.slow.IsZero() || time.Since(cl.slow) >= cl.c.f.checkEvery) {
		cl.slow = time.Now()
		if !m.live(cl.s.cid, cl.gen) {
			return fmt.Errorf("target died: %w", farmem.ErrNodeDown)
		}
	}
	return nil
}

// interrupted reports why a waiting call must stop: the caller's client or context, or the
// target. slow adds the check of the target's process (made before each sleep: a call that
// is answered while it spins does not pay for it).
func (cl *caller) interrupted(ctx context.Context, slow bool) error {
	if err := cl.c.Usable(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return cl.alive(slow)
}

// claim takes a free mailbox of the target, waiting for one if all are busy.
func (cl *caller) claim(ctx context.Context) error {
	m, f := cl.c.m, cl.c.f
	n := int(m.h.Mailboxes)
	start := int(cl.c.ClientInfo.ID) % n
	ctl := ctlBlock{cl.s.ctl}
	for {
		for k := range n {
			sl := m.slot(cl.s, (start+k)%n)
			if atomic.LoadUint64(sl.owner()) != 0 || !atomic.CompareAndSwapUint64(sl.owner(), 0, f.token) {
				continue
			}
			st := atomic.LoadUint32(sl.st())
			seq := stSeq(st) + 1
			if stPhase(st) == phFree && atomic.CompareAndSwapUint32(sl.st(), st, mkSt(seq, 0, phClaimed)) {
				cl.sl, cl.seq, cl.phase = sl, seq&seqMask, phClaimed
				cl.wake.Store(sl.st())
				return nil
			}
			atomic.CompareAndSwapUint64(sl.owner(), f.token, 0) // a reset is in flight: let go
		}
		if m.reclaimDead(cl.s) > 0 {
			continue
		}
		seq := ctl.slotFreeSeq()
		atomic.AddUint32(ctl.slotFreeWaiters(), 1)
		cl.wake.Store(seq)
		v := atomic.LoadUint32(seq)
		free := false
		for k := range n {
			if atomic.LoadUint64(m.slot(cl.s, k).owner()) == 0 {
				free = true
				break
			}
		}
		err := cl.interrupted(ctx, true)
		if !free && err == nil {
			futexWait(seq, v, f.checkEvery)
		}
		atomic.AddUint32(ctl.slotFreeWaiters(), ^uint32(0))
		if err != nil {
			return err
		}
	}
}

// spinFor is how long a party yields the processor, re-checking the mailbox, before it sleeps
// in the futex (spin, then park): a peer usually answers within a few microseconds, a futex
// wake-up costs about as much, and a goroutine blocked in a system call keeps its P from the
// scheduler until sysmon retakes it.
const spinFor = 50 * time.Microsecond

// await sleeps until the mailbox reaches one of the phases in want (a bit set).
func (cl *caller) await(ctx context.Context, want uint32) error {
	start := time.Now()
	for {
		st := atomic.LoadUint32(cl.sl.st())
		if stSeq(st) != cl.seq {
			return fmt.Errorf("mailbox reclaimed (the target restarted or fenced this node): %w", farmem.ErrNodeDown)
		}
		if want&(1<<stPhase(st)) != 0 {
			cl.phase = stPhase(st)
			return nil
		}
		spin := time.Since(start) < spinFor
		if err := cl.interrupted(ctx, !spin); err != nil {
			return err
		}
		if spin {
			runtime.Gosched()
			continue
		}
		park(cl.sl.st(), cl.sl.sleepers(), st, cl.c.f.checkEvery)
	}
}

// move advances the mailbox from the caller's turn to phase to and wakes the target.
func (cl *caller) move(to uint32) error {
	if !atomic.CompareAndSwapUint32(cl.sl.st(), mkSt(cl.seq, 0, cl.phase), mkSt(cl.seq, 0, to)) {
		return fmt.Errorf("mailbox reclaimed: %w", farmem.ErrNodeDown)
	}
	cl.phase = to
	wake(cl.sl.st(), cl.sl.sleepers())
	return nil
}

// exchange sends the request and receives the reply.
func (cl *caller) exchange(ctx context.Context, method uint16, req []byte) ([]byte, error) {
	c, f, sl := cl.c, cl.c.f, cl.sl
	atomic.StoreUint64(sl.u64(slotMeta), uint64(method)|uint64(c.ClientInfo.ID)<<16|cl.flags)
	atomic.StoreUint64(sl.u64(slotTotal), uint64(len(req)))
	atomic.StoreUint64(sl.u64(slotTarget), uint64(cl.gen))
	for off, first := 0, true; ; first = false {
		n := min(len(req)-off, int(sl.size))
		if f.inject > 0 {
			f.injector.Delay(f.inject)
		}
		sl.put(req[off:off+n], f.uncached)
		atomic.StoreUint64(sl.u64(slotOff), uint64(off))
		atomic.StoreUint64(sl.u64(slotLen), uint64(n))
		to := uint32(phReqMore)
		if first {
			to = phReqNew
		}
		if err := cl.move(to); err != nil {
			return nil, err
		}
		if first {
			ring(ctlBlock{cl.s.ctl})
		}
		off += n
		if err := cl.await(ctx, 1<<phReqAck|1<<phResp); err != nil {
			return nil, err
		}
		if cl.phase == phResp {
			break
		}
		if off >= len(req) {
			return nil, fmt.Errorf("the target asked for more than the %d-byte request: %w", len(req), farmem.ErrNodeDown)
		}
	}
	var reply []byte
	for {
		meta := atomic.LoadUint64(sl.u64(slotMeta))
		total := atomic.LoadUint64(sl.u64(slotTotal))
		off := atomic.LoadUint64(sl.u64(slotOff))
		n := atomic.LoadUint64(sl.u64(slotLen))
		if total > farmem.MaxCallBytes+maxErrorText || off != uint64(len(reply)) || n > sl.size || n > total-off {
			return nil, fmt.Errorf("malformed reply chunk (%d bytes at %d of %d): %w", n, off, total, farmem.ErrNodeDown)
		}
		if f.inject > 0 {
			f.injector.Delay(f.inject)
		}
		if reply == nil {
			reply = make([]byte, 0, total)
		}
		reply = sl.get(reply, n, f.uncached)
		if off+n == total {
			// The reply is complete even if the mailbox was reclaimed meanwhile.
			c.m.freeSlot(cl.s, sl, mkSt(cl.seq, 0, phResp), f.token)
			cl.sl = slot{}
			return replyOf(meta, reply)
		}
		if err := cl.move(phRespAck); err != nil {
			return nil, err
		}
		if err := cl.await(ctx, 1<<phResp); err != nil {
			return nil, err
		}
	}
}

// maxErrorText bounds the error text of a failed Call's reply.
const maxErrorText = 4096

// replyOf turns a reply's code and bytes into the Call's result.
func replyOf(meta uint64, body []byte) ([]byte, error) {
	code, remote := transport.Code(meta>>32), meta>>40&1 == 1
	switch {
	case code == transport.CodeOK:
		return body, nil
	case remote:
		return nil, transport.RemoteError(code, string(body))
	}
	return nil, fmt.Errorf("%s: %w", body, code.Err())
}

// abandon gives the mailbox up after a failed exchange: freed at once in the caller's turn,
// flagged for the target to free in its turn.
func (cl *caller) abandon() {
	if cl.sl.p == nil {
		return
	}
	m, sl := cl.c.m, cl.sl
	for {
		st := atomic.LoadUint32(sl.st())
		switch {
		case stSeq(st) != cl.seq || stPhase(st) == phFree || stFlags(st)&flagAbandoned != 0:
			return
		case callerTurn(stPhase(st)):
			if m.freeSlot(cl.s, sl, st, cl.c.f.token) {
				return
			}
		default:
			if atomic.CompareAndSwapUint32(sl.st(), st, st|flagAbandoned<<4) {
				wake(sl.st(), sl.sleepers())
				return
			}
		}
	}
}

// dispatcher takes new requests from the node's mailboxes and hands each to a handler
// goroutine, at most MaxHandlers at once. Callers bump the doorbell; the dispatcher scans when
// it moved, spins (yielding) for a while after the last request, and then sleeps on the
// doorbell's futex.
func (f *Fabric) dispatcher() {
	defer f.bg.Done()
	ctl := f.ctl()
	var seen uint32
	scan := true
	last := time.Now()
	for {
		var v uint32
		done := false
		err := atomics.Guard(func() {
			v = atomic.LoadUint32(ctl.bell())
			if f.stopped() {
				done = true
				return
			}
			if (scan || v != seen) && f.state.Load() != stateHung {
				seen, scan = v, false
				var n int
				n, done = f.dispatchOnce()
				if n > 0 {
					last = time.Now()
				}
			}
		})
		if err != nil {
			f.crash()
			return
		}
		if done {
			return
		}
		// Yield, so the handler goroutines just started run before this thread can block in
		// the futex with its P (a P held by a blocked system call is not idle to the scheduler
		// until sysmon retakes it, tens of microseconds later), and keep yielding a while: a
		// burst of calls then needs no wake-up.
		runtime.Gosched()
		if time.Since(last) < dispatchSpin {
			continue
		}
		// The timeout is a backstop, not a poll: a wake-up can be lost only if the control
		// block's page vanished (a truncated file), and then the node must still notice.
		if err := atomics.Guard(func() { park(ctl.bell(), ctl.bellSleepers(), v, f.checkEvery) }); err != nil {
			f.crash()
			return
		}
		scan, last = true, time.Now()
	}
}

// ring bumps a node's doorbell and wakes its dispatcher if it sleeps.
func ring(c ctlBlock) {
	atomic.AddUint32(c.bell(), 1)
	wake(c.bell(), c.bellSleepers())
}

// dispatchSpin is how long the dispatcher keeps yielding after its last request before it
// sleeps.
const dispatchSpin = 50 * time.Microsecond

// dispatchOnce scans the mailboxes once; it returns how many requests it dispatched and
// whether the node stopped meanwhile.
func (f *Fabric) dispatchOnce() (n int, stopped bool) {
	m := f.m
	for i := range int(m.h.Mailboxes) {
		sl := m.slot(f.seg, i)
		st := atomic.LoadUint32(sl.st())
		if stPhase(st) != phReqNew {
			continue
		}
		if stFlags(st)&flagAbandoned != 0 || uint32(atomic.LoadUint64(sl.u64(slotTarget))) != f.gen {
			// Given up, or addressed to this id's previous holder.
			m.freeSlot(f.seg, sl, st, atomic.LoadUint64(sl.owner()))
			continue
		}
		var hc *client
		if atomic.LoadUint64(sl.u64(slotMeta))&metaOneWay == 0 {
			// A Call takes a handler client now; a one-way message takes none here (its
			// handler runs later from the inbox), so a full inbox cannot hold them all.
			var ok bool
			if hc, ok = f.handlers.Take(f.stop); !ok {
				return n, true
			}
		}
		seq := stSeq(st)
		if !atomic.CompareAndSwapUint32(sl.st(), st, mkSt(seq, 0, phRunning)) {
			if hc != nil {
				f.handlers.AddClient(hc)
			}
			continue
		}
		f.serving.Add(1)
		n++
		go f.serve(sl, seq, hc)
	}
	return n, false
}

// server is one Call being served.
type server struct {
	f     *Fabric
	sl    slot
	seq   uint32
	tok   uint64
	phase uint32
}

// serve reads a request, runs its handler and writes the reply.
func (f *Fabric) serve(sl slot, seq uint32, hc *client) {
	defer f.serving.Done()
	if hc != nil {
		defer f.handlers.AddClient(hc)
	}
	sv := &server{f: f, sl: sl, seq: seq, phase: phRunning}
	_ = atomics.Guard(func() { sv.run(hc) })
}

func (sv *server) run(hc *client) {
	f, sl := sv.f, sv.sl
	sv.tok = atomic.LoadUint64(sl.owner())
	meta := atomic.LoadUint64(sl.u64(slotMeta))
	method, from := uint16(meta), farmem.ClientID(meta>>16)
	total := atomic.LoadUint64(sl.u64(slotTotal))
	if total > farmem.MaxCallBytes {
		sv.reply(meta, transport.CodeInvalid, false, fmt.Appendf(nil, "request of %d bytes exceeds %d", total, farmem.MaxCallBytes))
		return
	}
	req := make([]byte, 0, total)
	for {
		off := atomic.LoadUint64(sl.u64(slotOff))
		n := atomic.LoadUint64(sl.u64(slotLen))
		if off != uint64(len(req)) || n > sl.size || n > total-off {
			sv.reply(meta, transport.CodeInvalid, false, fmt.Appendf(nil, "malformed request chunk (%d bytes at %d of %d)", n, off, total))
			return
		}
		req = sl.get(req, n, f.uncached)
		if uint64(len(req)) == total {
			break
		}
		if !sv.move(phReqAck) || !sv.awaitCaller(phReqMore) {
			return
		}
	}
	if sv.phase != phRunning && !sv.move(phRunning) {
		return
	}
	if meta&metaOneWay != 0 {
		sv.queue(meta, from, method, req)
		return
	}
	h := f.handlers.Get(method)
	if h == nil {
		sv.reply(meta, transport.CodeNoHandler, false, fmt.Appendf(nil, "method %d on %v", method, f.id))
		return
	}
	reply, err := transport.RunHandler(f.ctx, h, hc, from, req)
	switch {
	case err != nil:
		msg := err.Error()
		if len(msg) > maxErrorText {
			msg = msg[:maxErrorText]
		}
		sv.reply(meta, transport.CodeOf(err), true, []byte(msg))
	case len(reply) > farmem.MaxCallBytes:
		sv.reply(meta, transport.CodeInvalid, false, fmt.Appendf(nil, "reply of %d bytes exceeds %d", len(reply), farmem.MaxCallBytes))
	default:
		sv.reply(meta, transport.CodeOK, false, reply)
	}
}

// move advances the mailbox from the target's turn. If the caller abandoned the call, the
// target frees the mailbox instead; if it was reclaimed, nothing more is written.
func (sv *server) move(to uint32) bool {
	st := sv.sl.st()
	if atomic.CompareAndSwapUint32(st, mkSt(sv.seq, 0, sv.phase), mkSt(sv.seq, 0, to)) {
		sv.phase = to
		wake(st, sv.sl.sleepers())
		return true
	}
	if cur := atomic.LoadUint32(st); stSeq(cur) == sv.seq && stFlags(cur)&flagAbandoned != 0 {
		sv.f.m.freeSlot(sv.f.seg, sv.sl, cur, sv.tok)
	}
	return false
}

// awaitCaller sleeps until the caller moves the mailbox to phase want. If the caller dies
// meanwhile, the target frees the mailbox.
func (sv *server) awaitCaller(want uint32) bool {
	f, st := sv.f, sv.sl.st()
	c, g := tokenNode(sv.tok)
	start := time.Now()
	var last time.Time
	for {
		v := atomic.LoadUint32(st)
		if stSeq(v) != sv.seq {
			return false
		}
		if stPhase(v) == want {
			sv.phase = want
			return true
		}
		if f.stopped() {
			return false
		}
		spin := time.Since(start) < spinFor
		if !spin && (last.IsZero() || time.Since(last) >= f.checkEvery) {
			last = time.Now()
			if !f.m.live(c, g) {
				f.m.freeSlot(f.seg, sv.sl, v, sv.tok)
				return false
			}
		}
		if spin {
			runtime.Gosched()
			continue
		}
		park(st, sv.sl.sleepers(), v, f.checkEvery)
	}
}

// reply writes the reply (or error text) in chunks, each in the target's turn.
func (sv *server) reply(meta uint64, code transport.Code, remote bool, body []byte) {
	f, sl := sv.f, sv.sl
	meta = meta&0xffffffff | uint64(code)<<32
	if remote {
		meta |= 1 << 40
	}
	for off := 0; ; {
		if f.stopped() {
			return // this id may be another incarnation's by now: write nothing
		}
		if cur := atomic.LoadUint32(sl.st()); cur != mkSt(sv.seq, 0, sv.phase) {
			if stSeq(cur) == sv.seq && stFlags(cur)&flagAbandoned != 0 {
				f.m.freeSlot(f.seg, sl, cur, sv.tok)
			}
			return
		}
		n := min(len(body)-off, int(sl.size))
		sl.put(body[off:off+n], f.uncached)
		atomic.StoreUint64(sl.u64(slotMeta), meta)
		atomic.StoreUint64(sl.u64(slotTotal), uint64(len(body)))
		atomic.StoreUint64(sl.u64(slotOff), uint64(off))
		atomic.StoreUint64(sl.u64(slotLen), uint64(n))
		if !sv.move(phResp) {
			return
		}
		off += n
		if off >= len(body) || !sv.awaitCaller(phRespAck) {
			return
		}
	}
}
