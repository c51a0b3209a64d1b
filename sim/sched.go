package sim

import (
	"context"
	"fmt"
	"iter"
	"os"
	"runtime/debug"
	"sync/atomic"
	"time"
	"unsafe"
)

// The scheduler. Exactly one goroutine runs simulation code at a time: the holder of the
// token. Goroutines the simulator runs (procs) hold it from the moment they are resumed until
// they block in the simulator again; then due events are popped, their effects run inline,
// and the next proc to resume is picked (possibly the blocking one itself). There is no
// scheduler goroutine.
//
// The procs the simulator starts are coroutines (iter.Pull): a blocking one yields to the
// goroutine that resumed it, its driver, which runs the due events and resumes the proc they
// made ready. The driver is a goroutine from outside (Run's, or one inside a call) waiting in
// the simulator; it runs the events itself when it blocks, and passes the token to another
// such goroutine with a channel send. A switch between procs is thus two coroutine switches,
// which the runtime does without its scheduler (a channel send costs about twice as much, and
// on several Ps wakes an idle one each time). The events run on the driver's stack rather than
// on the blocking proc's: with hundreds of procs, each one's stack is cold by the time it
// runs again, and the event handlers' frames would add cache misses to every verb.
//
// Virtual time advances only while an anchor waits in the simulator: Run's goroutine, or a
// goroutine the simulator did not start while it is inside a blocking call. Procs run only
// while the token is passed around, so a program that is done leaves time where it is and its
// background procs parked. A call from outside returns only once the simulation is quiet again
// (no proc ready, no anchor waiting), so calls from outside happen at quiet points and a
// sequence of them is deterministic.
//
// One fallback serves code that waits outside the simulator (on a sync.WaitGroup, say) for
// procs it started with Go: if such procs are alive, events are pending, and nobody has called
// into the simulation for watchdogGrace of wall time, a watchdog goroutine enters as an anchor
// until those procs have returned. That fallback depends on wall-clock timing and is not
// deterministic; wait with Group, Run or a Sleep loop instead.

// wakeReason says why a parked proc was resumed.
type wakeReason uint8

const (
	wakeNone     wakeReason = iota
	wakeEvent               // what it waited for happened: an answer, a timer, an unpark, a write
	wakeCtx                 // its context ended
	wakeClosed              // its client was closed
	wakeCrashed             // its client or node crashed
	wakeDeadlock            // nothing can ever wake it (Run only)
)

// parkKind says what a proc parked on a client waits for, so that Close and crashes wake the
// right ones.
type parkKind uint8

const (
	parkOther parkKind = iota
	parkVerb
	parkWait
	parkCall
)

// proc is a goroutine taking part in the simulation.
type proc struct {
	// What a switch and a wake read come first, to share a cache line or two.
	g atomic.Uintptr // identity of its goroutine (curg)
	// procs the simulator started are coroutines: resume runs one until it yields (the proc to
	// run next, or blocked; ok false: it returned, and left the proc to run next in
	// Sim.exited); yield is its side.
	resume func() (*proc, bool)
	yield  func(*proc) bool
	// sp and top bound the stack of a coroutine at its last block, as plain addresses for
	// prefetchRange (see prefetchResume): sp is in markStack's frame, top is the stack's end.
	sp, top uintptr
	// hint is a line that p reads soon after it resumes, besides its stack and its client's
	// runtime: a load client's state (closedClient). prefetchResume asks for it too.
	hint   unsafe.Pointer
	seq    uint64 // park sequence: wake events carry it, stale ones are ignored
	parked bool
	reason wakeReason
	// blocking is set while p is blocked and its driver (or p itself) dispatches events to pick
	// the next proc: a wake then makes it ready.
	blocking bool
	kind     parkKind
	listed   bool
	// adopted procs are goroutines the simulator did not start, inside one call.
	adopted bool
	// main is Run's goroutine.
	main bool
	// foreign procs were started by a goroutine from outside the simulation (not Run's),
	// which may wait for them outside the simulator; see the watchdog.
	foreign bool

	// Registration while parked: a context's waiters, a client's parked procs, a word's
	// watchers. unlink removes all of them when the proc is woken.
	ctx          *simCtx
	stop         func() bool // stops a context.AfterFunc on a context foreign to the simulator
	client       *client     // the client it parked on last (kept after waking, for pauses)
	wn           *cnode
	cprev, cnext *proc
	lprev, lnext *proc
	woff         uint64
	wprev, wnext *proc

	s    *Sim
	wake chan struct{} // goroutines from outside: receives the token
}

