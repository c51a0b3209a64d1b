package qlock

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/farmem/farmem/farmem"
)

// Errors of the lock.
var (
	// ErrClosedEntry: Enqueue found a closing acquisition in the queue; nothing changed.
	ErrClosedEntry = errors.New("qlock: lock entry closed by a closing acquisition")
	// ErrReset: the lock was reset while this acquisition was queued or held (its queue is
	// dead): a waiter must enqueue again; a holder has lost the lock, and only its fenced
	// writes (see the package doc) are safe.
	ErrReset = errors.New("qlock: lock was reset")
)

// Options configure a Locker.
type Options struct {
	// Offset is where the client's lock node (NodeSize bytes, 8-aligned) lies in its slice of
	// its compute node's region (default 0).
	Offset uint64
	// Lease is how long a waiting client lets a lock's epoch stand still before it resets the
	// lock (default 10ms of fabric time). A holder must hand the lock on well within it.
	Lease time.Duration
	// Check is how often a waiting client reads the lock entry to see whether the epoch moved
	// (default Lease/2).
	Check time.Duration
}

func (o *Options) setDefaults() error {
	if o.Lease == 0 {
		o.Lease = 10 * time.Millisecond
	}
	if o.Check == 0 {
		o.Check = o.Lease / 2
	}
	if o.Lease < 0 || o.Check <= 0 || o.Offset%8 != 0 {
		return fmt.Errorf("qlock: options %+v: %w", *o, farmem.ErrInvalid)
	}
	return nil
}

// Stats count one Locker's work.
type Stats struct {
	// Enqueues counts acquisitions started, Immediate those that found the lock free, Rejected
	// those refused by a closing acquisition.
	Enqueues, Immediate, Rejected uint64
	// Waits counts waits for a message or a successor's link; Checks the reads of a lock entry
	// made while waiting.
	Waits, Checks uint64
	// Resets counts locks this client reset, Abandoned the acquisitions it gave up because
	// their lock was reset (by it or another client).
	Resets, Abandoned uint64
	// Handovers counts releases to a waiting successor, Frees releases that freed the lock,
	// Lost releases that found the lock reset.
	Handovers, Frees, Lost uint64
	// Sent counts messages written into other clients' lock nodes (hand-overs included).
	Sent uint64
	// LinkErrors counts links to a predecessor that failed (its compute node down).
	LinkErrors uint64
}

// Locker is one client's side of the lock: its lock node and acquisition counter. Like the
// client's farmem.Memory it belongs to one goroutine, and it has at most one acquisition in
// progress at a time (its node serves one queue).
type Locker struct {
	m     farmem.Memory
	rt    farmem.Runtime
	id    farmem.ClientID
	node  farmem.Addr
	opts  Options
	seq   uint32
	stats Stats
	// acq is the acquisition Enqueue returns, reused by the next Enqueue (one in progress at
	// a time), and buf the buffer of the reads and writes of 8 to 16 bytes its methods make,
	// so that an uncontended passage allocates nothing.
	acq Acquisition
	buf [EntrySize]byte
}

// New returns client m's Locker. Its lock node is at Options.Offset of m's slice; New clears
// it (a local write, no round trip).
func New(m farmem.Memory, opts Options) (*Locker, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	info := m.Info()
	if opts.Offset+NodeSize > info.SliceSize {
		return nil, fmt.Errorf("qlock: lock node at %d of a %d-byte slice: %w", opts.Offset, info.SliceSize, farmem.ErrInvalid)
	}
	l := &Locker{m: m, rt: m.Runtime(), id: info.ID, node: info.Slice.Add(opts.Offset), opts: opts}
	// Start numbering at random, so that messages meant for an earlier client of the same slot
	// are not taken for ours.
	l.seq = uint32(l.rt.Rand().Uint64()) & seqMask
	if err := m.Write(context.Background(), l.node, make([]byte, NodeSize)); err != nil {
		return nil, fmt.Errorf("qlock: clear lock node: %w", err)
	}
	return l, nil
}

// Stats returns the Locker's counters.
func (l *Locker) Stats() Stats { return l.stats }

// Options returns the Locker's options, defaults filled in.
func (l *Locker) Options() Options { return l.opts }

// Memory returns the client's Memory.
func (l *Locker) Memory() farmem.Memory { return l.m }

// NodeOf returns the address of the lock node of the client a ticket names: pure arithmetic on
// the topology (every client uses the same Options.Offset).
func (l *Locker) NodeOf(t Ticket) (farmem.Addr, error) {
	s, err := l.m.Topology().ClientSlice(t.Client())
	if err != nil {
		return 0, fmt.Errorf("qlock: node of %v: %w", t, err)
	}
	return s.Add(l.opts.Offset), nil
}

