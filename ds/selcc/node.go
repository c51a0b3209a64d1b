package selcc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/farmem/farmem/alloc/nodearea"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/nodestate"
)

// Ownership memo of a frame: what the node holds globally.
type memo uint8

const (
	memoI memo = iota
	memoS
	memoM
)

// String is the state's letter.
func (m memo) String() string { return [...]string{"I", "S", "M"}[m] }

// frameHeader is the bytes before a frame's body in the node's shared area: the local latch
// word, padded to a cache line.
const frameHeader = 64

// frame is one cache frame. Its latch word and body live in the node's shared area; the
// fields below are guarded by that latch (written under X, read under S or X), except key,
// which node.mu guards, and the fairness counters, which are atomics (the handler touches them
// when it cannot take the latch).
type frame struct {
	latch farmem.Addr // local latch word
	body  farmem.Addr // LineSize bytes

	// guarded by node.mu
	key     GCL // the GCL the table maps to this frame (0: free)
	lruTick uint64
	dead    bool // a forward into it may still land: never reused

	// guarded by the latch
	memo   memo
	lo, hi int    // dirty bounds, [lo, hi); lo == hi clean
	earned uint32 // the retries it took to get M: readers with fewer are refused (matching)

	// guarded by node.mu: the highest-priority writer whose invalidation was dropped while
	// local clients held the frame; the lease hands the line to it (§5.3.2)
	pend   invalidation
	pendOK bool

	// fairness (§5.3)
	yieldPrio atomic.Uint32 // a writer's PeerWr (this priority) was dropped while readers held the frame
	contended atomic.Bool   // an invalidation was dropped because local clients held the latch
	waits     atomic.Uint64 // W_c*Threads + R_c: local waits for the latch while contended

	// acquiring says what global acquisition a client runs under the frame's X latch
	// (acquiringShared, acquiringExclusive, or 0), for NodeStats' latch-wait split
	acquiring atomic.Uint32
}

// Values of frame.acquiring.
const (
	acquiringShared    = 1
	acquiringExclusive = 2
)

// node is one compute node's cache: its frames and the table from GCLs to them.
type node struct {
	c    *Cluster
	id   farmem.ComputeID
	m    farmem.Memory // the state's own client (Close)
	area *nodearea.Area

	frames []*frame

	mu      sync.Mutex // short sections, never across a verb or a Wait
	table   map[GCL]*frame
	free    []*frame
	tick    uint64
	holdoff map[GCL]farmem.Time  // spin-wait for starving writers: no local S acquire before
	orphans map[GCL][]orphan     // unanswered messages that may have given this node a hold
	fences  map[GCL]farmem.Time  // a repair's census: no count of the line added before
	retired map[farmem.Addr]bool // clients' reply blocks left to late answers (lateanswer.go)
	// quarantined frames that late answers may still write, and where those answers land
	quarantined map[*frame][]orphan
	landed      map[GCL]farmem.Time // a landed orphan's hold waits for its line since (lateanswer.go)

	stats nodeStats

	evicting atomic.Bool // the background evictor runs (and owns m)
	closing  atomic.Bool // Close began: no evictor starts
}

type nodeStats struct {
	dropped, handled, evicted, leases, granted atomic.Uint64
	latchWaits, latchWait, writerWait          atomic.Uint64 // waits; their ns; those behind a writer's acquisition
}

// Message kinds.
const (
	methodInvalidate = 1

	peerRd = 1 // a reader wants the line: M holder downgrades and forwards
	peerWr = 2 // a writer wants the line: M holder hands over and forwards, S holder releases

	msgLen = 48
)

// Reply statuses, in the low 8 bits of a reply flag word; the sequence number is above.
const (
	replyData      = 1 // ownership and the body were forwarded into the requester's frame
	replyDataDirty = 2 // the same, and the body is newer than far memory (an exclusive hand-over)
	replyAck       = 3 // the shared hold was released
	replyDrop      = 4 // nothing done: not held, stale, or in use
)

