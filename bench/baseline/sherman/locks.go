package sherman

import (
	"context"
	"sync"

	"github.com/farmem/farmem/farmem"
)

// MaxHandovers is how many times in a row a compute node's lock table hands a node's lock to
// a local waiter before it releases the remote lock (Sherman's bound, so other compute nodes
// are not starved).
const MaxHandovers = 4

// LockTable is one compute node's local lock table, Sherman's hierarchical lock: a client that
// wants a node's lock while another client of its compute node holds or awaits it queues
// locally instead of retrying the remote CAS, and the holder hands the lock over on release
// without releasing the remote lock (up to MaxHandovers times in a row), so the successor
// skips the lock CAS: a handed-over write costs 2 round trips (the read; the write). Waiters
// wait on a latch word in their own slice of the compute node's region (Memory.Wait), which
// the holder writes unsignaled once its own write to the node has completed. A Go mutex guards
// the table's map alone, never held across a verb or a Wait.
type LockTable struct {
	mu sync.Mutex
	m  map[farmem.Addr]*lockEntry
}

type lockEntry struct {
	waiters   []waiter
	handovers int
}

type waiter struct {
	latch farmem.Addr
	seq   uint64
}

// NewLockTable returns an empty table for one compute node.
func NewLockTable() *LockTable { return &LockTable{m: map[farmem.Addr]*lockEntry{}} }

// Latch word values: seq<<1 | handed (1: the remote lock is held for the waiter; 0: the waiter
// takes it by CAS itself).
const latchHanded = 1

// acquire queues behind a local holder of a's lock if there is one and reports whether the
// lock was handed over (the remote lock held for the caller); false means the caller is the
// local owner and takes the remote lock itself.
func (t *Tree) localAcquire(ctx context.Context, a farmem.Addr) (bool, error) {
	lt := t.locks
	lt.mu.Lock()
	e := lt.m[a]
	if e == nil {
		lt.m[a] = &lockEntry{}
		lt.mu.Unlock()
		return false, nil
	}
	t.seq++
	seq := t.seq
	e.waiters = append(e.waiters, waiter{latch: t.latch, seq: seq})
	lt.mu.Unlock()
	t.st.LocalWaits++
	w, err := t.m.Wait(ctx, t.latch, func(w uint64) bool { return w>>1 == seq })
	if err != nil {
		return false, err
	}
	if w&latchHanded != 0 {
		t.st.Handovers++
		return true, nil
	}
	return false, nil
}

// localRelease picks the successor of the caller's hold on a's lock: a local waiter to hand
// the remote lock to (remote false: keep the remote lock), or none (remote true: release the
// remote lock; a waiter, if any, then takes it by CAS itself). ok is false if there is no
// waiter.
func (t *Tree) localRelease(a farmem.Addr) (next waiter, ok, remote bool) {
	lt := t.locks
	lt.mu.Lock()
	defer lt.mu.Unlock()
	e := lt.m[a]
	if e == nil || len(e.waiters) == 0 {
		delete(lt.m, a)
		return waiter{}, false, true
	}
	next, e.waiters = e.waiters[0], e.waiters[1:]
	if e.handovers < MaxHandovers {
		e.handovers++
		return next, true, false
	}
	e.handovers = 0
	return next, true, true
}

// release ends the caller's hold on a's lock after the writes in b (which may be empty): with
// the remote release CAS in the same ordered batch unless the lock is handed to a local
// waiter, then the waiter's latch. wait says whether to wait for b (a write's completion);
// otherwise everything is posted unsignaled.
func (t *Tree) release(ctx context.Context, a farmem.Addr, b *farmem.Batch, wait bool) error {
	var next waiter
	ok, remote := false, true
	if t.locks != nil {
		next, ok, remote = t.localRelease(a)
	}
	if remote {
		i := b.CAS(a+offLock, t.me, 0)
		if !wait {
			b.Unsignaled(i)
		}
	}
	if len(b.Ops) > 0 {
		if wait {
			if err := t.m.Do(ctx, b); err != nil {
				return err
			}
		} else {
			for i := range b.Ops {
				b.Unsignaled(i)
			}
			t.m.Post(ctx, b)
		}
	}
	if ok {
		word := next.seq << 1
		if !remote {
			word |= latchHanded
		}
		var lb farmem.Batch
		lb.Unsignaled(lb.Write(next.latch, le.AppendUint64(nil, word)))
		t.m.Post(ctx, &lb)
	}
	return nil
}