// Acquisition is one passage through a lock's queue, from Enqueue until the lock is released
// (or the acquisition abandoned after a reset).
type Acquisition struct {
	l       *Locker
	entry   farmem.Addr
	ticket  Ticket
	gen     uint32
	closing bool
	pred    Ticket

	// The liveness watch: the epoch and lock word last read, and when the epoch last moved.
	watched bool
	epoch   uint64
	since   farmem.Time
}

// Enqueue joins the queue of the lock entry at entry (EntrySize bytes, 8-aligned, zero when
// free): one MaskedCAS that swaps this acquisition's ticket into the tail (and sets the closed
// bit if closing), refused if the entry is closed; then, if the queue was not empty, one
// write that links this acquisition into its predecessor's lock node. A closing acquisition
// is the last of its queue: every Enqueue after it fails with ErrClosedEntry until it
// releases.
//
// If the lock was free the acquisition holds it at once (Immediate); otherwise the caller
// waits for it with Await. The Acquisition is the Locker's own, which its next Enqueue reuses
// (a Locker has one acquisition in progress at a time): it must not be used after that. An
// uncontended passage (Enqueue, Successor, Release) allocates nothing.
func (l *Locker) Enqueue(ctx context.Context, entry farmem.Addr, closing bool) (*Acquisition, error) {
	l.seq = (l.seq + 1) & seqMask
	t := MakeTicket(l.id, l.seq)
	swap, mask := uint64(t), uint64(ticketMask)
	if closing {
		swap, mask = swap|closedBit, mask|closedBit
	}
	l.stats.Enqueues++
	prev, err := l.m.MaskedCAS(ctx, entry.Add(entryWord), 0, closedBit, swap, mask)
	if err != nil {
		return nil, fmt.Errorf("qlock: enqueue at %v: %w", entry, err)
	}
	w := Word(prev)
	if w.Closed() {
		l.stats.Rejected++
		return nil, ErrClosedEntry
	}
	a := &l.acq
	*a = Acquisition{l: l, entry: entry, ticket: t, gen: w.Gen(), closing: closing, pred: w.Tail()}
	if a.pred.IsZero() {
		l.stats.Immediate++
		return a, nil
	}
	node, err := l.NodeOf(a.pred)
	if err == nil {
		b := l.buf[:8]
		binary.LittleEndian.PutUint64(b, linkWord(a.pred.Seq(), t))
		err = l.m.Write(ctx, node.Add(nodeNext), b)
	}
	if err != nil {
		// The predecessor cannot be told: the queue stalls at it, and the waiters reset the lock
		// once its lease runs out. Waiting is how this acquisition learns of it.
		if ctx.Err() != nil {
			return nil, fmt.Errorf("qlock: link to %v: %w", a.pred, err)
		}
		l.stats.LinkErrors++
	}
	return a, nil
}

// Immediate reports whether the lock was free at Enqueue: the acquisition holds it.
func (a *Acquisition) Immediate() bool { return a.pred.IsZero() }

// Ticket returns the acquisition's ticket.
func (a *Acquisition) Ticket() Ticket { return a.ticket }

// Pred returns the ticket of the acquisition that was the tail at Enqueue (zero if none).
func (a *Acquisition) Pred() Ticket { return a.pred }

// Gen returns the lock's generation at Enqueue.
func (a *Acquisition) Gen() uint32 { return a.gen }

// Entry returns the lock entry's address.
func (a *Acquisition) Entry() farmem.Addr { return a.entry }

// Await waits for a message of one of kinds for this acquisition in the client's lock node (an
// event-driven Wait on a word of its own region). While it waits it reads the lock entry every
// Options.Check: if the lock's generation changed, the queue is dead and it returns ErrReset;
// if the epoch has not moved for Options.Lease, it resets the lock itself (a CAS on the lock
// word from the value it read, which bumps the generation) and returns ErrReset.
func (a *Acquisition) Await(ctx context.Context, kinds ...Kind) (Msg, error) {
	var want [numKinds]bool
	for _, k := range kinds {
		if k < numKinds {
			want[k] = true
		}
	}
	seq := a.ticket.Seq()
	g, err := a.wait(ctx, a.l.node.Add(nodeGrant), func(v uint64) bool {
		k, s, _ := decodeGrant(v)
		return s == seq && k < numKinds && want[k]
	})
	if err != nil {
		return Msg{}, err
	}
	buf := a.l.buf[:16]
	if err := a.l.m.Read(ctx, a.l.node.Add(nodeWordA), buf); err != nil {
		return Msg{}, fmt.Errorf("qlock: read own lock node: %w", err)
	}
	return decodeMsg(g, binary.LittleEndian.Uint64(buf[0:]), binary.LittleEndian.Uint64(buf[8:])), nil
}

