package farmem

import (
	"context"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/farmem/farmem/farmem/internal/kitlink"
)

// Pending is the handle of a posted batch. Its ops complete independently; each has its own
// result and error, read with [Batch.Result] once [Pending.OpDone] reports the op done. A
// Pending is waited on by one goroutine. Transports build and complete Pendings with the kit
// in farmem/transport.
//
// Besides Wait, which counts ops, [Pending.WaitNodes] waits for a quorum of nodes, and
// [Pending.Then] registers a hook that runs once the whole batch is done (see quorum.go's
// methods for their exact rules).
//
// A Pending is valid until its batch is posted again: a transport may hand the same Pending
// out for the batch's next post (the rdma transport's tcp path does, so that a post allocates
// nothing), once everything of the previous post is over and no hook was registered on it.
type Pending struct {
	b        *Batch
	signaled int
	// done counts completed signaled ops from base on: a reused Pending counts on from where
	// its previous post ended, so that starting a post needs no atomic store.
	base     int64
	done     atomic.Int64
	opDone   []atomic.Uint32  // 0 pending, 1 being completed, 2 done
	one      [1]atomic.Uint32 // opDone of a one-op batch, in the same allocation
	park     kitlink.Parker
	err      atomic.Pointer[error]
	rt       Runtime                          // runs the Then hook; nil on a batch refused at Post
	then     atomic.Pointer[func(p *Pending)] // the hook Then registered
	fired    atomic.Bool                      // the hook was started
	rejected bool                             // refused at Post (reject): never reused
	// lone: the batch is one signaled op, whose being done is done's count (isDone), so that
	// completing it by completeOwned takes one atomic addition.
	lone bool
}

func init() {
	kitlink.Set(kitlink.Funcs[Op, Batch, Pending]{
		ValOffset: unsafe.Offsetof(Op{}.val),
		ErrOffset: unsafe.Offsetof(Op{}.err),
		NewPending: func(b *Batch, park kitlink.Parker, rt any) *Pending {
			p := newPending(b, park)
			p.rt, _ = rt.(Runtime)
			return p
		},
		InitPending: func(p *Pending, b *Batch, park kitlink.Parker, rt any) {
			initPending(p, b, park)
			p.rt, _ = rt.(Runtime)
		},
		Complete: (*Pending).complete,
		Owned:    (*Pending).completeOwned,
		Reject:   (*Pending).reject,
		Batch:    func(p *Pending) *Batch { return p.b },
		Signaled: func(p *Pending) int { return p.signaled },
		Done:     (*Pending).doneCount,
		Err:      (*Pending).firstErr,
		Reusable: reusable,
		Keep: func(b *Batch, p *Pending) {
			if b.pend != p {
				b.pend = p
			}
		},
	})
}

// reusable returns the parker of b's last Pending if that Pending may be set up again for b's
// next post (by InitPending, with that same parker): it was made for b itself (not for a batch
// b was copied from), every signaled op of its post is done, which also means no completion of
// it reads or writes any of its plain fields any more (complete reads them before it counts the
// op done), and no completion hook was registered on it (the hook holds the Pending and runs
// after the last completion). It makes no atomic read-modify-write.
func reusable(b *Batch) kitlink.Parker {
	p := b.pend
	if p == nil || p.b != b || p.park == nil || p.then.Load() != nil {
		return nil
	}
	if p.done.Load()-p.base != int64(p.signaled) || p.rejected {
		return nil
	}
	return p.park
}

func newPending(b *Batch, park kitlink.Parker) *Pending {
	p := new(Pending)
	initPending(p, b, park)
	return p
}

