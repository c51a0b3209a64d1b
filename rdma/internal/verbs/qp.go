package verbs

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// Config configures a QP.
type Config struct {
	// Name names the remote node in errors.
	Name string
	// Depth is the send queue's size: the most work requests in flight (default 128).
	Depth int
	// SignalEvery bounds a run of unsignaled work requests: at least one in this many is
	// signaled (default Depth/2; at most Depth).
	SignalEvery int
	// PollBatch is how many completions one poll call takes at most (default 32).
	PollBatch int
	// Staging is the size of the registered staging ring (default 1 MiB). An op larger than a
	// quarter of it gets its own registration.
	Staging int
	// MaxQueued is how many ops may wait behind an unsettled MaskedCAS before Post blocks
	// (default 4*Depth).
	MaxQueued int
	// DownTimeout: if work is in flight and nothing completes for this long, the queue pair
	// fails it all with farmem.ErrNodeDown (default 1s).
	DownTimeout time.Duration
	// OnExtraRoundTrip is called for each round trip beyond a batch's first: a MaskedCAS retry,
	// or sending the ops of a batch that waited for its MaskedCAS to settle.
	OnExtraRoundTrip func()
	// OnLost is called when the queue pair fails while unsignaled ops may have been lost
	// without any signaled op after them reporting it.
	OnLost func(err error)
}

func (c *Config) fill() {
	if c.Depth <= 0 {
		c.Depth = 128
	}
	if c.SignalEvery <= 0 || c.SignalEvery > c.Depth {
		c.SignalEvery = max(c.Depth/2, 1)
	}
	if c.PollBatch <= 0 {
		c.PollBatch = 32
	}
	if c.Staging <= 0 {
		c.Staging = 1 << 20
	}
	c.Staging = (c.Staging + 4095) &^ 4095
	if c.MaxQueued <= 0 {
		c.MaxQueued = 4 * c.Depth
	}
	if c.DownTimeout <= 0 {
		c.DownTimeout = time.Second
	}
}

// Remote is the memory node's side of a connected queue pair.
type Remote struct {
	// Addr is the address of the node's region offset 0; RKey its key.
	Addr uint64
	RKey uint32
}

// QP states.
const (
	stateConnecting = iota
	stateUp
	stateDead
)

// op is one farmem op on its way: copied out of its batch, so the batch is not read once
// Post has returned.
type op struct {
	sink     Sink
	i        int    // index in the batch, for the sink
	post     uint64 // which Post call
	kind     farmem.OpKind
	unsig    bool
	attached bool // data still aliases the batch's buffer (Post has not returned)
	off      uint64
	n        int
	cmp      uint64
	swap     uint64
	cmpMask  uint64
	swapMask uint64
	data     []byte // WRITE source
	dst      []byte // READ destination (signaled reads)
	guess    uint64 // MaskedCAS loop: the word the attempt expects
}

// slot is a work request in flight.
type slot struct {
	op      op
	verb    Opcode
	loop    bool   // a MaskedCAS loop attempt
	local   []byte // its staging bytes
	oneoff  *Region
	ringEnd uint64 // the ring's head once this work request's staging was taken
}

type delivery struct {
	s   Sink
	i   int
	val uint64
	err error
}

// QP is one client's queue pair to one memory node (see the package doc). Post may be called
// from one goroutine at a time; Await from any number.
type QP struct {
	cfg Config

	pollMu sync.Mutex // the poller role: whoever holds it polls completions

	mu     sync.Mutex
	state  int
	err    error
	dev    Device
	dq     DevQP
	rem    Remote
	ring   *Region
	inline int
	notify <-chan struct{}

	queue []op // waiting ops: queue[qhead:]
	qhead int
	slots []slot // in flight, by sequence number modulo Depth

	posted, completed uint64 // work request sequence numbers (the first is 1)
	lastRead          uint64 // the last READ posted
	lastAtomic        uint64 // the last atomic posted
	lastFence         uint64 // the last fenced work request
	sinceSignal       int    // unsignaled work requests since the last signaled one
	runStart          uint64 // the ring's head at the last signaled work request
	head, tail        uint64 // the staging ring's allocation counters
	barrier           bool   // a MaskedCAS attempt is in flight: nothing after it is posted
	afterBarrier      uint64 // the Post whose remaining ops cost an extra round trip
	postSeq           uint64
	lastProgress      int64

	wrs  []WR
	wcs  []WC
	outs []delivery // the poller's deliveries (pollMu held)

	busy    atomic.Int64 // work requests in flight
	waiters atomic.Int32
	dead    atomic.Bool
	deadCh  chan struct{}
	kick    chan struct{}
	space   chan struct{}
}