// Successor returns the successor linked to this acquisition, if one has linked yet: a read of
// the client's own lock node, no round trip.
func (a *Acquisition) Successor(ctx context.Context) (Ticket, bool, error) {
	buf := a.l.buf[:8]
	if err := a.l.m.Read(ctx, a.l.node.Add(nodeNext), buf); err != nil {
		return 0, false, fmt.Errorf("qlock: read own lock node: %w", err)
	}
	t, ok := decodeLink(binary.LittleEndian.Uint64(buf), a.ticket.Seq())
	return t, ok, nil
}

// AwaitSuccessor waits until a successor has linked to this acquisition, watching the lock as
// Await does.
func (a *Acquisition) AwaitSuccessor(ctx context.Context) (Ticket, error) {
	seq := a.ticket.Seq()
	w, err := a.wait(ctx, a.l.node.Add(nodeNext), func(v uint64) bool {
		_, ok := decodeLink(v, seq)
		return ok
	})
	if err != nil {
		return 0, err
	}
	t, _ := decodeLink(w, seq)
	return t, nil
}

// wait waits on a word of the client's own lock node until cond holds, with the liveness
// watch between waits.
func (a *Acquisition) wait(ctx context.Context, at farmem.Addr, cond func(uint64) bool) (uint64, error) {
	l := a.l
	for {
		l.stats.Waits++
		wctx, cancel := l.rt.WithTimeout(ctx, l.opts.Check)
		v, err := l.m.Wait(wctx, at, cond)
		cancel()
		if err == nil {
			return v, nil
		}
		if ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return 0, fmt.Errorf("qlock: wait: %w", err)
		}
		if err := a.watch(ctx); err != nil {
			return 0, err
		}
	}
}

// watch reads the lock entry once (one round trip): ErrReset if the generation moved on, a
// reset if the epoch stood still for a lease, nil otherwise.
func (a *Acquisition) watch(ctx context.Context) error {
	l := a.l
	buf := l.buf[:EntrySize]
	l.stats.Checks++
	if err := l.m.Read(ctx, a.entry, buf); err != nil {
		if errors.Is(err, farmem.ErrNodeDown) && ctx.Err() == nil {
			return nil // the entry's node is down: keep waiting, it may come back
		}
		return fmt.Errorf("qlock: watch %v: %w", a.entry, err)
	}
	w := Word(binary.LittleEndian.Uint64(buf[entryWord:]))
	e := binary.LittleEndian.Uint64(buf[entryEpoch:])
	if w.Gen() != a.gen {
		l.stats.Abandoned++
		return ErrReset
	}
	now := l.rt.Now()
	if !a.watched || e != a.epoch {
		a.watched, a.epoch, a.since = true, e, now
		return nil
	}
	if now.Sub(a.since) < l.opts.Lease {
		return nil
	}
	// No hand-over for a whole lease: the queue is stuck at a dead or paused client. Reset the
	// lock from the word just read; if it changed meanwhile, look again next time.
	prev, err := l.m.CAS(ctx, a.entry.Add(entryWord), uint64(w), uint64(w.reset()))
	if err != nil {
		return fmt.Errorf("qlock: reset %v: %w", a.entry, err)
	}
	if Word(prev) == w {
		l.stats.Resets++
		l.stats.Abandoned++
		return ErrReset
	}
	if Word(prev).Gen() != a.gen {
		l.stats.Abandoned++
		return ErrReset
	}
	return nil
}

// Send writes message msg into the lock node of acquisition to: the payload, then the grant
// word naming to's acquisition number, in one batch (ordered at to's node), so that to sees
// the payload once it sees the grant word. With bump set the batch also advances the lock's
// epoch (a FAA on the entry), as every hand-over to a waiting successor does. One round trip.
func (a *Acquisition) Send(ctx context.Context, to Ticket, msg Msg, bump bool) error {
	l := a.l
	node, err := l.NodeOf(to)
	if err != nil {
		return err
	}
	wb := wordB(msg)
	payload := make([]byte, 24)
	binary.LittleEndian.PutUint64(payload[0:], msg.Word)
	binary.LittleEndian.PutUint64(payload[8:], wb)
	binary.LittleEndian.PutUint64(payload[16:], grantWord(msg.Kind, to.Seq(), msg.Word, wb))
	var b farmem.Batch
	b.Write(node.Add(nodeWordA), payload[:16])
	b.Write(node.Add(nodeGrant), payload[16:])
	if bump {
		b.FAA(a.entry.Add(entryEpoch), 1)
	}
	l.stats.Sent++
	if err := l.m.Do(ctx, &b); err != nil {
		return fmt.Errorf("qlock: send %v to %v: %w", msg.Kind, to, err)
	}
	return nil
}