// replyAcked is what the handler's invalidate returns when it already wrote replyAck in the
// batch that released the hold (never written to a flag).
const replyAcked = 0xff

// replyWord is a reply flag word: the message's sequence number above its status.
func replyWord(seq, status uint64) []byte {
	return binary.LittleEndian.AppendUint64(nil, seq<<8|status)
}

type invalidation struct {
	kind  uint8
	prio  uint32
	from  farmem.ComputeID
	gcl   GCL
	flag  farmem.Addr
	data  farmem.Addr
	seq   uint64
	grant farmem.Addr // the requester's grant word (PeerWr)
}

func (v invalidation) encode() []byte {
	b := make([]byte, msgLen)
	b[0] = v.kind
	binary.LittleEndian.PutUint16(b[2:], uint16(v.from))
	binary.LittleEndian.PutUint32(b[4:], v.prio)
	binary.LittleEndian.PutUint64(b[8:], uint64(v.gcl))
	binary.LittleEndian.PutUint64(b[16:], uint64(v.flag))
	binary.LittleEndian.PutUint64(b[24:], uint64(v.data))
	binary.LittleEndian.PutUint64(b[32:], v.seq)
	binary.LittleEndian.PutUint64(b[40:], uint64(v.grant))
	return b
}

func decodeInvalidation(b []byte) (invalidation, error) {
	if len(b) != msgLen || b[0] < peerRd || b[0] > peerUnfence || b[1] != 0 {
		return invalidation{}, fmt.Errorf("selcc: malformed invalidation (%d bytes): %w", len(b), farmem.ErrInvalid)
	}
	return invalidation{
		kind:  b[0],
		from:  farmem.ComputeID(binary.LittleEndian.Uint16(b[2:])),
		prio:  binary.LittleEndian.Uint32(b[4:]),
		gcl:   GCL(binary.LittleEndian.Uint64(b[8:])),
		flag:  farmem.Addr(binary.LittleEndian.Uint64(b[16:])),
		data:  farmem.Addr(binary.LittleEndian.Uint64(b[24:])),
		seq:   binary.LittleEndian.Uint64(b[32:]),
		grant: farmem.Addr(binary.LittleEndian.Uint64(b[40:])),
	}, nil
}

func openNode(ctx context.Context, c *Cluster, env *nodestate.Env) (*node, error) {
	area, err := nodearea.Open(ctx, env.Memory)
	if err != nil {
		return nil, err
	}
	n := &node{c: c, id: env.Node.ComputeID(), m: env.Memory, area: area,
		table: map[GCL]*frame{}, holdoff: map[GCL]farmem.Time{}}
	o := c.opts
	if o.Mode != SEL {
		for range o.Frames {
			b, err := area.AllocZeroed(ctx, uint64(frameHeader+o.LineSize))
			if err != nil {
				return nil, fmt.Errorf("selcc: frames of %v: %w", env.Node, err)
			}
			f := &frame{latch: b, body: b.Add(frameHeader)}
			n.frames = append(n.frames, f)
			n.free = append(n.free, f)
		}
	}
	if err := env.Handle(methodInvalidate, n.onInvalidate); err != nil {
		return nil, err
	}
	return n, nil
}