// initPending sets up p for batch b: a zero Pending, or one that reusable returned for b.
// Reused, it leaves alone what a completion of the previous post may still touch after
// counting its op done (the hook fields, which are unset, and the parker's own state) and
// restarts done's count from its current value instead of storing zero.
func initPending(p *Pending, b *Batch, park kitlink.Parker) {
	if p.b != b {
		p.b = b
	}
	p.park = park
	p.base = p.done.Load()
	switch {
	case len(b.Ops) == 1:
		p.opDone = p.one[:]
		clear(p.opDone)
	case cap(p.opDone) >= len(b.Ops) && len(p.opDone) > 1:
		p.opDone = p.opDone[:len(b.Ops)]
		clear(p.opDone)
	default:
		p.opDone = make([]atomic.Uint32, len(b.Ops))
	}
	p.signaled = 0
	for i := range b.Ops {
		if !b.Ops[i].Unsignaled {
			p.signaled++
		}
	}
	p.lone = len(b.Ops) == 1 && p.signaled == 1
	if p.err.Load() != nil {
		p.err.Store(nil)
	}
}

// complete records op i's outcome and wakes the waiter; the first completion of an op wins.
func (p *Pending) complete(i int, val uint64, err error) {
	op := &p.b.Ops[i]
	if !p.opDone[i].CompareAndSwap(0, 1) {
		return
	}
	op.val, op.err = val, err
	p.opDone[i].Store(2)
	if op.Unsignaled {
		return
	}
	if err != nil {
		e := err // (only a failure's error escapes to the heap)
		p.err.CompareAndSwap(nil, &e)
	}
	// Once the last op is counted done the batch's next post may set p up again (reusable):
	// what is read of p's plain fields is read before.
	park, last := p.park, p.base+int64(p.signaled)
	if p.done.Add(1) == last {
		p.fire()
	}
	if park != nil {
		park.Unpark()
	}
}

// completeOwned is complete for a transport that completes each op of a post exactly once
// (its own bookkeeping rules out a second completion, a timeout racing an answer, say): it
// skips the first-wins claim, and for a batch of one signaled op records nothing but the
// count, so that completing a lone op takes one atomic addition instead of three.
func (p *Pending) completeOwned(i int, val uint64, err error) {
	op := &p.b.Ops[i]
	op.val, op.err = val, err
	if op.Unsignaled {
		p.opDone[i].Store(2)
		return
	}
	if !p.lone {
		p.opDone[i].Store(2)
	}
	if err != nil {
		e := err
		p.err.CompareAndSwap(nil, &e)
	}
	park, last := p.park, p.base+int64(p.signaled)
	if p.done.Add(1) == last {
		p.fire()
	}
	if park != nil {
		park.Unpark()
	}
}

// isDone reports whether op i is done.
func (p *Pending) isDone(i int) bool {
	if p.lone {
		return p.done.Load() != p.base
	}
	return p.opDone[i].Load() == 2
}

// reject fails every op not yet done, and the Pending itself even with no ops, with err. A
// rejected Pending is never reused.
func (p *Pending) reject(err error) {
	p.rejected = true
	p.err.CompareAndSwap(nil, &err)
	for i := range p.b.Ops {
		if !p.isDone(i) {
			p.complete(i, 0, err)
		}
	}
}

func (p *Pending) doneCount() int { return int(p.done.Load() - p.base) }

func (p *Pending) firstErr() error {
	if e := p.err.Load(); e != nil {
		return *e
	}
	return nil
}

// OpDone reports whether op i is done; its result ([Batch.Result]) may be read once it is.
func (p *Pending) OpDone(i int) bool { return p.isDone(i) }

// Wait blocks until need signaled ops are done (all of them if need <= 0 or need exceeds the
// number signaled), or ctx ends. It returns ctx's error in the latter case and nil otherwise;
// each op's own outcome is in [Batch.Result]. Ops still outstanding when Wait returns keep
// running; the batch stays owned by the transport until they are done.
func (p *Pending) Wait(ctx context.Context, need int) error {
	if need <= 0 || need > p.signaled {
		need = p.signaled
	}
	for p.doneCount() < need {
		if p.park == nil {
			return fmt.Errorf("farmem: unfinished batch has no parker (a transport bug): %w", ErrInvalid)
		}
		if err := p.park.Park(ctx); err != nil {
			if p.doneCount() >= need {
				return nil
			}
			return err
		}
	}
	return nil
}
