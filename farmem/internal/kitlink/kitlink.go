// Package kitlink carries the few operations on unexported state of package farmem that the
// transport kit (farmem/transport) needs and a user of farmem must not reach: recording an op's
// outcome and driving a Pending. Package farmem fills the table in its init; farmem/transport
// reads it once, at its own initialization, which Go orders after farmem's. The table is typed
// by farmem's own types through type parameters, since this package cannot import farmem.
package kitlink

import "context"

// Parker is the method set of farmem/transport's Parker, which a farmem.Pending parks on.
type Parker interface {
	Park(ctx context.Context) error
	Unpark()
}

// Funcs is the table package farmem fills: Op, Batch and Pending are farmem's types.
type Funcs[Op, Batch, Pending any] struct {
	// ValOffset and ErrOffset are the offsets within an Op of its outcome, a uint64 and an
	// error, which the kit records with stores through unsafe pointers: a call through a
	// function value per op cost a batch run inline more than the rest of recording it.
	ValOffset, ErrOffset uintptr
	// NewPending's rt is the farmem.Runtime that runs the Pending's completion hook, or nil.
	NewPending func(b *Batch, park Parker, rt any) *Pending
	// InitPending is NewPending for a zero Pending the caller allocated (inside a larger
	// struct of its own, to save an allocation).
	InitPending func(p *Pending, b *Batch, park Parker, rt any)
	Complete    func(p *Pending, i int, val uint64, err error)
	// Owned is Complete for a transport that completes each op of a post exactly once.
	Owned    func(p *Pending, i int, val uint64, err error)
	Reject   func(p *Pending, err error)
	Batch    func(p *Pending) *Batch
	Signaled func(p *Pending) int
	Done     func(p *Pending) int
	Err      func(p *Pending) error
	// Reusable returns the parker of the batch's last Pending if that Pending may be set up
	// again, with InitPending and the same parker, for the batch's next post; nil otherwise.
	Reusable func(b *Batch) Parker
	// Keep records p as the batch's Pending, for Reusable to find at its next post.
	Keep func(b *Batch, p *Pending)
}

var funcs any

// Set records package farmem's table.
func Set[Op, Batch, Pending any](f Funcs[Op, Batch, Pending]) { funcs = f }

// Get returns the table package farmem recorded (all nil before farmem's init ran, which
// importing farmem rules out).
func Get[Op, Batch, Pending any]() Funcs[Op, Batch, Pending] {
	f, _ := funcs.(Funcs[Op, Batch, Pending])
	return f
}
