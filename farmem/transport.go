package farmem

import (
	"context"
	"fmt"
)

// This file holds what every transport does the same way, so the checks and the single-verb
// methods cannot drift apart between transports.

// SingleOps supplies a transport client's Read, Write, CAS, FAA and MaskedCAS: embed it and
// set Run to the client's runner of one-op batches.
type SingleOps struct {
	// Run executes op as a one-op batch and returns its result and error.
	Run func(ctx context.Context, op Op) (uint64, error)
}

// Read implements Memory.
func (s SingleOps) Read(ctx context.Context, src Addr, dst []byte) error {
	_, err := s.Run(ctx, Op{Kind: OpRead, Addr: src, Buf: dst})
	return err
}

// Write implements Memory.
func (s SingleOps) Write(ctx context.Context, dst Addr, src []byte) error {
	_, err := s.Run(ctx, Op{Kind: OpWrite, Addr: dst, Buf: src})
	return err
}

// CAS implements Memory.
func (s SingleOps) CAS(ctx context.Context, a Addr, old, new uint64) (uint64, error) {
	return s.Run(ctx, Op{Kind: OpCAS, Addr: a, Cmp: old, Swap: new})
}

// FAA implements Memory.
func (s SingleOps) FAA(ctx context.Context, a Addr, delta uint64) (uint64, error) {
	return s.Run(ctx, Op{Kind: OpFAA, Addr: a, Swap: delta})
}

// MaskedCAS implements Memory.
func (s SingleOps) MaskedCAS(ctx context.Context, a Addr, cmp, cmpMask, swap, swapMask uint64) (uint64, error) {
	return s.Run(ctx, Op{Kind: OpMaskedCAS, Addr: a, Cmp: cmp, CmpMask: cmpMask, Swap: swap, SwapMask: swapMask})
}

// Admit makes the checks every transport's Post makes before anything of a batch runs: the
// client is usable (usable is its refusal, nil when it is), the batch's shape ([Batch.Check]),
// and every op against the size of its node ([CheckOps]). It returns the batch to run (an empty
// one for nil) and, when the batch is refused, its finished Pending, for Post to return.
func Admit(b *Batch, usable error, sizeOf func(NodeID) (uint64, error)) (*Batch, *Pending) {
	if b == nil {
		b = &Batch{}
	}
	if usable != nil {
		return b, Rejected(b, usable, nil)
	}
	if err := b.Check(); err != nil {
		return b, Rejected(b, err, nil)
	}
	if errs := CheckOps(b, sizeOf); errs != nil {
		return b, Rejected(b, nil, errs)
	}
	return b, nil
}

// CheckOps validates every op of b against the size of its node, which sizeOf reports (or
// fails for a node it does not know). It returns nil when every op is valid, and otherwise one
// error per op, nil for the valid ones. Call b.Check first.
func CheckOps(b *Batch, sizeOf func(NodeID) (uint64, error)) []error {
	var errs []error
	for i := range b.Ops {
		op := &b.Ops[i]
		size, err := sizeOf(op.Addr.Node())
		if err == nil {
			err = op.Check(size)
		}
		if err != nil {
			if errs == nil {
				errs = make([]error, len(b.Ops))
			}
			errs[i] = err
		}
	}
	return errs
}

// NoSuchNode is the error of an op addressed to a node the fabric does not have.
func NoSuchNode(n NodeID) error {
	return fmt.Errorf("farmem: no node %v: %w", n, ErrOutOfRange)
}

// Rejected returns the finished Pending of a batch refused before anything of it ran. With err
// set, every op fails with err, and so does the Pending even for an empty batch. Otherwise each
// op fails with its entry of errs (as CheckOps returns them), and the ops without one fail with
// ErrAborted: a batch applies whole or not at all.
func Rejected(b *Batch, err error, errs []error) *Pending {
	if b == nil {
		b = &Batch{}
	}
	p, comp := NewPending(b, nil)
	if err != nil {
		comp.Reject(err)
		return p
	}
	for i := range b.Ops {
		if i < len(errs) && errs[i] != nil {
			comp.Complete(i, 0, errs[i])
		} else {
			comp.Complete(i, 0, fmt.Errorf("farmem: %s at %v: %w", b.Ops[i].Kind, b.Ops[i].Addr, ErrAborted))
		}
	}
	return p
}

// CheckWait validates a Wait's arguments for a client of compute node self, whose region is
// size bytes: a condition, and an aligned word of that region.
func CheckWait(a Addr, self NodeID, size uint64, until func(uint64) bool) error {
	off := a.Offset()
	switch {
	case until == nil:
		return fmt.Errorf("farmem: wait at %v: nil condition: %w", a, ErrInvalid)
	case a.Node() != self:
		return fmt.Errorf("farmem: wait at %v from a client of %v: %w", a, self, ErrNotLocal)
	case off&7 != 0:
		return fmt.Errorf("farmem: wait at %v: %w", a, ErrMisaligned)
	case off+8 > size:
		return fmt.Errorf("farmem: wait at %v: %w", a, ErrOutOfRange)
	}
	return nil
}
