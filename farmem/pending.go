package farmem

import (
	"context"
	"fmt"
	"sync/atomic"

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
type Pending struct {
	b        *Batch
	signaled int
	done     atomic.Int64
	opDone   []atomic.Uint32  // 0 pending, 1 being completed, 2 done
	one      [1]atomic.Uint32 // opDone of a one-op batch, in the same allocation
	park     kitlink.Parker
	err      atomic.Pointer[error]
	rt       Runtime                          // runs the Then hook; nil on a batch refused at Post
	then     atomic.Pointer[func(p *Pending)] // the hook Then registered
	fired    atomic.Bool                      // the hook was started
}

func init() {
	kitlink.Set(kitlink.Funcs[Op, Batch, Pending]{
		SetResult: func(o *Op, val uint64, err error) { o.val, o.err = val, err },
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
		Reject:   (*Pending).reject,
		Batch:    func(p *Pending) *Batch { return p.b },
		Signaled: func(p *Pending) int { return p.signaled },
		Done:     (*Pending).doneCount,
		Err:      (*Pending).firstErr,
	})
}

func newPending(b *Batch, park kitlink.Parker) *Pending {
	p := new(Pending)
	initPending(p, b, park)
	return p
}

// initPending sets up a zero Pending p for batch b.
func initPending(p *Pending, b *Batch, park kitlink.Parker) {
	p.b, p.park = b, park
	if len(b.Ops) == 1 {
		p.opDone = p.one[:]
	} else {
		p.opDone = make([]atomic.Uint32, len(b.Ops))
	}
	for i := range b.Ops {
		if !b.Ops[i].Unsignaled {
			p.signaled++
		}
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
	if p.done.Add(1) == int64(p.signaled) {
		p.fire()
	}
	if p.park != nil {
		p.park.Unpark()
	}
}

// reject fails every op not yet done, and the Pending itself even with no ops, with err.
func (p *Pending) reject(err error) {
	p.err.CompareAndSwap(nil, &err)
	for i := range p.b.Ops {
		if p.opDone[i].Load() == 0 {
			p.complete(i, 0, err)
		}
	}
}

func (p *Pending) doneCount() int { return int(p.done.Load()) }

func (p *Pending) firstErr() error {
	if e := p.err.Load(); e != nil {
		return *e
	}
	return nil
}

// OpDone reports whether op i is done; its result ([Batch.Result]) may be read once it is.
func (p *Pending) OpDone(i int) bool { return p.opDone[i].Load() == 2 }

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