// Close releases every line the node holds (writing dirty ones back), in batches. A frame
// whose latch is held (a handler finishing a release, or a guard still open) is waited for
// with the latch's Lock (Memory.Wait), not retried in a loop of failed try-locks. Then it
// settles the node's orphans (a late hand-over's line written back), as an acquisition would.
func (n *node) Close() error {
	n.stopEvictor()
	ctx := context.Background()
	var errs []error
	for {
		n.mu.Lock()
		var victims []*frame
		for _, f := range n.frames {
			if f.key != 0 && !f.dead {
				victims = append(victims, f)
			}
		}
		n.mu.Unlock()
		if len(victims) == 0 {
			break
		}
		before := n.stats.evicted.Load()
		if err := n.evict(ctx, n.m, victims); err != nil {
			errs = append(errs, err)
			break
		}
		if n.stats.evicted.Load() == before {
			// Every victim was latched: wait for the first one's holder to leave.
			if err := n.awaitLatch(ctx, victims[0]); err != nil {
				errs = append(errs, err)
				break
			}
		}
	}
	n.mu.Lock()
	var gs []GCL
	for g := range n.orphans {
		gs = append(gs, g)
	}
	n.mu.Unlock()
	slices.Sort(gs) // a deterministic order of verbs (sim)
	for _, g := range gs {
		if err := n.settleFree(ctx, n.m, g, true); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// awaitLatch waits until f's local latch is free (taking and dropping it).
func (n *node) awaitLatch(ctx context.Context, f *frame) error {
	l, err := nodearea.NewLatch(n.m, f.latch)
	if err != nil {
		return err
	}
	if err := l.Lock(ctx); err != nil {
		return err
	}
	return l.Unlock(ctx)
}

// lookup returns the frame the table maps g to, if any, and touches it for LRU.
func (n *node) lookup(g GCL) *frame {
	n.mu.Lock()
	defer n.mu.Unlock()
	f := n.table[g]
	if f != nil {
		n.tick++
		f.lruTick = n.tick
	}
	return f
}

// mapped reports whether the table still maps g to f.
func (n *node) mapped(g GCL, f *frame) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.table[g] == f
}

// unmap removes f (latched X by the caller) from the table and returns it to the free list.
func (n *node) unmap(f *frame) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.table[f.key] == f {
		delete(n.table, f.key)
	}
	f.key = 0
	f.pendOK = false
	f.yieldPrio.Store(0)
	if !f.dead {
		n.free = append(n.free, f)
	}
}

// takeFree takes a frame off the free list (nil if none).
func (n *node) takeFree() *frame {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.free) == 0 {
		return nil
	}
	f := n.free[len(n.free)-1]
	n.free = n.free[:len(n.free)-1]
	return f
}

func (n *node) putFree(f *frame) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.free = append(n.free, f)
}

// install maps g to f; false if g is mapped already (the caller keeps f).
func (n *node) install(g GCL, f *frame) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.table[g]; ok {
		return false
	}
	n.tick++
	f.key, f.lruTick = g, n.tick
	f.pendOK = false
	f.yieldPrio.Store(0)
	n.table[g] = f
	return true
}

// allDead reports whether every frame was quarantined after a peer failed to answer.
func (n *node) allDead() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, f := range n.frames {
		if !f.dead {
			return false
		}
	}
	return true
}

// victims returns up to k mapped frames, least recently used first.
func (n *node) victims(k int) []*frame {
	n.mu.Lock()
	defer n.mu.Unlock()
	var vs []*frame
	for _, f := range n.frames {
		if f.key != 0 && !f.dead {
			vs = append(vs, f)
		}
	}
	// partial selection sort: k is small
	for i := 0; i < len(vs) && i < k; i++ {
		best := i
		for j := i + 1; j < len(vs); j++ {
			if vs[j].lruTick < vs[best].lruTick {
				best = j
			}
		}
		vs[i], vs[best] = vs[best], vs[i]
	}
	if len(vs) > k {
		vs = vs[:k]
	}
	return vs
}

// evict releases the global latches of the frames it can latch X among fs, in one batch (one
// round trip, whatever memory nodes it reaches): a dirty line's range is written back before
// its release FAA (ordered in the batch). The frames stay latched and mapped until the batch
// completed, so no client of this node can acquire their lines again before the releases
// landed (the reacquire-before-release pitfall). Frames it cannot latch at once (in use) are
// skipped.
func (n *node) evict(ctx context.Context, m farmem.Memory, fs []*frame) error {
	var b farmem.Batch
	var held []*frame
	var lats []nodearea.Latch
	for _, f := range fs {
		l, err := nodearea.NewLatch(m, f.latch)
		if err != nil {
			return err
		}
		ok, err := l.TryLock(ctx)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		n.mu.Lock()
		live := f.key != 0 && n.table[f.key] == f
		n.mu.Unlock()
		if !live {
			if err := l.Unlock(ctx); err != nil {
				return err
			}
			continue
		}
		if err := n.releaseOps(ctx, m, &b, f); err != nil {
			return err
		}
		held = append(held, f)
		lats = append(lats, l)
	}
	var err error
	if len(b.Ops) > 0 {
		err = m.Do(ctx, &b)
		if err == nil {
			for i := range b.Ops {
				if _, e := b.Result(i); e != nil {
					err = e
					break
				}
			}
		}
	}
	for i, f := range held {
		if err == nil {
			f.memo, f.lo, f.hi = memoI, 0, 0
			n.unmap(f)
			n.stats.evicted.Add(1)
		}
		if e := lats[i].Unlock(ctx); e != nil && err == nil {
			err = e
		}
	}
	if err != nil {
		return fmt.Errorf("selcc: evict on %v: %w", farmem.ComputeID(n.id).Node(), err)
	}
	return nil
}

