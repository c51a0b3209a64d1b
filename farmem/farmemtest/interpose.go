package farmemtest

import (
	"context"

	"github.com/farmem/farmem/farmem"
)

// Verb is one verb a client issued, as an [Interposer] reports it: a single verb as a batch of
// one op (a Wait as one OpRead of its word), a Post or Do as its batch. Hooks may read the ops
// and, after a verb, change the bytes Read ops returned; they must not reuse the batch.
type Verb struct {
	Batch *farmem.Batch
	// Single marks a single verb (Read, Write, an atomic or a Wait), Posted a Post (its After
	// hook never runs: it completes later), Waited a Wait.
	Single, Posted, Waited bool
}

// Op returns the verb's only op, or its first.
func (v Verb) Op() farmem.Op { return v.Batch.Ops[0] }

// Interposer is a farmem.Memory that runs test code around the verbs of the Memory it wraps,
// so that a test can pause a client, crash it (through the fabric's fault injection) or change
// what it read, at a verb it recognises by kind, address and value, with no hook in the code
// under test. It adds no verb and no round trip; with both hooks nil it is the wrapped Memory.
// Call and Send (one-way messages) are no verbs: they pass through to the wrapped Memory
// unhooked.
// Like that Memory it belongs to one goroutine, and its hooks run on it.
type Interposer struct {
	farmem.Memory
	// Before, if set, runs before each verb is forwarded.
	Before func(ctx context.Context, v Verb)
	// After, if set, runs once a verb has completed (Post excepted), with its error and, for an
	// atomic or a Wait, the word it returned.
	After func(ctx context.Context, v Verb, word uint64, err error)
}

func (p *Interposer) one(op farmem.Op) Verb {
	return Verb{Batch: &farmem.Batch{Ops: []farmem.Op{op}}, Single: true}
}

func (p *Interposer) before(ctx context.Context, v Verb) {
	if p.Before != nil {
		p.Before(ctx, v)
	}
}

func (p *Interposer) after(ctx context.Context, v Verb, w uint64, err error) {
	if p.After != nil {
		p.After(ctx, v, w, err)
	}
}

// Read forwards a Read.
func (p *Interposer) Read(ctx context.Context, src farmem.Addr, dst []byte) error {
	v := p.one(farmem.Op{Kind: farmem.OpRead, Addr: src, Buf: dst})
	p.before(ctx, v)
	err := p.Memory.Read(ctx, src, dst)
	p.after(ctx, v, 0, err)
	return err
}

// Write forwards a Write.
func (p *Interposer) Write(ctx context.Context, dst farmem.Addr, src []byte) error {
	v := p.one(farmem.Op{Kind: farmem.OpWrite, Addr: dst, Buf: src})
	p.before(ctx, v)
	err := p.Memory.Write(ctx, dst, src)
	p.after(ctx, v, 0, err)
	return err
}

// CAS forwards a CAS.
func (p *Interposer) CAS(ctx context.Context, a farmem.Addr, old, new uint64) (uint64, error) {
	v := p.one(farmem.Op{Kind: farmem.OpCAS, Addr: a, Cmp: old, Swap: new})
	p.before(ctx, v)
	w, err := p.Memory.CAS(ctx, a, old, new)
	p.after(ctx, v, w, err)
	return w, err
}

// FAA forwards a FAA.
func (p *Interposer) FAA(ctx context.Context, a farmem.Addr, delta uint64) (uint64, error) {
	v := p.one(farmem.Op{Kind: farmem.OpFAA, Addr: a, Swap: delta})
	p.before(ctx, v)
	w, err := p.Memory.FAA(ctx, a, delta)
	p.after(ctx, v, w, err)
	return w, err
}

// MaskedCAS forwards a MaskedCAS.
func (p *Interposer) MaskedCAS(ctx context.Context, a farmem.Addr, cmp, cmpMask, swap, swapMask uint64) (uint64, error) {
	v := p.one(farmem.Op{Kind: farmem.OpMaskedCAS, Addr: a, Cmp: cmp, CmpMask: cmpMask, Swap: swap, SwapMask: swapMask})
	p.before(ctx, v)
	w, err := p.Memory.MaskedCAS(ctx, a, cmp, cmpMask, swap, swapMask)
	p.after(ctx, v, w, err)
	return w, err
}

// Post forwards a Post (only Before runs).
func (p *Interposer) Post(ctx context.Context, b *farmem.Batch) *farmem.Pending {
	p.before(ctx, Verb{Batch: b, Posted: true})
	return p.Memory.Post(ctx, b)
}

// Do forwards a Do.
func (p *Interposer) Do(ctx context.Context, b *farmem.Batch) error {
	v := Verb{Batch: b}
	p.before(ctx, v)
	err := p.Memory.Do(ctx, b)
	p.after(ctx, v, 0, err)
	return err
}

// Wait forwards a Wait.
func (p *Interposer) Wait(ctx context.Context, a farmem.Addr, until func(uint64) bool) (uint64, error) {
	v := p.one(farmem.Op{Kind: farmem.OpRead, Addr: a})
	v.Waited = true
	p.before(ctx, v)
	w, err := p.Memory.Wait(ctx, a, until)
	p.after(ctx, v, w, err)
	return w, err
}