// Release hands the lock on: to the linked successor with a Granted message carrying word and
// aux (and the epoch advanced, in the same round trip); with no successor linked, it frees the
// lock with a CAS of the lock word from this acquisition's value (clearing the closed bit of a
// closing acquisition); if that CAS finds a newer tail it waits for that successor's link and
// hands over. It returns ErrReset if the lock was reset meanwhile (the lock is no longer this
// acquisition's to release).
//
// Cost: 1 round trip (a CAS to the entry's node, or the two writes of a hand-over and the FAA).
func (a *Acquisition) Release(ctx context.Context, word uint64, aux uint32) error {
	l := a.l
	succ, ok, err := a.Successor(ctx)
	if err != nil {
		return err
	}
	if !ok {
		me := MakeWord(a.ticket, a.closing, a.gen)
		prev, err := l.m.CAS(ctx, a.entry.Add(entryWord), uint64(me), uint64(MakeWord(0, false, a.gen)))
		if err != nil {
			return fmt.Errorf("qlock: release %v: %w", a.entry, err)
		}
		if Word(prev) == me {
			l.stats.Frees++
			return nil
		}
		if Word(prev).Gen() != a.gen {
			l.stats.Lost++
			return ErrReset
		}
		if succ, err = a.AwaitSuccessor(ctx); err != nil {
			if errors.Is(err, ErrReset) {
				l.stats.Lost++
			}
			return err
		}
	}
	l.stats.Handovers++
	return a.Send(ctx, succ, Msg{Kind: Granted, Word: word, Aux: aux}, true)
}

// Watch observes a lock entry from outside its queue: a client whose Enqueue a closing
// acquisition refused has no lock node in the queue to wait in, so it watches the entry itself
// between its attempts, to reset it if the closing acquisition died or stalled with the lock.
type Watch struct {
	l     *Locker
	entry farmem.Addr
	seen  bool
	word  Word
	epoch uint64
	since farmem.Time
}

// Watch returns a watch on the lock entry at entry.
func (l *Locker) Watch(entry farmem.Addr) *Watch { return &Watch{l: l, entry: entry} }

// Entry returns the watched entry's address.
func (w *Watch) Entry() farmem.Addr { return w.entry }

// Check reads the entry (one round trip). If neither its lock word nor its epoch has changed
// for Options.Lease since the watch first saw them, the queue is stuck: Check resets the lock
// (the CAS of a waiter's reset) and reports true.
func (w *Watch) Check(ctx context.Context) (bool, error) {
	l := w.l
	var buf [EntrySize]byte
	l.stats.Checks++
	if err := l.m.Read(ctx, w.entry, buf[:]); err != nil {
		return false, fmt.Errorf("qlock: watch %v: %w", w.entry, err)
	}
	word := Word(binary.LittleEndian.Uint64(buf[entryWord:]))
	e := binary.LittleEndian.Uint64(buf[entryEpoch:])
	now := l.rt.Now()
	if !w.seen || word != w.word || e != w.epoch {
		w.seen, w.word, w.epoch, w.since = true, word, e, now
		return false, nil
	}
	if word.Tail().IsZero() || now.Sub(w.since) < l.opts.Lease {
		return false, nil
	}
	prev, err := l.m.CAS(ctx, w.entry.Add(entryWord), uint64(word), uint64(word.reset()))
	if err != nil {
		return false, fmt.Errorf("qlock: reset %v: %w", w.entry, err)
	}
	w.seen = false
	if Word(prev) != word {
		return false, nil
	}
	l.stats.Resets++
	return true, nil
}

// Lock acquires the lock at entry for a plain critical section: it enqueues, waits for the
// lock, and enqueues again if the lock is reset while it waits. It returns the acquisition
// (to Release) and the Granted message (Kind zero if the lock was free).
func (l *Locker) Lock(ctx context.Context, entry farmem.Addr) (*Acquisition, Msg, error) {
	for {
		a, err := l.Enqueue(ctx, entry, false)
		if err != nil {
			return nil, Msg{}, err
		}
		if a.Immediate() {
			return a, Msg{}, nil
		}
		msg, err := a.Await(ctx, Granted)
		if errors.Is(err, ErrReset) {
			continue
		}
		if err != nil {
			return nil, Msg{}, err
		}
		return a, msg, nil
	}
}