// ring is a FIFO of procs. Its buffer's length is a power of two.
type ring struct {
	buf  []*proc
	head int
	n    int
}

func (r *ring) push(p *proc) {
	if r.n == len(r.buf) {
		nb := make([]*proc, max(16, 2*len(r.buf)))
		for i := range r.n {
			nb[i] = r.buf[(r.head+i)&(len(r.buf)-1)]
		}
		r.buf, r.head = nb, 0
	}
	r.buf[(r.head+r.n)&(len(r.buf)-1)] = p
	r.n++
}

func (r *ring) pop() *proc {
	if r.n == 0 {
		return nil
	}
	p := r.buf[r.head]
	r.buf[r.head] = nil
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	return p
}

// enter returns the proc of the calling goroutine, which holds the token when enter returns,
// and whether the goroutine was adopted for this call (then the caller must call exit).
func (s *Sim) enter() (*proc, bool) {
	g := curg()
	if c := s.cur.Load(); c != nil && (c.g.Load() == g || s.stand.Load() == g) {
		return c, false
	}
	return s.adopt(g), true
}

// exit ends a call that enter adopted the goroutine for.
func (s *Sim) exit(p *proc, adopted bool) {
	if adopted {
		s.unadopt(p)
	}
}

// adopt makes the calling goroutine, which the simulator did not start, a proc for the
// duration of one call, and waits for the token.
func (s *Sim) adopt(g uintptr) *proc {
	s.mu.Lock()
	var p *proc
	if n := len(s.adoptPool); n > 0 {
		p = s.adoptPool[n-1]
		s.adoptPool = s.adoptPool[:n-1]
	} else {
		p = &proc{s: s, wake: make(chan struct{}, 1), adopted: true}
	}
	p.g.Store(g)
	s.entries++
	if !s.running {
		s.running = true
		s.cur.Store(p)
		s.mu.Unlock()
	} else {
		s.inbox = append(s.inbox, p)
		s.inboxN.Store(int32(len(s.inbox)))
		s.mu.Unlock()
		<-p.wake
	}
	s.anchors++
	return p
}

func (s *Sim) unadopt(p *proc) {
	s.anchors--
	p.main = false
	p.client = nil
	if q := s.next(); q != nil {
		// Let the simulation settle before returning: the token comes back when it is quiet.
		s.quiet = append(s.quiet, p)
		s.drive(p, q)
	}
	s.release()
	s.mu.Lock()
	p.g.Store(0)
	s.adoptPool = append(s.adoptPool, p)
	s.mu.Unlock()
}

// admit moves goroutines waiting to enter into the ready queue.
func (s *Sim) admit() {
	s.mu.Lock()
	for _, p := range s.inbox {
		s.ready.push(p)
	}
	clear(s.inbox)
	s.inbox = s.inbox[:0]
	s.inboxN.Store(0)
	s.mu.Unlock()
}

// handoff gives the token to q and wakes it.
func (s *Sim) handoff(q *proc) {
	s.cur.Store(q)
	q.wake <- struct{}{}
}

