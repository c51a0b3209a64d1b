package transport

import (
	"context"
	"unsafe"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/internal/kitlink"
)

// link is package farmem's table of the operations on its unexported state the kit needs.
var link = kitlink.Get[farmem.Op, farmem.Batch, farmem.Pending]()

// Parker blocks the one goroutine waiting on a farmem.Pending until the transport reports
// progress. It is a binary semaphore: an Unpark before Park is remembered. Real transports use
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

// Completer is the transport's half of a farmem.Pending: it reports each op's outcome.
type Completer struct{ p *farmem.Pending }

// NewPending returns the Pending of batch b and the Completer its transport reports through,
// with no runtime: its completion hook (farmem.Pending.Then) runs in the caller of Then, which
// suits only a batch done before it is handed out (a refused one). Post uses [NewPendingOn].
// park may be nil only if every signaled op is completed before the Pending is handed out.
func NewPending(b *farmem.Batch, park Parker) (*farmem.Pending, Completer) {
	return NewPendingOn(b, park, nil)
}

// NewPendingOn is NewPending for a batch posted by a client whose runtime is rt: the Pending's
// completion hook runs in a goroutine rt.Go starts. It allocates nothing more than NewPending.
func NewPendingOn(b *farmem.Batch, park Parker, rt farmem.Runtime) (*farmem.Pending, Completer) {
	var kp kitlink.Parker
	if park != nil {
		kp = park
	}
	var r any
	if rt != nil {
		r = rt
	}
	p := link.NewPending(b, kp, r)
	return p, Completer{p}
}

// InitPendingOn is NewPendingOn for a Pending the transport allocated itself, zero, as part of
// a larger struct (its parker and sink, say), so that a post makes one allocation instead of
// two. p must not be in use and must not move (a field of a heap object).
func InitPendingOn(p *farmem.Pending, b *farmem.Batch, park Parker, rt farmem.Runtime) Completer {
	var kp kitlink.Parker
	if park != nil {
		kp = park
	}
	var r any
	if rt != nil {
		r = rt
	}
	link.InitPending(p, b, kp, r)
	return Completer{p}
}

// Complete records op i's outcome and wakes the waiter. The first completion of an op wins;
// later ones (a timeout racing a late answer) are ignored. It is safe for concurrent use.
func (c Completer) Complete(i int, val uint64, err error) { link.Complete(c.p, i, val, err) }

// CompleteOwned is Complete for a transport whose own bookkeeping completes each op of a post
// exactly once (rdma's tcp queue pairs release a request's slot once, under a lock, and
// complete its ops from there): it skips the first-completion-wins claim, and completes a
// batch of one signaled op with one atomic addition instead of three. Completing an op twice
// this way is a transport bug the Pending does not catch. It is safe for concurrent use on
// distinct ops.
func (c Completer) CompleteOwned(i int, val uint64, err error) { link.Owned(c.p, i, val, err) }

// Fail completes every op not yet done with err.
func (c Completer) Fail(err error) {
	for i := range link.Batch(c.p).Ops {
		if !c.p.OpDone(i) {
			link.Complete(c.p, i, 0, err)
		}
	}
}

// Reject fails the whole batch with err before anything of it ran: every op, and the Pending's
// own error even when the batch has no ops.
func (c Completer) Reject(err error) { link.Reject(c.p, err) }

// Pending returns the handle this Completer reports to.
func (c Completer) Pending() *farmem.Pending { return c.p }

// Batch returns the posted batch; its ops receive the results.
func (c Completer) Batch() *farmem.Batch { return link.Batch(c.p) }

// valOff and errOff are the offsets of an op's outcome within farmem.Op, as package farmem gave
// them.
var valOff, errOff = link.ValOffset, link.ErrOffset

// SetResult records op's outcome without a Pending, for a transport that runs a whole batch in
// the caller of Do, where a Pending would only be allocated and dropped. It is two stores, no
// call: the words are reached at the offsets package farmem gave (see kitlink.Funcs).
func SetResult(op *farmem.Op, val uint64, err error) {
	p := unsafe.Pointer(op)
	*(*uint64)(unsafe.Add(p, valOff)) = val
	*(*error)(unsafe.Add(p, errOff)) = err
}

// Signaled is the number of p's signaled ops, the ones Wait counts.
func Signaled(p *farmem.Pending) int { return link.Signaled(p) }

// Done is the number of p's signaled ops completed so far.
func Done(p *farmem.Pending) int { return link.Done(p) }

// Err returns the first error reported by a completed signaled op of p, or nil.
func Err(p *farmem.Pending) error { return link.Err(p) }

// Finish waits for every signaled op of p and returns ctx's error, or else the first op error:
// what Memory.Do returns once it has posted.
func Finish(ctx context.Context, p *farmem.Pending) error {
	if err := p.Wait(ctx, 0); err != nil {
		return err
	}
	return link.Err(p)
}

// Recycled returns the Parker of the Pending of b's last post when that Pending may be set up
// again for b's next post, and nil otherwise. A transport that allocates a Pending inside a
// struct of its own, with the struct (or a part of it) as the parker, asks it at Post: when it
// returns that parker, the transport calls InitPendingOn again on the same Pending, with the
// same parker, instead of allocating, and the batch's poster gets the same *farmem.Pending back
// (a Pending is valid until its batch is posted again). It returns one only if the Pending was
// recorded with [KeepPending] for b itself (a copy of a batch shares nothing), every signaled op
// of its post is done, and no completion hook was registered on it; it makes no atomic
// read-modify-write. The transport must then complete each op of a post at most once, and read
// nothing of the Pending, its parker's plain fields or its sink after an op's completion.
func Recycled(b *farmem.Batch) Parker {
	if kp := link.Reusable(b); kp != nil {
		if p, ok := kp.(Parker); ok {
			return p
		}
	}
	return nil
}

// KeepPending records p, set up for b by InitPendingOn, as b's Pending, for [Recycled] to find
// at b's next post. It writes a field of b: call it while b is the poster's (in Post).
func KeepPending(b *farmem.Batch, p *farmem.Pending) { link.Keep(b, p) }
