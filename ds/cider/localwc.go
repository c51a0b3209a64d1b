package cider

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/farmem/farmem/ds/ptrsync"
	"github.com/farmem/farmem/farmem"
)

// LocalTable is one compute node's local write-combining table (SMART-style local WC, which
// CIDER's §5.1 applies to every baseline): the updates its clients have in flight, by key. A
// client's update that finds another update of the same key on its compute node still
// gathering joins it and, if that update commits, returns Combined without publishing its own
// block; only one update per key and node reaches the memory node at a time.
//
// Every client of a compute node shares its node's table. Its Go mutex is held for map
// operations alone, never across a verb or a Wait.
type LocalTable struct {
	mu   sync.Mutex
	open map[uint64]*localEntry
	seq  uint64
}

// localEntry is one leading update: while it gathers (from its Plan to its first Commit)
// others of its key join it; it publishes its outcome on its leader's latch word.
type localEntry struct {
	key       uint64
	seq       uint64
	latch     farmem.Addr // the leader's latch word, in its slice of the node's region
	gathering bool        // false once the leader's first Commit has begun
	followers int
	committed bool // the leader's first Commit committed or was combined (set before the latch)
}

// NewLocalTable returns an empty table for one compute node.
func NewLocalTable() *LocalTable { return &LocalTable{open: map[uint64]*localEntry{}} }

// DefaultLatchOffset is where LocalWC puts a client's latch word in its slice by default: past
// the lock nodes of qlock and of the spinlock.
const DefaultLatchOffset = 1024

// LocalWC wraps a synchronizer with local write combining over a compute node's LocalTable.
//
// An update is a leader if no update of its key on its node is gathering; it registers at Plan
// and gathers until its first Commit begins. A later update of the key on the node that Plans
// meanwhile is a follower: it asks its structure to defer its block's write (DeferWrite), so
// it costs only its lookup. At its Commit it waits (Wait on the leader's latch word, which is
// in its own compute node's region) for the leader's outcome, published when a Commit of the
// leader's ends in anything but Retry: if the leader's update took effect (committed or
// combined), the follower returns Combined — linearized just before the leader's change, which
// happened after the follower began and before it ended — else it commits through the wrapped
// synchronizer itself.
//
// Costs: a leader with followers writes its latch once (a compute-node verb, no memory-node
// traffic); a follower costs its lookup and a Wait. Deletes pass through uncombined. Limits: a
// leader that never finishes a Commit (its key was missing) publishes a failure at its next
// Plan; a follower waits at most LocalOptions.Grace for a leader still gathering and
// LocalOptions.Patience for one committing, then commits itself (a leader that dies never
// blocks its followers for longer).
type LocalWC struct {
	inner           ptrsync.Synchronizer
	tab             *LocalTable
	m               farmem.Memory
	latch           farmem.Addr
	patience, grace time.Duration

	// The current operation: the entry it leads or follows.
	lead, follow *localEntry
	published    bool // a leader has published its outcome
	lastCombined bool // the last update returned Combined as a follower
	stats        LocalStats
}

// LocalStats counts a LocalWC's updates: Leaders published a latch, Followers joined one, and
// Combined of those returned without a commit of their own.
type LocalStats struct {
	Leaders, Followers, Combined uint64
}

// LocalOptions configures a LocalWC.
type LocalOptions struct {
	// LatchOffset is where the client's latch word lies in its slice (DefaultLatchOffset if 0).
	LatchOffset uint64
	// Patience bounds a follower's wait for the outcome of a leader that has begun committing
	// (DefaultPatience if 0); Grace bounds its wait for a leader still gathering (DefaultGrace
	// if 0), which may never commit (its operation found the key missing). Past either the
	// follower commits itself, so a leader that dies never blocks its followers.
	Patience, Grace time.Duration
}

// The default bounds of a follower's wait.
const (
	DefaultPatience = 10 * time.Millisecond
	DefaultGrace    = 20 * time.Microsecond
)

// NewLocalWC wraps inner (client m's synchronizer) with local write combining over tab, its
// compute node's table.
func NewLocalWC(m farmem.Memory, tab *LocalTable, inner ptrsync.Synchronizer, opts LocalOptions) (*LocalWC, error) {
	if opts.LatchOffset == 0 {
		opts.LatchOffset = DefaultLatchOffset
	}
	if opts.Patience == 0 {
		opts.Patience = DefaultPatience
	}
	if opts.Grace == 0 {
		opts.Grace = DefaultGrace
	}
	info := m.Info()
	if tab == nil || inner == nil || opts.Patience < 0 || opts.Grace < 0 || opts.LatchOffset%8 != 0 || opts.LatchOffset+8 > info.SliceSize {
		return nil, fmt.Errorf("cider: local WC latch at %d of a %d-byte slice, patience %v: %w", opts.LatchOffset, info.SliceSize, opts.Patience, farmem.ErrInvalid)
	}
	return &LocalWC{inner: inner, tab: tab, m: m, latch: info.Slice.Add(opts.LatchOffset), patience: opts.Patience, grace: opts.Grace}, nil
}