// release gives the token up, the simulation being quiet: to a goroutine from outside
// waiting to return, or to one waiting to enter, or to nobody.
func (s *Sim) release() {
	if n := len(s.quiet); n > 0 {
		q := s.quiet[n-1]
		s.quiet[n-1] = nil
		s.quiet = s.quiet[:n-1]
		s.handoff(q)
		return
	}
	s.mu.Lock()
	if len(s.inbox) > 0 {
		q := s.inbox[0]
		copy(s.inbox, s.inbox[1:])
		s.inbox[len(s.inbox)-1] = nil
		s.inbox = s.inbox[:len(s.inbox)-1]
		s.inboxN.Store(int32(len(s.inbox)))
		s.mu.Unlock()
		s.handoff(q)
		return
	}
	s.running = false
	s.cur.Store(nil)
	if s.foreignProcs > 0 && s.heap.len() > 0 && !s.watchArmed {
		s.watchArmed = true
		entries := s.entries
		time.AfterFunc(watchdogGrace, func() { s.watchdog(entries) })
	}
	s.mu.Unlock()
}

// watchdogGrace is how long the simulation waits, quiet, for a call from outside before the
// watchdog assumes that its starter waits outside the simulator for procs it started.
const watchdogGrace = 200 * time.Millisecond

// watchdog enters the simulation as an anchor until the procs started from outside have
// returned, if nobody has called in since it was armed.
func (s *Sim) watchdog(entries uint64) {
	s.mu.Lock()
	switch {
	case s.running:
		s.watchArmed = false // the next release arms it again
		s.mu.Unlock()
		return
	case s.entries != entries:
		// Someone called in meanwhile: wait for another quiet grace period.
		e := s.entries
		time.AfterFunc(watchdogGrace, func() { s.watchdog(e) })
		s.mu.Unlock()
		return
	}
	s.watchArmed = false
	s.mu.Unlock()
	p, adopted := s.enter()
	for s.foreignProcs > 0 && s.heap.len() > 0 {
		s.driver = p
		s.prepark(p)
		p.client = nil
		s.await(p, nil)
	}
	s.driver = nil
	s.exit(p, adopted)
}

// next returns the next proc to resume, running due events inline until one is ready. It
// returns nil when nothing may run: no proc is ready and no anchor waits (or no event is left).
func (s *Sim) next() *proc {
	for {
		if s.inboxN.Load() != 0 {
			s.admit()
		}
		if p := s.ready.pop(); p != nil {
			if c := p.client; c != nil && c.paused {
				c.frozen = append(c.frozen, p)
				continue
			}
			return p
		}
		if s.heap.len() == 0 || s.anchors == 0 {
			if s.heap.len() == 0 && s.mainProc != nil && s.mainProc.parked {
				s.wakeProc(s.mainProc, wakeDeadlock)
				continue
			}
			return nil
		}
		rel, kind, obj, arg := s.heap.pop()
		if at := int64(Epoch) + int64(rel); at > s.nowNs {
			s.nowNs = at
		}
		s.handle(kind, obj, arg)
	}
}

// markStack records, right before coroutine p yields to its driver, the bounds of its stack
// for prefetchResume. Its frame is where the frames of the switch start: p's caller calls
// yield next.
//
//go:noinline
func (p *proc) markStack() {
	if stackHints {
		var mark byte
		p.sp = uintptr(unsafe.Pointer(&mark))
		_, p.top = stackBounds()
	}
}

// block gives the token away until p, a goroutine from outside the simulator, is resumed; p
// must be parked. A coroutine blocks in await (or single) instead: its driver picks the next
// proc, running the due events on its own stack, and resumes it when its turn comes (at once
// if it is picked).
func (s *Sim) block(p *proc) {
	p.blocking = true
	q := s.next()
	p.blocking = false
	if q == p {
		return
	}
	s.drive(p, q)
}

// blocked is what a coroutine yields to its driver when it blocks: the driver then picks the
// next proc itself. The events run on the driver's stack, one stack warm in the caches,
// instead of on the stack of whichever proc blocked.
var blocked = new(proc)

