package transport

import (
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// Admit makes the checks every transport's Post makes before anything of a batch runs: the
// client is usable (usable is its refusal, nil when it is), the batch's shape ([CheckBatch]),
// and every op against the size of its node ([CheckOps]). It returns the batch to run (an empty
// one for nil) and, when the batch is refused, its finished Pending, for Post to return.
func Admit(b *farmem.Batch, usable error, sizeOf func(farmem.NodeID) (uint64, error)) (*farmem.Batch, *farmem.Pending) {
	if b == nil {
		b = &farmem.Batch{}
	}
	if usable != nil {
		return b, Rejected(b, usable, nil)
	}
	if err := CheckBatch(b); err != nil {
		return b, Rejected(b, err, nil)
	}
	if errs := CheckOps(b, sizeOf); errs != nil {
		return b, Rejected(b, nil, errs)
	}
	return b, nil
}

// Admissible reports whether Admit would let b run: the fast paths that run a batch in the
// caller, with no Pending, ask it first and fall back to Post otherwise.
func Admissible(b *farmem.Batch, usable error, sizeOf func(farmem.NodeID) (uint64, error)) bool {
	return b != nil && usable == nil && CheckBatch(b) == nil && CheckOps(b, sizeOf) == nil
}

// CheckBatch validates a batch's shape (size limits); transports call it, then [CheckOp] per op.
func CheckBatch(b *farmem.Batch) error {
	if b == nil || len(b.Ops) == 0 {
		return fmt.Errorf("farmem: empty batch: %w", farmem.ErrInvalid)
	}
	if len(b.Ops) > farmem.MaxBatchOps {
		return fmt.Errorf("farmem: batch of %d ops exceeds %d: %w", len(b.Ops), farmem.MaxBatchOps, farmem.ErrInvalid)
	}
	return nil
}

// CheckOps validates every op of b against the size of its node, which sizeOf reports (or
// fails for a node it does not know). It returns nil when every op is valid, and otherwise one
// error per op, nil for the valid ones. Call CheckBatch first.
func CheckOps(b *farmem.Batch, sizeOf func(farmem.NodeID) (uint64, error)) []error {
	var errs []error
	for i := range b.Ops {
		op := &b.Ops[i]
		size, err := sizeOf(op.Addr.Node())
		if err == nil {
			err = CheckOp(op, size)
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

// IsAtomic reports whether k is an 8-byte atomic.
func IsAtomic(k farmem.OpKind) bool {
	return k == farmem.OpCAS || k == farmem.OpFAA || k == farmem.OpMaskedCAS
}

// OpLen is the number of bytes op touches: its buffer for Read and Write, 8 for atomics.
func OpLen(op *farmem.Op) uint64 {
	if op.Kind == farmem.OpRead || op.Kind == farmem.OpWrite {
		return uint64(len(op.Buf))
	}
	return 8
}

// CheckOp validates op against a node region of size bytes: kind, alignment of atomics, buffer
// length and bounds. Transports call it before applying anything.
func CheckOp(op *farmem.Op, size uint64) error {
	off := op.Addr.Offset()
	switch op.Kind {
	case farmem.OpRead, farmem.OpWrite:
		if len(op.Buf) > farmem.MaxOpBytes {
			return fmt.Errorf("farmem: %s of %d bytes at %v exceeds %d: %w", op.Kind, len(op.Buf), op.Addr, farmem.MaxOpBytes, farmem.ErrInvalid)
		}
	case farmem.OpCAS, farmem.OpFAA, farmem.OpMaskedCAS:
		if off&7 != 0 {
			return fmt.Errorf("farmem: %s at %v: %w", op.Kind, op.Addr, farmem.ErrMisaligned)
		}
	default:
		return fmt.Errorf("farmem: unknown op kind %d: %w", op.Kind, farmem.ErrInvalid)
	}
	if n := OpLen(op); off >= size || n > size-off {
		return fmt.Errorf("farmem: %s of %d bytes at %v (node size %#x): %w", op.Kind, n, op.Addr, size, farmem.ErrOutOfRange)
	}
	return nil
}

// Apply computes the word an atomic op leaves behind, given the word it found, and reports
// whether the op changed it (false for a CAS whose comparison failed). Every transport applies
// atomics with it so the semantics cannot drift.
func Apply(op *farmem.Op, found uint64) (next uint64, swapped bool) {
	switch op.Kind {
	case farmem.OpCAS:
		if found != op.Cmp {
			return found, false
		}
		return op.Swap, true
	case farmem.OpFAA:
		return found + op.Swap, true
	case farmem.OpMaskedCAS:
		if found&op.CmpMask != op.Cmp&op.CmpMask {
			return found, false
		}
		return found&^op.SwapMask | op.Swap&op.SwapMask, true
	}
	return found, false
}

// NoSuchNode is the error of an op addressed to a node the fabric does not have.
func NoSuchNode(n farmem.NodeID) error {
	return fmt.Errorf("farmem: no node %v: %w", n, farmem.ErrOutOfRange)
}

// Rejected returns the finished Pending of a batch refused before anything of it ran. With err
// set, every op fails with err, and so does the Pending even for an empty batch. Otherwise each
// op fails with its entry of errs (as CheckOps returns them), and the ops without one fail with
// ErrAborted: a batch applies whole or not at all.
func Rejected(b *farmem.Batch, err error, errs []error) *farmem.Pending {
	if b == nil {
		b = &farmem.Batch{}
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
			comp.Complete(i, 0, fmt.Errorf("farmem: %s at %v: %w", b.Ops[i].Kind, b.Ops[i].Addr, farmem.ErrAborted))
		}
	}
	return p
}

// CheckWait validates a Wait's arguments for a client of compute node self, whose region is
// size bytes: a condition, and an aligned word of that region.
func CheckWait(a farmem.Addr, self farmem.NodeID, size uint64, until func(uint64) bool) error {
	off := a.Offset()
	switch {
	case until == nil:
		return fmt.Errorf("farmem: wait at %v: nil condition: %w", a, farmem.ErrInvalid)
	case a.Node() != self:
		return fmt.Errorf("farmem: wait at %v from a client of %v: %w", a, self, farmem.ErrNotLocal)
	case off&7 != 0:
		return fmt.Errorf("farmem: wait at %v: %w", a, farmem.ErrMisaligned)
	case off+8 > size:
		return fmt.Errorf("farmem: wait at %v: %w", a, farmem.ErrOutOfRange)
	}
	return nil
}

// AdmitWait is Wait's admission, as Admit is Post's: it refuses the Wait of a client that is
// not usable (usable is its refusal, nil when it is), checks the arguments against the
// client's own node self of size bytes ([CheckWait]), counts the Wait on c, and returns the
// word's offset in the node's region.
func AdmitWait(usable error, c *Counters, a farmem.Addr, self farmem.NodeID, size uint64, until func(uint64) bool) (uint64, error) {
	if usable != nil {
		return 0, usable
	}
	if err := CheckWait(a, self, size, until); err != nil {
		return 0, err
	}
	c.CountWait()
	return a.Offset(), nil
}

// CheckCall validates a Call's target and request: a compute node, and a request of at most
// farmem.MaxCallBytes.
func CheckCall(node farmem.NodeID, req []byte) error {
	switch {
	case !node.IsCompute():
		return fmt.Errorf("farmem: call to memory node %v: %w", node, farmem.ErrInvalid)
	case len(req) > farmem.MaxCallBytes:
		return fmt.Errorf("farmem: call request of %d bytes exceeds %d: %w", len(req), farmem.MaxCallBytes, farmem.ErrInvalid)
	}
	return nil
}