// releaseOps appends to b the ops that release f's global latch: the dirty range's write-back
// (read from the frame now) and the release FAA.
func (n *node) releaseOps(ctx context.Context, m farmem.Memory, b *farmem.Batch, f *frame) error {
	cd := n.c.opts.Codec
	switch f.memo {
	case memoM:
		if f.hi > f.lo {
			buf := make([]byte, f.hi-f.lo)
			if err := m.Read(ctx, f.body.Add(uint64(f.lo)), buf); err != nil {
				return err
			}
			b.Write(f.key.Body().Add(uint64(f.lo)), buf)
		}
		b.FAA(f.key.Latch(), ReleaseExclusiveDelta(cd, n.id))
	case memoS:
		b.FAA(f.key.Latch(), ReleaseSharedDelta(cd, n.id))
	}
	return nil
}

// onInvalidate is the handler of PeerRd and PeerWr. It never waits: it try-locks the frame's
// latch and drops the message if local clients hold it (local transfer beats global), if the
// node holds nothing of the line, or if what it holds does not match the request (a stale
// message). Only a node that holds the line changes its latch word: a group member that holds
// nothing (or whose frame is being released by another client) drops the message and never
// decrements a count it did not add.
func (n *node) onInvalidate(ctx context.Context, m farmem.Memory, _ farmem.ClientID, req []byte) ([]byte, error) {
	v, err := decodeInvalidation(req)
	if err != nil {
		return nil, err
	}
	switch v.kind {
	case peerCensus:
		ok, err := n.census(ctx, m, v.gcl)
		if err != nil {
			return nil, err
		}
		status := uint64(replyAck)
		if !ok {
			status = replyDrop
		}
		return nil, n.reply(ctx, m, v, status)
	case peerUnfence:
		n.unfence(v.gcl)
		return nil, nil
	}
	status, err := n.invalidate(ctx, m, v)
	if err != nil {
		return nil, err
	}
	if status == replyDrop || status == replyAck {
		return nil, n.reply(ctx, m, v, status)
	}
	return nil, nil // the reply went out with the forwarded body or the release
}

func (n *node) reply(ctx context.Context, m farmem.Memory, v invalidation, status uint64) error {
	return m.Write(ctx, v.flag, replyWord(v.seq, status))
}