// drive runs the simulation from goroutine x, which holds the token but is parked, until x is
// resumed: it resumes the coroutines picked to run, one after the other, and gives the token
// up when the proc picked is another goroutine from outside, or nobody.
func (s *Sim) drive(x, q *proc) {
	// The events due when a coroutine blocks run here, on x's stack, as the coroutine's (what
	// they call into the simulator is its call): stand tells enter so. x is parked while it
	// drives and suspended while a coroutine runs, so it makes no call of its own before drive
	// ends, and stand stays set from the first resume to the end: two atomic stores a drive
	// rather than two a switch.
	standing := false
	for q != x {
		if q == nil {
			s.sitDown(&standing)
			s.release()
			break
		}
		if q.resume == nil {
			s.sitDown(&standing)
			s.handoff(q)
			break
		}
		if !standing {
			s.stand.Store(curg())
			standing = true
		}
		s.cur.Store(q)
		next, ok := q.resume()
		switch {
		case !ok:
			next, s.exited = s.exited, nil
		case next == blocked:
			// q is parked, and marked blocking until it runs again.
			next = s.next()
		}
		q = next
	}
	s.sitDown(&standing)
	if q == x {
		// x was picked while it drove: it holds the token again.
		s.cur.Store(x)
		return
	}
	<-x.wake
}

// sitDown ends a drive's standing in for the coroutines it resumes, if it is standing.
func (s *Sim) sitDown(standing *bool) {
	if *standing {
		s.stand.Store(0)
		*standing = false
	}
}

// prefetchResume asks the CPU for the cache lines that coroutine p reads first when it resumes:
// its goroutine's descriptor, which the coroutine switch reads and writes, the frames of its
// stack around the one it blocked in (stackBelow bytes under it, for the frames of the switch
// itself, and up to stackWindow bytes above it, short of the stack's end: the frames the
// resumed proc returns through before it calls down again), its client's runtime and the line
// it named as its hint. With hundreds of procs these lines are cold when p's turn comes;
// without the hint the switch and the returns up p's stack take their misses one after the
// other, each load from a frame waiting for its line. wakeProc calls it, so that the lines
// come while the event that woke p finishes and the driver picks p. More does not pay: every
// prefetch in flight holds one of the core's few miss buffers, and on the Xeon it was tuned on
// a window of 2 KiB was slower than 768 bytes, and 768 bytes above and 256 below slower than
// 640 and 128. It is a hint, with no effect on the run; a stale bound only wastes it.
func (p *proc) prefetchResume() {
	sp := p.sp
	if sp == 0 {
		return // not started yet
	}
	hi := p.top
	if hi <= sp || hi-sp > stackWindow {
		hi = sp + stackWindow
	}
	if g := p.g.Load(); g != 0 {
		prefetchRange(g, g+gBytes) // first: the switch reads it first
	}
	prefetchRange(sp-stackBelow, hi)
	if c := p.client; c != nil {
		prefetch(unsafe.Pointer(c.rt)) // one line (rtime), its random source included
	}
	if p.hint != nil {
		prefetch(p.hint)
	}
}

const (
	stackWindow = 640
	stackBelow  = 128
	gBytes      = 448
)

// prepark marks p parked and returns the sequence number its wake events must carry.
func (s *Sim) prepark(p *proc) uint64 {
	p.seq++
	p.parked = true
	p.reason = wakeNone
	return p.seq
}

// await blocks p, which prepark marked, until it is woken; the end of ctx (which may be nil)
// wakes it too. It returns why p was woken.
func (s *Sim) await(p *proc, ctx context.Context) wakeReason {
	if ctx != nil {
		s.watchCtx(p, ctx)
	}
	if p.parked {
		if p.yield != nil {
			// A coroutine switches from this frame, not from a callee's: once it is resumed,
			// each frame it returns through costs a return that the CPU mispredicts (its
			// return predictor holds the driver's calls, not this stack's). single does the
			// same from its own frame.
			p.blocking = true
			p.markStack()
			p.yield(blocked)
			p.blocking = false
		} else {
			s.block(p)
		}
	}
	return p.reason
}

// wakeSeq wakes p if it is still parked with sequence seq.
func (s *Sim) wakeSeq(p *proc, seq uint64, r wakeReason) {
	if p.seq == seq {
		s.wakeProc(p, r)
	}
}

