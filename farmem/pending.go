package farmem

import (
	"context"
	"fmt"
	"sync/atomic"
)

// Parker blocks the one goroutine waiting on a [Pending] until the transport reports progress.
// It is a binary semaphore: an Unpark before Park is remembered. Real transports use
// [NewChanParker]; a simulator whose goroutines it schedules supplies its own.
type Parker interface {
	// Park blocks until Unpark has been called since the last Park returned, or ctx ends.
	Park(ctx context.Context) error
	// Unpark wakes the parked goroutine, or lets its next Park return at once.
	Unpark()
}

type chanParker chan struct{}

// NewChanParker returns a Parker over a one-slot channel, for transports on the wall clock.
func NewChanParker() Parker { return make(chanParker, 1) }

func (c chanParker) Park(ctx context.Context) error {
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c chanParker) Unpark() {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Pending is the handle of a posted batch. Its ops complete independently; each has its own
// result and error. A Pending is waited on by one goroutine.
type Pending struct {
	b        *Batch
	signaled int
	done     atomic.Int64
	opDone   []atomic.Uint32 // 0 pending, 1 being completed, 2 done
	park     Parker
	err      atomic.Pointer[error]
}

// Completer is the transport's half of a Pending: it reports each op's outcome.
type Completer struct{ p *Pending }

// NewPending returns the Pending of batch b and the Completer its transport reports through.
// park may be nil only if every signaled op is completed before the Pending is handed out.
func NewPending(b *Batch, park Parker) (*Pending, Completer) {
	p := &Pending{b: b, park: park, opDone: make([]atomic.Uint32, len(b.Ops))}
	for i := range b.Ops {
		if !b.Ops[i].Unsignaled {
			p.signaled++
		}
	}
	return p, Completer{p}
}

// Complete records op i's outcome and wakes the waiter. The first completion of an op wins;
// later ones (a timeout racing a late answer) are ignored. It is safe for concurrent use.
func (c Completer) Complete(i int, val uint64, err error) {
	p := c.p
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
		p.err.CompareAndSwap(nil, &err)
	}
	p.done.Add(1)
	if p.park != nil {
		p.park.Unpark()
	}
}

// Fail completes every op not yet done with err.
func (c Completer) Fail(err error) {
	for i := range c.p.b.Ops {
		if c.p.opDone[i].Load() == 0 {
			c.Complete(i, 0, err)
		}
	}
}

// Reject fails the whole batch with err before anything of it ran: every op, and the Pending's
// own error even when the batch has no ops.
func (c Completer) Reject(err error) {
	c.p.err.CompareAndSwap(nil, &err)
	c.Fail(err)
}

// Pending returns the handle this Completer reports to.
func (c Completer) Pending() *Pending { return c.p }

// Batch returns the posted batch; its ops hold the results.
func (p *Pending) Batch() *Batch { return p.b }

// OpDone reports whether op i is done; its [Op.Result] may be read once it is.
func (p *Pending) OpDone(i int) bool { return p.opDone[i].Load() == 2 }

// Signaled is the number of signaled ops, the ones Wait counts.
func (p *Pending) Signaled() int { return p.signaled }

// Done is the number of signaled ops completed so far.
func (p *Pending) Done() int { return int(p.done.Load()) }

// Err returns the first error reported by a completed signaled op, or nil.
func (p *Pending) Err() error {
	if e := p.err.Load(); e != nil {
		return *e
	}
	return nil
}

// Wait blocks until need signaled ops are done (all of them if need <= 0 or need exceeds the
// number signaled), or ctx ends. It returns ctx's error in the latter case and nil otherwise;
// each op's own outcome is in [Op.Result]. Ops still outstanding when Wait returns keep
// running; the batch stays owned by the transport until they are done.
func (p *Pending) Wait(ctx context.Context, need int) error {
	if need <= 0 || need > p.signaled {
		need = p.signaled
	}
	for p.Done() < need {
		if p.park == nil {
			return fmt.Errorf("farmem: unfinished batch has no parker (a transport bug): %w", ErrInvalid)
		}
		if err := p.park.Park(ctx); err != nil {
			if p.Done() >= need {
				return nil
			}
			return err
		}
	}
	return nil
}