func (n *node) invalidate(ctx context.Context, m farmem.Memory, v invalidation) (uint64, error) {
	f := n.lookup(v.gcl)
	if f == nil {
		if err := n.settleUnmapped(ctx, m, v.gcl); err != nil {
			return 0, err
		}
		n.stats.dropped.Add(1)
		return replyDrop, nil
	}
	l, err := nodearea.NewLatch(m, f.latch)
	if err != nil {
		return 0, err
	}
	ok, err := l.TryLock(ctx)
	if err != nil {
		return 0, err
	}
	if !ok {
		// Local clients hold it (or another client is releasing it): drop, and turn on the
		// lease counters; remember a writer's priority for spin-waiting readers.
		f.contended.Store(true)
		if v.kind == peerWr && n.starving(v.prio) && n.c.opts.WriterHoldoff > 0 {
			// Spin waiting: the next local shared release gives a shared hold up.
			for p := f.yieldPrio.Load(); v.prio > p && !f.yieldPrio.CompareAndSwap(p, v.prio); p = f.yieldPrio.Load() {
			}
		}
		if v.kind == peerWr && v.grant != 0 {
			n.mu.Lock()
			if n.table[v.gcl] == f && (!f.pendOK || v.prio >= f.pend.prio) {
				f.pend, f.pendOK = v, true
			}
			n.mu.Unlock()
		}
		n.stats.dropped.Add(1)
		return replyDrop, nil
	}
	defer func() { _ = l.Unlock(detached(ctx)) }()
	if !n.mapped(v.gcl, f) {
		n.stats.dropped.Add(1)
		return replyDrop, nil
	}
	cd := n.c.opts.Codec
	switch {
	case n.c.opts.NoForwarding && f.memo == memoM && (v.kind == peerWr || v.kind == peerRd && (n.c.opts.NoPriorityMatching || v.prio >= f.earned)):
		return n.releaseUnforwarded(ctx, m, v, f)
	case v.kind == peerWr && f.memo == memoM:
		// Case 1: hand ownership over with one FAA, then forward the line (dirty: it was not
		// written back); under EagerForward both in one batch (Options.EagerForward).
		var handover farmem.Batch
		if n.c.opts.EagerForward {
			handover.FAA(v.gcl.Latch(), HandoverDelta(cd, n.id, v.from))
		} else if _, err := m.FAA(ctx, v.gcl.Latch(), HandoverDelta(cd, n.id, v.from)); err != nil {
			return 0, err
		}
		f.memo = memoI
		status := uint64(replyData)
		if f.hi > f.lo {
			status = replyDataDirty
		}
		if err := n.forwardIn(ctx, m, &handover, f, v, status); err != nil {
			return 0, err
		}
		f.lo, f.hi = 0, 0
		n.unmap(f)
	case v.kind == peerRd && f.memo == memoM && !n.c.opts.NoPriorityMatching && v.prio < f.earned:
		// Priority matching (§5.3.2): a writer that waited k retries for the line keeps it
		// against readers that have waited fewer.
		n.stats.dropped.Add(1)
		return replyDrop, nil
	case v.kind == peerRd && f.memo == memoM && n.fenced(v.gcl, m.Runtime().Now()) != 0:
		// A repair's census fences the line: a downgrade would add this node's count.
		n.stats.dropped.Add(1)
		return replyDrop, nil
	case v.kind == peerRd && f.memo == memoM:
		// Case 2: write the dirty range back, then downgrade to S for both in one FAA
		// (ordered after the write in one batch), then forward. Under the group codec the
		// holder downgrades only itself and acknowledges; the reader adds its own count with
		// its next attempt (a count granted by a holder that dies before forwarding could not
		// be told apart from its group's: see orphan).
		var b farmem.Batch
		if f.hi > f.lo {
			buf := make([]byte, f.hi-f.lo)
			if err := m.Read(ctx, f.body.Add(uint64(f.lo)), buf); err != nil {
				return 0, err
			}
			b.Write(v.gcl.Body().Add(uint64(f.lo)), buf)
		}
		if !exactSharers(cd) {
			b.FAA(v.gcl.Latch(), cd.Shared(n.id)-cd.Exclusive(n.id))
			if err := doAll(ctx, m, &b); err != nil {
				return 0, err
			}
			f.memo, f.lo, f.hi = memoS, 0, 0
			n.stats.handled.Add(1)
			return replyAck, nil
		}
		b.FAA(v.gcl.Latch(), DowngradeDelta(cd, n.id, v.from))
		if err := doAll(ctx, m, &b); err != nil {
			return 0, err
		}
		f.memo, f.lo, f.hi = memoS, 0, 0
		if err := n.forward(ctx, m, f, v, replyData); err != nil {
			return 0, err
		}
	case v.kind == peerRd && f.memo == memoS:
		// The line is no longer held exclusively here (a downgrade for another reader came
		// first): the reader's retry will succeed, so tell it to retry at once rather than
		// drop and make it wait its resend interval.
		n.stats.handled.Add(1)
		return replyAck, nil
	case v.kind == peerWr && f.memo == memoS:
		// Case 3: release our own shared hold and acknowledge in one batch (the FAA to the
		// line's memory node and the acknowledgement to the writer go out together, as the
		// paper's writer keeps retrying its CAS while the sharers release, §4.4.3: the
		// writer does not wait for the release's round trip to come back here first). The
		// frame stays latched until the FAA has completed, so this node's next acquisition
		// of the line cannot overtake it; a writer whose retry reaches the word before the
		// FAA fails it and retries. The release stands whatever became of the
		// acknowledgement (its writer may have gone down meanwhile).
		var b farmem.Batch
		b.FAA(v.gcl.Latch(), ReleaseSharedDelta(cd, n.id))
		b.Write(v.flag, replyWord(v.seq, replyAck))
		err := m.Do(ctx, &b)
		if _, ferr := b.Result(0); ferr != nil {
			return 0, errors.Join(ferr, err)
		}
		f.memo = memoI
		n.unmap(f)
		n.setHoldoff(m, v.gcl, v.prio)
		n.stats.handled.Add(1)
		if _, werr := b.Result(1); werr != nil {
			return 0, errors.Join(werr, err)
		}
		return replyAcked, nil
	default:
		n.stats.dropped.Add(1)
		return replyDrop, nil
	}
	n.stats.handled.Add(1)
	return replyData, nil
}