// wakeProc makes parked p ready to run, for reason r.
func (s *Sim) wakeProc(p *proc, r wakeReason) {
	if !p.parked {
		return
	}
	p.parked = false
	p.reason = r
	s.unlink(p)
	if !p.blocking && p == s.cur.Load() {
		// p is running and about to block: it sees that it was woken instead.
		return
	}
	p.prefetchResume()
	s.ready.push(p)
}

// unlink removes p from every list it parked on.
func (s *Sim) unlink(p *proc) {
	if c := p.ctx; c != nil {
		if p.cprev != nil {
			p.cprev.cnext = p.cnext
		} else {
			c.waiters = p.cnext
		}
		if p.cnext != nil {
			p.cnext.cprev = p.cprev
		}
		p.ctx, p.cprev, p.cnext = nil, nil, nil
	}
	if p.stop != nil {
		p.stop()
		p.stop = nil
	}
	if p.listed {
		c := p.client
		if p.lprev != nil {
			p.lprev.lnext = p.lnext
		} else {
			c.parked = p.lnext
		}
		if p.lnext != nil {
			p.lnext.lprev = p.lprev
		}
		p.listed, p.lprev, p.lnext = false, nil, nil
	}
	if n := p.wn; n != nil {
		n.unwatch(p)
	}
}

// parkOn registers parked p with client c, so that Close, crashes and pauses find it.
func (c *client) parkOn(p *proc, kind parkKind) {
	p.client = c
	p.kind = kind
	p.listed = true
	p.lprev = nil
	p.lnext = c.parked
	if c.parked != nil {
		c.parked.lprev = p
	}
	c.parked = p
}

// wakeParked wakes c's parked procs of the given kinds (all kinds if none given).
func (c *client) wakeParked(r wakeReason, kinds ...parkKind) {
	for p := c.parked; p != nil; {
		nx := p.lnext
		match := len(kinds) == 0
		for _, k := range kinds {
			match = match || p.kind == k
		}
		if match {
			c.s.wakeProc(p, r)
		}
		p = nx
	}
}

// spawn starts f in a new proc, ready to run at the current time. foreign says that it was
// started from outside the simulation.
func (s *Sim) spawn(f func(), foreign bool) {
	p := &proc{s: s, foreign: foreign}
	if foreign {
		s.foreignProcs++
	}
	s.procs++
	p.resume, _ = iter.Pull(func(yield func(*proc) bool) { s.procMain(p, f, yield) })
	s.ready.push(p)
}

// procMain runs f in proc p, a coroutine its first resume starts.
func (s *Sim) procMain(p *proc, f func(), yield func(*proc) bool) {
	p.g.Store(curg())
	p.yield = yield
	returned := false
	defer func() {
		if returned {
			return
		}
		if r := recover(); r != nil {
			// As for any goroutine: a panic ends the program. Letting iter.Pull carry it into
			// the driver would unwind the simulator's own frames there instead.
			fmt.Fprintf(os.Stderr, "panic: %v\n\n[in a simulated goroutine]\n%s", r, debug.Stack())
			os.Exit(2)
		}
		// runtime.Goexit (t.FailNow, say) ends p, not its driver: p hands over as it would on
		// return, and its goroutine stays parked for good.
		p.yield(s.procExit(p))
	}()
	f()
	returned = true
	s.exited = s.procExit(p)
}

// procExit ends proc p and returns the proc to run next.
func (s *Sim) procExit(p *proc) *proc {
	if p.foreign {
		s.foreignProcs--
		if s.foreignProcs == 0 && s.driver != nil {
			s.wakeProc(s.driver, wakeEvent)
		}
	}
	s.procs--
	p.client = nil
	return s.next()
}

// startsForeign reports whether what proc p starts counts as started from outside the
// simulation: p is a goroutine from outside other than Run's.
func startsForeign(p *proc) bool { return p.adopted && !p.main }