// New returns a queue pair that accepts work at once and sends it once Start connects it.
func New(cfg Config) *QP {
	cfg.fill()
	q := &QP{cfg: cfg, slots: make([]slot, cfg.Depth), wrs: make([]WR, 0, cfg.Depth),
		wcs: make([]WC, cfg.PollBatch), deadCh: make(chan struct{}), kick: make(chan struct{}, 1),
		space: make(chan struct{}, 1)}
	go q.background()
	return q
}

// Start connects the queue pair to its device queue pair, which is connected to rem, and
// sends what was posted meanwhile. On error (or if the queue pair failed meanwhile) it
// releases dq.
func (q *QP) Start(dev Device, dq DevQP, rem Remote) error {
	ring, err := dev.Alloc(q.cfg.Staging)
	if err != nil {
		_ = dq.Close()
		err = fmt.Errorf("verbs: staging ring of %d bytes: %w", q.cfg.Staging, err)
		q.Fail(err)
		return err
	}
	var outs []delivery
	q.mu.Lock()
	if q.state == stateDead {
		err := q.err
		q.mu.Unlock()
		_ = dq.Close()
		_ = ring.Release()
		return err
	}
	q.dev, q.dq, q.ring, q.rem = dev, dq, ring, rem
	q.inline = dq.MaxInline()
	if n, ok := dq.(Notifier); ok {
		q.notify = n.Notify()
	}
	q.state = stateUp
	q.pump(&outs)
	q.mu.Unlock()
	select {
	case q.space <- struct{}{}:
	default:
	}
	deliver(outs)
	q.kickBG()
	return nil
}

// Alive reports whether the queue pair still carries work.
func (q *QP) Alive() bool { return !q.dead.Load() }

// Fail fails everything outstanding with err (wrapped) and releases the device queue pair and
// staging. It is idempotent.
func (q *QP) Fail(err error) {
	if err == nil {
		err = errDead
	}
	var outs []delivery
	q.mu.Lock()
	q.failLocked(err, 0, nil, &outs)
	q.mu.Unlock()
	deliver(outs)
}

func deliver(outs []delivery) {
	for _, d := range outs {
		d.s.Complete(d.i, d.val, d.err)
	}
}

func (q *QP) qlen() int { return len(q.queue) - q.qhead }

// Post queues the ops of b at idx (all of b when idx is nil) and sends what the send queue
// and staging ring take; the rest is copied out of the batch and sent as completions free
// space. It returns once every op has been handed to the device or copied out of the batch; it
// blocks only while more than MaxQueued ops wait behind an unsettled MaskedCAS, or until ctx
// ends. A full send queue does not block it (a hung node must not stop a client's posts to
// other nodes); what waits is bounded by the down timeout, which fails it.
func (q *QP) Post(ctx context.Context, b *farmem.Batch, idx []int, s Sink) {
	n := len(b.Ops)
	if idx != nil {
		n = len(idx)
	}
	var outs []delivery
	q.mu.Lock()
	if q.state == stateDead {
		err := q.err
		q.mu.Unlock()
		for k := range n {
			i := k
			if idx != nil {
				i = idx[k]
			}
			if !b.Ops[i].Unsignaled {
				s.Complete(i, 0, err)
			}
		}
		return
	}
	q.postSeq++
	tok := q.postSeq
	if q.qhead > 0 && q.qhead == len(q.queue) {
		q.queue, q.qhead = q.queue[:0], 0
	}
	for k := range n {
		i := k
		if idx != nil {
			i = idx[k]
		}
		o := &b.Ops[i]
		e := op{sink: s, i: i, post: tok, kind: o.Kind, unsig: o.Unsignaled, attached: true, off: o.Addr.Offset(),
			n: int(transport.OpLen(o)), cmp: o.Cmp, swap: o.Swap, cmpMask: o.CmpMask, swapMask: o.SwapMask}
		switch o.Kind {
		case farmem.OpWrite:
			e.data = o.Buf
		case farmem.OpRead:
			if !o.Unsignaled {
				e.dst = o.Buf
			}
		case farmem.OpMaskedCAS:
			e.guess = o.Cmp
		}
		q.queue = append(q.queue, e)
	}
	if q.state == stateUp {
		q.pump(&outs)
	}
	// What the send queue or the staging ring did not take waits in the queue, copied out of
	// the batch, and is sent as completions free space: Post does not wait for a node that
	// stopped answering, so the client's posts to other nodes go on.
	q.detach(tok)
	q.mu.Unlock()
	deliver(outs)
	q.kickBG()
	// Backpressure on ops waiting behind a MaskedCAS.
	for {
		q.mu.Lock()
		over := q.state != stateDead && q.barrier && q.qlen() > q.cfg.MaxQueued
		q.mu.Unlock()
		if !over {
			return
		}
		select {
		case <-q.space:
		case <-q.deadCh:
		case <-ctx.Done():
			return
		}
	}
}