// Inner returns the wrapped synchronizer.
func (l *LocalWC) Inner() ptrsync.Synchronizer { return l.inner }

// LastCombined reports whether the last update was a follower that returned Combined (its
// wrapped synchronizer's description of its last operation is then of an earlier one).
func (l *LocalWC) LastCombined() bool { return l.lastCombined }

// LocalStats returns the local combining counts so far.
func (l *LocalWC) LocalStats() LocalStats { return l.stats }

// LockSize is the wrapped synchronizer's.
func (l *LocalWC) LockSize() int { return l.inner.LockSize() }

// Plan registers an update as a leader or a follower (see LocalWC) and returns the wrapped
// synchronizer's plan, with DeferWrite for a follower.
func (l *LocalWC) Plan(kind ptrsync.Kind, key uint64) ptrsync.Plan {
	if l.lead != nil && !l.published {
		// The previous update led and never finished a Commit (its key was missing, say):
		// its followers commit themselves.
		_ = l.publish(context.Background(), false)
	}
	l.lead, l.follow, l.published, l.lastCombined = nil, nil, false, false
	p := l.inner.Plan(kind, key)
	if kind != ptrsync.Update {
		return p
	}
	t := l.tab
	t.mu.Lock()
	if e := t.open[key]; e != nil && e.gathering {
		e.followers++
		l.follow = e
		t.mu.Unlock()
		l.stats.Followers++
		p.DeferWrite = true
		return p
	}
	t.seq++
	e := &localEntry{key: key, seq: t.seq, latch: l.latch, gathering: true}
	t.open[key] = e
	t.mu.Unlock()
	l.lead = e
	l.stats.Leaders++
	return p
}

// Commit commits a leader through the wrapped synchronizer and publishes its first outcome; a
// follower waits for its leader's outcome (see LocalWC).
func (l *LocalWC) Commit(ctx context.Context, t ptrsync.Target) (ptrsync.Result, error) {
	if e := l.follow; e != nil {
		l.follow = nil
		// The latch holds the sequence number of the leader's latest published entry. A
		// leader still gathering gets a grace; one that has begun committing, the patience.
		done, err := l.await(ctx, e, l.grace)
		if err == nil && !done {
			l.tab.mu.Lock()
			committing := !e.gathering
			l.tab.mu.Unlock()
			if committing {
				done, err = l.await(ctx, e, l.patience)
			}
		}
		if err != nil {
			return ptrsync.Result{}, err
		}
		if done {
			l.tab.mu.Lock()
			ok := e.committed
			l.tab.mu.Unlock()
			if ok {
				l.stats.Combined++
				l.lastCombined = true
				return ptrsync.Result{Outcome: ptrsync.Combined}, nil
			}
		}
		return l.inner.Commit(ctx, t)
	}
	if l.lead == nil || l.published {
		return l.inner.Commit(ctx, t)
	}
	l.close()
	res, err := l.inner.Commit(ctx, t)
	if err != nil || res.Outcome != ptrsync.Retry {
		if werr := l.publish(ctx, err == nil); werr != nil && err == nil {
			err = werr
		}
	}
	return res, err
}

// await waits at most d for e's leader to publish; it reports whether it did.
func (l *LocalWC) await(ctx context.Context, e *localEntry, d time.Duration) (bool, error) {
	wctx, cancel := l.m.Runtime().WithTimeout(ctx, d)
	defer cancel()
	_, err := l.m.Wait(wctx, e.latch, func(w uint64) bool { return w >= e.seq })
	if err == nil {
		return true, nil
	}
	if ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
		return false, fmt.Errorf("cider: local WC wait: %w", err)
	}
	return false, nil
}

// close ends the leader's gathering: later updates of its key lead or follow another.
func (l *LocalWC) close() {
	e := l.lead
	l.tab.mu.Lock()
	defer l.tab.mu.Unlock()
	e.gathering = false
	if l.tab.open[e.key] == e {
		delete(l.tab.open, e.key)
	}
}

// publish closes the leader's gathering and, if it has followers, records whether its update
// took effect and writes its sequence number into its latch word, waking them.
func (l *LocalWC) publish(ctx context.Context, ok bool) error {
	l.close()
	l.published = true
	e := l.lead
	l.tab.mu.Lock()
	e.committed = ok
	followers := e.followers
	l.tab.mu.Unlock()
	if followers == 0 {
		return nil
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], e.seq)
	return l.m.Write(ctx, e.latch, b[:])
}