// nextKey returns the tie-break key of a new event: a bijective mix of a counter and the seed,
// so events at the same time run in an order the seed decides.
func (s *Sim) nextKey() uint64 {
	s.seq++
	z := s.seq*0x9e3779b97f4a7c15 + s.seed
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// pushEvent queues an event at virtual time at. An event bound for the wheel needs no key (the
// wheel breaks ties itself); one bound for the heap gets the next key.
func (s *Sim) pushEvent(at int64, kind evKind, obj unsafe.Pointer, arg uint64) {
	rel := uint64(min(max(at-int64(Epoch), 0), horizon))
	if kind != evTimer && rel < s.heap.cursor+wheelSize && rel >= s.heap.cursor {
		s.heap.pushWheel(rel, kind, obj, arg)
		return
	}
	s.heap.heap.push(mkEvent(at, s.nextKey(), kind, obj, arg))
}

func (s *Sim) pushProc(at int64, p *proc, seq uint64) {
	s.pushEvent(at, evResume, unsafe.Pointer(p), seq)
}

func (s *Sim) pushGroup(at int64, kind evKind, g *group) {
	s.pushEvent(at, kind, unsafe.Pointer(g), 0)
}

func (s *Sim) pushCall(at int64, c *call, stage uint64) {
	s.pushEvent(at, evCall, unsafe.Pointer(c), stage)
}

// handle runs one event's effect.
func (s *Sim) handle(kind evKind, obj unsafe.Pointer, arg uint64) {
	switch kind {
	case evResume:
		s.wakeSeq((*proc)(obj), arg, wakeEvent)
	case evTimer:
		(*timer)(obj).fire()
	case evArrive:
		s.arrive((*group)(obj))
	case evApply:
		s.applyNext((*group)(obj))
	case evReply:
		s.reply((*group)(obj))
	case evDown:
		s.downTimeout((*group)(obj))
	case evCall:
		s.callStep((*call)(obj), arg)
	}
}

// sleepUntil parks p until virtual time at, ignoring contexts (CPU work, not a wait). c, if
// not nil, is the client p works for: pausing it freezes p.
func (s *Sim) sleepUntil(p *proc, at int64, c *client) {
	if at <= s.nowNs {
		return
	}
	p.client = c
	seq := s.prepark(p)
	s.pushProc(at, p, seq)
	s.await(p, nil)
}

// timer is a function run inside the event loop at a virtual time.
type timer struct {
	s       *Sim
	at      int64
	idx     int // heap index, -1 when not in the heap
	fn      func()
	foreign bool // counted in Sim.foreignProcs until it fires or stops
	state   uint8
}

const (
	timerPending uint8 = iota
	timerFired
	timerStopped
)

func (s *Sim) newTimer(at int64, foreign bool, fn func()) *timer {
	t := &timer{s: s, at: at, idx: -1, fn: fn, foreign: foreign}
	if foreign {
		s.foreignProcs++
	}
	s.heap.heap.push(mkEvent(at, s.nextKey(), evTimer, unsafe.Pointer(t), 0))
	return t
}

func (t *timer) fire() {
	if t.state != timerPending {
		return
	}
	t.state = timerFired
	t.fn()
	if t.foreign {
		t.s.foreignProcs--
	}
}

// cancel stops t if it has not fired; the token must be held.
func (t *timer) cancel() bool {
	if t.state != timerPending {
		return false
	}
	t.state = timerStopped
	if t.idx >= 0 {
		t.s.heap.heap.remove(t.idx)
	}
	if t.foreign {
		t.s.foreignProcs--
	}
	return true
}

// Stop implements farmem.Timer.
func (t *timer) Stop() bool {
	p, adopted := t.s.enter()
	defer t.s.exit(p, adopted)
	return t.cancel()
}

// stackHints says that stackBounds reads the bounds of the calling goroutine's stack: they hold
// a local variable of the caller and span a power of two of at least 2 KiB. Otherwise (another
// runtime layout, or the portable build) procs record no stack bounds and prefetchResume
// prefetches no stack.
var stackHints = func() bool {
	var mark byte
	a := uintptr(unsafe.Pointer(&mark))
	lo, hi := stackBounds()
	size := hi - lo
	return lo < a && a < hi && size >= 2048 && size&(size-1) == 0
}()
