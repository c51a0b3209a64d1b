package maxreg

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/farmem/farmem/farmem"
)

// Refresher writes registers' in-place copies (and, for Replicated handles, VERIFIED marks) in
// the background for the handles that name it in their options, on a client of its own: one goroutine at a time, started with the
// client's Runtime.Go when work arrives and ending when none is left. It keeps at most one
// pending copy per register, the one with the largest tag (a newer request replaces an older
// one, and an older one is dropped), so its memory is bounded by the registers it serves. A
// copy it writes late, after a newer one, only makes the in-place copy stale, which readers
// detect (two round trips) and repair. Its lock is held only around its queue, never across a
// verb. Safe for concurrent use by any number of handles.
type Refresher struct {
	m  farmem.Memory
	rt farmem.Runtime

	mu      sync.Mutex
	pending map[farmem.Addr]refreshJob
	order   []farmem.Addr // FIFO of registers with a pending copy, so runs are deterministic
	marks   []markJob     // VERIFIED marks of replicated registers, FIFO
	running bool
	closed  bool

	written, failed, dropped atomic.Uint64
}

// markJob is a CAS of one metadata word per replica from old to new.
type markJob struct {
	words    []farmem.Addr
	old, new uint64
}

type refreshJob struct {
	tag Tag
	rec []byte
}

// RefresherStats are a Refresher's counters: copies written, copies whose write failed, and
// requests dropped because a larger tag for the same register was already pending.
type RefresherStats struct {
	Written, Failed, Dropped uint64
}

// NewRefresher returns a Refresher that writes with m, a client no one else uses.
func NewRefresher(m farmem.Memory) *Refresher {
	return &Refresher{m: m, rt: m.Runtime(), pending: make(map[farmem.Addr]refreshJob)}
}

// Stats returns the Refresher's counters.
func (f *Refresher) Stats() RefresherStats {
	return RefresherStats{Written: f.written.Load(), Failed: f.failed.Load(), Dropped: f.dropped.Load()}
}

// Idle reports whether no copy is pending or being written: once it is, every copy asked for
// has landed or failed, and the Refresher's client may be closed without cutting one short.
func (f *Refresher) Idle() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.running && len(f.order) == 0 && len(f.marks) == 0
}

// Close stops the Refresher: pending copies are dropped, and the copy being written, if any,
// finishes. It does not close the Refresher's client. Idempotent.
func (f *Refresher) Close() error {
	f.mu.Lock()
	f.closed = true
	for _, a := range f.order {
		delete(f.pending, a)
		f.dropped.Add(1)
	}
	f.order = nil
	f.dropped.Add(uint64(len(f.marks)))
	f.marks = nil
	f.mu.Unlock()
	return nil
}

// enqueueMark asks for words (one per replica) to be CASed from old to new.
func (f *Refresher) enqueueMark(words []farmem.Addr, old, new uint64) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		f.dropped.Add(1)
		return
	}
	f.marks = append(f.marks, markJob{words: words, old: old, new: new})
	start := !f.running
	f.running = true
	f.mu.Unlock()
	if start {
		f.rt.Go(f.run)
	}
}

func (f *Refresher) enqueue(in farmem.Addr, t Tag, rec []byte) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		f.dropped.Add(1)
		return
	}
	if j, ok := f.pending[in]; ok {
		f.dropped.Add(1)
		if j.tag >= t {
			f.mu.Unlock()
			return
		}
	} else {
		f.order = append(f.order, in)
	}
	f.pending[in] = refreshJob{tag: t, rec: rec}
	start := !f.running
	f.running = true
	f.mu.Unlock()
	if start {
		f.rt.Go(f.run)
	}
}

func (f *Refresher) run() {
	ctx := context.Background()
	for {
		f.mu.Lock()
		if len(f.marks) > 0 {
			j := f.marks[0]
			f.marks = f.marks[1:]
			f.mu.Unlock()
			b := new(farmem.Batch)
			for _, w := range j.words {
				b.CAS(w, j.old, j.new)
			}
			// Every replica's CAS is waited for, a down one's until the down timeout: this
			// goroutine is the background, and the batch's buffers must outlive the wait.
			if err := f.m.Post(ctx, b).Wait(ctx, len(b.Ops)); err != nil {
				f.failed.Add(1)
			} else {
				f.written.Add(1)
			}
			continue
		}
		if len(f.order) == 0 {
			f.running = false
			f.mu.Unlock()
			return
		}
		in := f.order[0]
		f.order = f.order[1:]
		j := f.pending[in]
		delete(f.pending, in)
		f.mu.Unlock()
		if err := f.m.Write(ctx, in, j.rec); err != nil {
			f.failed.Add(1)
		} else {
			f.written.Add(1)
		}
	}
}
