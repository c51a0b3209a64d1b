package cxl

import (
	"unsafe"

	"github.com/farmem/farmem/atomics"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// admitInline reports whether b may run in the caller as it is (transport.Admissible's verdict
// for a usable client: a batch of 1 to farmem.MaxBatchOps ops, each on a node of the mapping
// and valid by transport.CheckOp) and, in the same pass over the ops, asks the CPU for the
// lines of every read and atomic (see prefetch) when hint is set (Do sets it unless the
// Uncached policy is in force; DoHinted, whose caller asked for the lines already, does not). It is
// the inline path's one walk over the batch before the ops run: the check and the hints cost
// a node lookup per op, not two walks and a call through a function value per op. A batch it
// refuses goes through Post, which checks it again and reports each op's error; the hints
// asked for meanwhile are harmless (a hint reads and changes nothing).
func (c *client) admitInline(b *farmem.Batch, hint bool) bool {
	if b == nil || len(b.Ops) == 0 || len(b.Ops) > farmem.MaxBatchOps {
		return false
	}
	for i := range b.Ops {
		op := &b.Ops[i]
		s := c.m.seg(op.Addr.Node())
		if s == nil || transport.CheckOp(op, s.size) != nil {
			return false
		}
		if !hint || op.Kind == farmem.OpWrite {
			continue
		}
		n := uintptr(8)
		if op.Kind == farmem.OpRead {
			n = uintptr(min(len(op.Buf), prefetchMax))
		}
		atomics.Prefetch(unsafe.Add(s.base, op.Addr.Offset()), n)
	}
	return true
}