// holds reports whether ops of Post tok are still queued (q.mu held).
func (q *QP) holds(tok uint64) bool {
	return q.qlen() > 0 && q.queue[len(q.queue)-1].post == tok
}

// detach copies the ops of Post tok still queued out of their batch (q.mu held).
func (q *QP) detach(tok uint64) {
	for j := len(q.queue) - 1; j >= q.qhead && q.queue[j].post == tok; j-- {
		o := &q.queue[j]
		if o.attached && o.kind == farmem.OpWrite {
			o.data = append([]byte(nil), o.data...)
		}
		o.attached = false
	}
}

// Await waits until done is signaled or ctx ends, polling completions itself while nobody else
// does. It returns ctx's error if ctx ends first.
func (q *QP) Await(ctx context.Context, done <-chan struct{}) error {
	q.waiters.Add(1)
	defer q.waiters.Add(-1)
	var bo backoff
	for {
		select {
		case <-done:
			return nil
		default:
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if q.progress(ctx, done, &bo) {
			return nil
		}
	}
}

// progress polls once if the poller role is free; if that found nothing, it spins or sleeps
// a little (until done, ctx, a device notification or the backoff's timer). It reports
// whether it took the signal from done.
func (q *QP) progress(ctx context.Context, done <-chan struct{}, bo *backoff) bool {
	if q.pollMu.TryLock() {
		n := q.pollOnce()
		q.pollMu.Unlock()
		if n > 0 {
			bo.reset()
			return false
		}
	}
	q.mu.Lock()
	notify := q.notify
	q.mu.Unlock()
	return bo.wait(ctx.Done(), done, notify, q.deadCh, q.cfg.DownTimeout)
}

// backoff spins with runtime.Gosched for a while after a fruitless poll, then sleeps for
// doubling intervals from 5µs up to 200µs (or an eighth of the down timeout).
type backoff struct {
	n int
	t *time.Timer
}

const (
	spinPolls = 64
	maxSleep  = 200 * time.Microsecond
)

func (b *backoff) reset() { b.n = 0 }

// wait spins or sleeps once; it reports whether it took the signal from done.
func (b *backoff) wait(ctxDone, done, notify, dead <-chan struct{}, down time.Duration) bool {
	b.n++
	if b.n <= spinPolls {
		runtime.Gosched()
		return false
	}
	d := min(5*time.Microsecond<<min(b.n-spinPolls, 6), maxSleep, max(down/8, time.Microsecond))
	if b.t == nil {
		b.t = time.NewTimer(d)
	} else {
		b.t.Reset(d)
	}
	select {
	case <-b.t.C:
	case <-ctxDone:
	case <-done:
		return true
	case <-notify:
		b.n = spinPolls / 2
	case <-dead:
	}
	return false
}

func (q *QP) kickBG() {
	if q.busy.Load() > 0 {
		select {
		case q.kick <- struct{}{}:
		default:
		}
	}
}

// background polls completions while work is in flight and no waiter does, so posted work
// nobody waits for still completes, recycles its resources, and times out.
func (q *QP) background() {
	var bo backoff
	for {
		if q.busy.Load() == 0 {
			select {
			case <-q.kick:
				bo.reset()
				continue
			case <-q.deadCh:
				return
			}
		}
		if q.dead.Load() {
			return
		}
		var notify <-chan struct{}
		if q.waiters.Load() == 0 && q.pollMu.TryLock() {
			n := q.pollOnce()
			q.pollMu.Unlock()
			if n > 0 {
				bo.reset()
				continue
			}
			q.mu.Lock()
			notify = q.notify
			q.mu.Unlock()
		} else {
			// A waiter polls: neither spin beside it nor take its notifications.
			bo.n = max(bo.n, spinPolls)
		}
		_ = bo.wait(nil, nil, notify, q.deadCh, q.cfg.DownTimeout)
	}
}

// pollOnce polls up to PollBatch completions, retires what they complete, sends what waited
// for the space, and checks the down timeout. It returns how many completions it found
// (pollMu held).
func (q *QP) pollOnce() int {
	outs := q.outs[:0]
	q.mu.Lock()
	if q.state != stateUp {
		q.mu.Unlock()
		return 0
	}
	n, err := q.dq.Poll(q.wcs)
	if err != nil {
		q.failLocked(fmt.Errorf("verbs: poll the completion queue of the queue pair to %s: %w: %w", q.cfg.Name, farmem.ErrNodeDown, err), 0, nil, &outs)
		n = 0
	}
	for _, wc := range q.wcs[:n] {
		if q.state != stateUp {
			break
		}
		if wc.ID <= q.completed || wc.ID > q.posted {
			q.failLocked(fmt.Errorf("verbs: completion for unknown work request %d from the queue pair to %s: %w", wc.ID, q.cfg.Name, farmem.ErrNodeDown), 0, nil, &outs)
			break
		}
		if wc.Status != StatusSuccess {
			q.retire(wc.ID-1, &outs)
			serr := wc.Status.Err()
			why := fmt.Errorf("verbs: work request %d to %s failed: %v (vendor error %#x): %w", wc.ID, q.cfg.Name, wc.Status, wc.VendorErr, serr)
			qerr := why
			if !errors.Is(serr, farmem.ErrNodeDown) {
				qerr = fmt.Errorf("verbs: the queue pair to %s failed after an error completion (%v): %w", q.cfg.Name, wc.Status, farmem.ErrNodeDown)
			}
			q.failLocked(qerr, wc.ID, why, &outs)
			break
		}
		q.retire(wc.ID, &outs)
	}
	now := nanotime()
	if q.state == stateUp {
		if n > 0 {
			q.lastProgress = now
			q.pump(&outs)
			if q.qlen() <= q.cfg.MaxQueued {
				select {
				case q.space <- struct{}{}:
				default:
				}
			}
		} else if q.posted > q.completed && time.Duration(now-q.lastProgress) > q.cfg.DownTimeout {
			q.failLocked(fmt.Errorf("verbs: nothing completed on the queue pair to %s for %v: %w", q.cfg.Name,
				time.Duration(now-q.lastProgress).Round(time.Millisecond), farmem.ErrNodeDown), 0, nil, &outs)
		}
	}
	q.mu.Unlock()
	deliver(outs)
	clear(outs)
	q.outs = outs[:0]
	return n
}

// retire completes the work requests up to sequence number through: RC completions come in
// posting order, so a completion retires every work request before it (q.mu held).
func (q *QP) retire(through uint64, outs *[]delivery) {
	for q.completed < through {
		s := q.completed + 1
		sl := &q.slots[s%uint64(len(q.slots))]
		q.completed = s
		q.finish(sl, outs)
		q.tail = sl.ringEnd
		if sl.oneoff != nil {
			_ = sl.oneoff.Release()
		}
		*sl = slot{}
	}
	q.busy.Store(int64(q.posted - q.completed))
}

// finish hands a completed work request's result to its op (q.mu held).
func (q *QP) finish(sl *slot, outs *[]delivery) {
	o := &sl.op
	if sl.loop {
		found := binary.LittleEndian.Uint64(sl.local)
		q.barrier = false
		if found != o.guess && found&o.cmpMask == o.cmp&o.cmpMask {
			// The word differed only outside the compare mask: try again with it.
			o.guess = found
			if q.qhead > 0 {
				q.qhead--
				q.queue[q.qhead] = *o
			} else {
				q.queue = append([]op{*o}, q.queue...)
			}
			q.extraRoundTrip()
			return
		}
		q.afterBarrier = o.post
		if !o.unsig {
			*outs = append(*outs, delivery{o.sink, o.i, found, nil})
		}
		return
	}
	if o.unsig {
		return
	}
	var val uint64
	switch sl.verb {
	case OpRead:
		copy(o.dst, sl.local)
	case OpCAS, OpFAA:
		val = binary.LittleEndian.Uint64(sl.local)
	}
	*outs = append(*outs, delivery{o.sink, o.i, val, nil})
}

func (q *QP) extraRoundTrip() {
	if q.cfg.OnExtraRoundTrip != nil {
		q.cfg.OnExtraRoundTrip()
	}
}

// pump posts waiting ops, as many as the send queue and the staging ring take, in chains of
// one device call each (q.mu held, state up).
func (q *QP) pump(outs *[]delivery) {
	for q.state == stateUp && q.qlen() > 0 && !q.barrier {
		chain := q.wrs[:0]
		stalled := false
		unreported := false // a delivered op after the chain's last signaled work request
		for q.qlen() > 0 && !q.barrier {
			if q.posted-q.completed+uint64(len(chain)) >= uint64(len(q.slots)) {
				stalled = true
				break
			}
			o := &q.queue[q.qhead]
			seq := q.posted + uint64(len(chain)) + 1
			w, ok, err := q.build(o, seq)
			if err != nil {
				// No staging for it: the op fails alone.
				if !o.unsig {
					*outs = append(*outs, delivery{o.sink, o.i, 0, err})
				}
				q.pop()
				continue
			}
			if !ok {
				stalled = true
				break
			}
			if q.afterBarrier != 0 {
				if o.post != q.afterBarrier {
					q.afterBarrier = 0
				} else if !o.unsig {
					q.extraRoundTrip()
					q.afterBarrier = 0
				}
			}
			q.pop()
			chain = append(chain, w)
			if w.Signaled() {
				unreported = false
			}
			if !q.slots[seq%uint64(len(q.slots))].op.unsig {
				unreported = !w.Signaled()
			}
		}
		if len(chain) == 0 {
			return
		}
		last := &chain[len(chain)-1]
		if !last.Signaled() && (unreported || stalled) {
			last.Flags |= FlagSignaled
			q.sinceSignal = 0
			q.runStart = q.slots[last.ID%uint64(len(q.slots))].ringEnd
		}
		if q.posted == q.completed {
			q.lastProgress = nanotime()
		}
		q.posted += uint64(len(chain))
		q.busy.Store(int64(q.posted - q.completed))
		if _, err := q.dq.Post(chain); err != nil {
			q.failLocked(fmt.Errorf("verbs: post to the queue pair to %s: %w: %w", q.cfg.Name, farmem.ErrNodeDown, err), 0, nil, outs)
			return
		}
	}
}

func (q *QP) pop() {
	q.queue[q.qhead] = op{}
	q.qhead++
	if q.qhead == len(q.queue) {
		q.queue, q.qhead = q.queue[:0], 0
	}
}

// build makes op o's work request as sequence number seq, taking its staging and recording
// its slot. It reports false if the staging ring is full (q.mu held).
func (q *QP) build(o *op, seq uint64) (WR, bool, error) {
	w := WR{ID: seq, RAddr: q.rem.Addr + o.off, RKey: q.rem.RKey}
	loop := false
	n := 8
	switch o.kind {
	case farmem.OpRead:
		w.Opcode, n = OpRead, o.n
	case farmem.OpWrite:
		w.Opcode, n = OpWrite, o.n
	case farmem.OpCAS:
		w.Opcode, w.Compare, w.Swap = OpCAS, o.cmp, o.swap
	case farmem.OpFAA:
		w.Opcode, w.Compare = OpFAA, o.swap
	case farmem.OpMaskedCAS:
		switch {
		case o.cmpMask == ^uint64(0):
			// A full compare: one CAS decides.
			w.Opcode, w.Compare, w.Swap = OpCAS, o.cmp, o.cmp&^o.swapMask|o.swap&o.swapMask
		case o.swapMask == 0:
			// Nothing to swap: reading the word atomically is the whole op.
			w.Opcode = OpFAA
		default:
			w.Opcode, w.Compare, w.Swap = OpCAS, o.guess, o.guess&^o.swapMask|o.swap&o.swapMask
			loop = true
		}
	}
	local, addr, lkey, oneoff, ok, err := q.alloc(n)
	if !ok || err != nil {
		return WR{}, ok, err
	}
	w.LAddr, w.Len, w.LKey = addr, uint32(n), lkey
	if w.Opcode == OpWrite {
		copy(local, o.data)
		if n > 0 && n <= q.inline {
			w.Flags |= FlagInline
		}
	}
	// Fence: the request must not overtake an earlier READ or atomic still in flight that it
	// could affect (WAR) or must observe (after an atomic).
	lo := max(q.completed+1, q.lastFence)
	if q.lastAtomic >= lo || (w.Opcode != OpRead && q.lastRead >= lo) {
		w.Flags |= FlagFence
		q.lastFence = seq
	}
	switch {
	case w.Opcode == OpRead:
		q.lastRead = seq
	case w.Opcode.IsAtomic():
		q.lastAtomic = seq
	}
	if loop || q.sinceSignal+1 >= q.cfg.SignalEvery || q.head-q.runStart > uint64(len(q.ring.Bytes)/2) {
		w.Flags |= FlagSignaled
		q.sinceSignal = 0
		q.runStart = q.head
	} else {
		q.sinceSignal++
	}
	sl := &q.slots[seq%uint64(len(q.slots))]
	*sl = slot{op: *o, verb: w.Opcode, loop: loop, local: local, oneoff: oneoff, ringEnd: q.head}
	sl.op.data = nil // a WRITE's data is in staging now
	if loop {
		q.barrier = true
	}
	return w, true, nil
}

// alloc takes n bytes of staging: from the ring (8-aligned, never wrapping inside a buffer),
// or a one-off registration for more than a quarter of the ring. It reports false if the ring
// has no room until completions free some (q.mu held).
func (q *QP) alloc(n int) (local []byte, addr uint64, lkey uint32, oneoff *Region, ok bool, err error) {
	size := uint64(len(q.ring.Bytes))
	if n == 0 {
		return nil, q.ring.Addr, q.ring.LKey, nil, true, nil
	}
	if uint64(n) > size/4 {
		r, err := q.dev.Alloc(n)
		if err != nil {
			return nil, 0, 0, nil, false, fmt.Errorf("verbs: staging for %d bytes: %w", n, err)
		}
		return r.Bytes[:n], r.Addr, r.LKey, r, true, nil
	}
	n8 := (uint64(n) + 7) &^ 7
	pos := q.head % size
	skip := uint64(0)
	if pos+n8 > size {
		skip = size - pos
	}
	if q.head+skip+n8-q.tail > size {
		return nil, 0, 0, nil, false, nil
	}
	q.head += skip
	pos = q.head % size
	q.head += n8
	return q.ring.Bytes[pos : pos+uint64(n)], q.ring.Addr + pos, q.ring.LKey, nil, true, nil
}

// failLocked kills the queue pair: the device queue pair is destroyed first (so nothing more
// lands in staging), then every op in flight or waiting fails — the one of work request bad
// with badErr, the later ops of its Post with ErrAborted unless badErr is ErrNodeDown (they
// were not executed), all others with err (q.mu held).
func (q *QP) failLocked(err error, bad uint64, badErr error, outs *[]delivery) {
	if q.state == stateDead {
		return
	}
	q.state, q.err = stateDead, err
	q.dead.Store(true)
	close(q.deadCh)
	if q.dq != nil {
		_ = q.dq.Close()
	}
	var badPost uint64 // the Post whose later ops were not executed because of bad's error
	if bad != 0 && !errors.Is(badErr, farmem.ErrNodeDown) {
		badPost = q.slots[bad%uint64(len(q.slots))].op.post
	}
	lost := false // an unsignaled op with no failing signaled op after it
	fail := func(o *op, e error) {
		if o.unsig {
			lost = true
			return
		}
		lost = false
		*outs = append(*outs, delivery{o.sink, o.i, 0, e})
	}
	for s := q.completed + 1; s <= q.posted; s++ {
		sl := &q.slots[s%uint64(len(q.slots))]
		e := err
		switch {
		case s == bad:
			e = badErr
		case badPost != 0 && s > bad && sl.op.post == badPost:
			e = fmt.Errorf("verbs: an earlier op of the batch failed: %w", farmem.ErrAborted)
		}
		fail(&sl.op, e)
		if sl.oneoff != nil {
			_ = sl.oneoff.Release()
		}
		*sl = slot{}
	}
	for j := q.qhead; j < len(q.queue); j++ {
		o := &q.queue[j]
		e := err
		if badPost != 0 && o.post == badPost {
			e = fmt.Errorf("verbs: an earlier op of the batch failed: %w", farmem.ErrAborted)
		}
		fail(o, e)
	}
	q.queue, q.qhead = nil, 0
	q.completed = q.posted
	q.busy.Store(0)
	if q.ring != nil {
		_ = q.ring.Release()
		q.ring = nil
	}
	if lost && !errors.Is(err, farmem.ErrClosed) && q.cfg.OnLost != nil {
		q.cfg.OnLost(err)
	}
	select {
	case q.space <- struct{}{}:
	default:
	}
}

var epoch = time.Now()

func nanotime() int64 { return int64(time.Since(epoch)) }