// forward writes f's body into the requester's frame and then its reply flag, in one batch.
func (n *node) forward(ctx context.Context, m farmem.Memory, f *frame, v invalidation, status uint64) error {
	return n.forwardIn(ctx, m, &farmem.Batch{}, f, v, status)
}

// forwardIn is forward appending to b, which may already hold ops to other nodes (the
// hand-over FAA under EagerForward) that then travel with the forward.
func (n *node) forwardIn(ctx context.Context, m farmem.Memory, b *farmem.Batch, f *frame, v invalidation, status uint64) error {
	buf := make([]byte, n.c.opts.LineSize)
	if err := m.Read(ctx, f.body, buf); err != nil {
		return err
	}
	var w [8]byte
	binary.LittleEndian.PutUint64(w[:], v.seq<<8|status)
	b.Write(v.data, buf)
	b.Write(v.flag, w[:])
	return doAll(ctx, m, b)
}

// starving reports whether a writer's message of priority prio (its retry count) is a
// starving writer's (Options.StarvationTries).
func (n *node) starving(prio uint32) bool { return prio >= uint32(n.c.opts.StarvationTries) }

// setHoldoff keeps this node's readers off g for a while after a writer with priority prio
// took its shared hold away (spin waiting against writer starvation).
func (n *node) setHoldoff(m farmem.Memory, g GCL, prio uint32) {
	if !n.starving(prio) || n.c.opts.WriterHoldoff == 0 {
		return
	}
	n.holdOff(m, g, n.c.opts.WriterHoldoff*timeDuration(min(prio, 64)))
}

// holdOff keeps this node's clients from acquiring g for d.
func (n *node) holdOff(m farmem.Memory, g GCL, d time.Duration) {
	until := m.Runtime().Now() + farmem.Time(d)
	n.mu.Lock()
	defer n.mu.Unlock()
	if until > n.holdoff[g] {
		n.holdoff[g] = until
	}
}

func (n *node) holdoffUntil(g GCL) farmem.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	t, ok := n.holdoff[g]
	if ok && t == 0 {
		delete(n.holdoff, g)
	}
	return t
}

func (n *node) clearHoldoff(g GCL, t farmem.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.holdoff[g] == t {
		delete(n.holdoff, g)
	}
}

func doAll(ctx context.Context, m farmem.Memory, b *farmem.Batch) error {
	if err := m.Do(ctx, b); err != nil {
		return err
	}
	for i := range b.Ops {
		if _, err := b.Result(i); err != nil {
			return err
		}
	}
	return nil
}
