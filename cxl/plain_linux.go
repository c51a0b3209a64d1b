package cxl

import (
	"runtime/debug"
	"unsafe"

	"github.com/farmem/farmem/atomics"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// doPlain runs b inline if it is a plain batch, signaled verbs of memory nodes only (a
// lookup's bucket and block reads, an update's block write with its bucket reads, an update's
// invalidation with its CAS), and reports whether it did; otherwise it changes nothing and the
// caller takes the general path, which handles everything else (unsignaled ops, compute
// nodes' regions, whose writes and atomics wake waiters, injected latency, the Uncached
// policy). It does that path's work in two walks over the batch and no call per op: the first
// checks each op as admitInline does and asks for the lines of its reads and atomics when hint
// is set; the second applies the ops in batch order under one fault guard (see applyPlain). A
// batch of reads and writes only is tallied in the first walk, its counts added before the ops
// run as CountAhead would add them; one with atomics, whose counts depend on their outcomes,
// is counted once run, as the general path's inline run counts it (Counters.CountDone).
func (c *client) doPlain(b *farmem.Batch, hint bool) (ran bool, err error) {
	if b == nil || len(b.Ops) == 0 || len(b.Ops) > farmem.MaxBatchOps || c.f.inject > 0 || c.f.uncached {
		return false, nil
	}
	reads, writes := 0, 0
	atomic := false
	var in, out uint64
	for i := range b.Ops {
		op := &b.Ops[i]
		node := op.Addr.Node()
		if op.Unsignaled || node.IsCompute() {
			return false, nil
		}
		s := c.m.seg(node)
		off, l := op.Addr.Offset(), uint64(len(op.Buf))
		if s == nil || l > farmem.MaxOpBytes || off >= s.size || l > s.size-off {
			return false, nil
		}
		switch op.Kind {
		case farmem.OpRead:
			if hint {
				atomics.Prefetch(unsafe.Add(s.base, off), uintptr(min(l, prefetchMax)))
			}
			reads++
			in += l
		case farmem.OpWrite:
			writes++
			out += l
		case farmem.OpCAS, farmem.OpMaskedCAS, farmem.OpFAA:
			// A misaligned or out-of-range word is the general path's to refuse.
			if off&7 != 0 || off > s.size-8 {
				return false, nil
			}
			if hint {
				atomics.Prefetch(unsafe.Add(s.base, off), 8)
			}
			atomic = true
		default:
			return false, nil
		}
	}
	if atomic {
		err = c.applyPlain(b, false)
		c.Counters.CountDone(b, c.ClientInfo.Node)
		return true, err
	}
	c.Counters.CountReadsWrites(reads, writes, in, out)
	return true, c.applyPlain(b, true)
}

// applyPlain applies the ops of a batch doPlain admitted, in batch order, under one fault
// guard: the goroutine's panic-on-fault is set for the run and the caller's setting restored
// after it. An op that meets a memory fault (a truncated file) fails with an error wrapping
// farmem.ErrNodeDown and atomics.ErrFault, the ops after it are applied as runGuarded applies
// them, and, if the batch was counted ahead (counted), the bytes the failed reads did not
// receive are taken back from the counts. Other panics propagate, with the setting restored.
func (c *client) applyPlain(b *farmem.Batch, counted bool) (err error) {
	i := 0
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		gerr := recovered(recover())
		if gerr == nil {
			return
		}
		op := &b.Ops[i]
		err = faultErr(op, gerr)
		transport.SetResult(op, 0, err)
		for j := i + 1; j < len(b.Ops); {
			j = c.runGuarded(b, j, &err)
		}
		if counted {
			c.Counters.UncountFailed(b)
		}
	}()
	for ; i < len(b.Ops); i++ {
		op := &b.Ops[i]
		s := c.m.seg(op.Addr.Node())
		var val uint64
		switch op.Kind {
		case farmem.OpRead:
			s.read(op.Addr.Offset(), op.Buf)
		case farmem.OpWrite:
			s.write(op.Addr.Offset(), op.Buf)
		default:
			val = s.mem.Atomic(op, op.Addr.Offset())
		}
		transport.SetResult(op, val, nil)
	}
	return nil
}

// read copies len(dst) bytes at the checked offset off into dst: whole aligned words with
// atomics' word copies (the range is checked: no second check), anything else word by word
// through wordmem. Each word is copied whole. It is apply's read without the Uncached policy's
// flush, and doPlain's.
func (s *seg) read(off uint64, dst []byte) {
	if (off|uint64(len(dst)))&7 == 0 {
		atomics.LoadBytes(dst, (*uint64)(unsafe.Add(s.base, off)))
		return
	}
	s.mem.ReadAt(dst, off, nil)
}

// write copies src to the checked offset off, as read does (wordmem merges partial words with
// a CAS). On a compute node's region the word copies' plain MOVs are fenced, before apply's
// wake reads the waiter counts.
func (s *seg) write(off uint64, src []byte) {
	if (off|uint64(len(src)))&7 == 0 {
		atomics.StoreBytes((*uint64)(unsafe.Add(s.base, off)), src)
		if s.cid != 0 {
			atomics.MFence()
		}
		return
	}
	s.mem.WriteAt(src, off, nil)
}

// applyOne applies one checked op of a memory node's segment s under a fault guard, as
// applyPlain applies a batch: a memory fault fails it with an error wrapping
// farmem.ErrNodeDown and atomics.ErrFault, and the goroutine's panic-on-fault is as the caller
// had it afterwards.
func applyOne(s *seg, op *farmem.Op) (val uint64, err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if gerr := recovered(recover()); gerr != nil {
			val, err = 0, faultErr(op, gerr)
		}
	}()
	return s.apply(op, false), nil
}

// recovered is what a fault guard's deferred function makes of recover's value: nil if
// nothing panicked, the fault's error (atomics.FaultOf) for a memory fault; any other panic
// goes on.
func recovered(r any) error {
	if r == nil {
		return nil
	}
	gerr := atomics.FaultOf(r)
	if gerr == nil {
		panic(r)
	}
	return gerr
}
