package cxl

import (
	"encoding/binary"
	"runtime/debug"
	"sync/atomic"
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
// policy). It does that path's work in two walks over the batch and no call per op but the
// copies: the first checks each op as admitInline does, tallies it (transport.Tally) and asks
// for the lines of its reads and atomics when hint is set; the batch is then counted from the
// tally, as if every op will succeed and every comparison swap, so that a batch refused whole
// has run nothing and counted nothing; the second applies the ops in batch order under one
// fault guard and counts what depends on the outcomes (see applyPlain).
func (c *client) doPlain(b *farmem.Batch, hint bool) (ran bool, err error) {
	if b == nil {
		return false, nil
	}
	ops := b.Ops
	if f := c.f; len(ops) == 0 || len(ops) > farmem.MaxBatchOps || f.inject > 0 || f.uncached {
		return false, nil
	}
	mem := c.m.mem
	var t transport.Tally
	for i := range ops {
		op := &ops[i]
		node := op.Addr.Node()
		// A compute node's NodeID (ComputeNodeBit set) is above every memory node's index;
		// mem[0], no node, has size 0 and so refuses every offset.
		if op.Unsignaled || int(node) >= len(mem) {
			return false, nil
		}
		s := &mem[node]
		off, l := op.Addr.Offset(), uint64(len(op.Buf))
		if l > farmem.MaxOpBytes || off >= s.size || l > s.size-off {
			return false, nil
		}
		switch op.Kind {
		case farmem.OpRead:
			if hint {
				atomics.Prefetch(unsafe.Add(s.base, off), uintptr(min(l, prefetchMax)))
			}
			t.Read(l)
		case farmem.OpWrite:
			t.Write(l)
		case farmem.OpCAS, farmem.OpMaskedCAS, farmem.OpFAA:
			// A misaligned or out-of-range word is the general path's to refuse.
			if off&7 != 0 || off > s.size-8 {
				return false, nil
			}
			if hint {
				atomics.Prefetch(unsafe.Add(s.base, off), 8)
			}
			t.Atomic(op.Kind)
		default:
			return false, nil
		}
	}
	c.Counters.CountTally(&t)
	return true, c.applyPlain(b)
}

// plainRun is the state of a plain batch's run that its fault guard reads.
type plainRun struct {
	c      *client
	b      *farmem.Batch
	i      int    // the op being applied
	failed uint64 // the comparisons that failed so far
	err    error  // the batch's first error
	old    bool   // the caller's panic-on-fault setting
	done   bool   // the run ended without a panic, the setting restored
}

// applyPlain applies the ops of a batch doPlain admitted and counted, in batch order, under one
// fault guard: the goroutine's panic-on-fault is set for the run and the caller's setting
// restored after it. It counts the comparisons that failed. Aligned reads and writes are word
// copies, others go word by word through wordmem, as seg.read and seg.write make them (no
// fence: a memory node's region has no waiters). An op that meets a memory fault (a truncated
// file) fails with an error wrapping farmem.ErrNodeDown and atomics.ErrFault, and the ops after
// it are applied as runGuarded applies them (see plainFault). Other panics propagate, with the
// setting restored.
func (c *client) applyPlain(b *farmem.Batch) error {
	r := plainRun{c: c, b: b}
	r.run()
	return r.err
}

// run is applyPlain's run. A run that ends normally restores the setting itself and marks
// itself done, so that its deferred guard, which must be there for a fault's panic, returns at
// once instead of calling recover.
func (r *plainRun) run() {
	r.old = debug.SetPanicOnFault(true)
	defer func() {
		if !r.done {
			debug.SetPanicOnFault(r.old)
			r.fault(recover())
		}
	}()
	c := r.c
	ops, mem := r.b.Ops, c.m.mem
	for i := range ops {
		r.i = i
		op := &ops[i]
		s := &mem[op.Addr.Node()]
		off, buf := op.Addr.Offset(), op.Buf
		p := unsafe.Add(s.base, off)
		var val uint64
		switch op.Kind {
		case farmem.OpRead:
			if n := uintptr(len(buf)); (off|uint64(n))&7 == 0 {
				if n > shortCopy {
					atomics.LoadBytes(buf, (*uint64)(p))
					break
				}
				// A short read's words are loaded here: atomics' copies cost more in calls
				// than the few words.
				d := unsafe.Pointer(unsafe.SliceData(buf))
				for j := uintptr(0); j < n; j += 8 {
					v := atomic.LoadUint64((*uint64)(unsafe.Add(p, j)))
					binary.LittleEndian.PutUint64((*[8]byte)(unsafe.Add(d, j))[:], v)
				}
			} else {
				s.mem.ReadAt(buf, off, nil)
			}
		case farmem.OpWrite:
			if (off|uint64(len(buf)))&7 == 0 {
				atomics.StoreBytes((*uint64)(p), buf)
			} else {
				s.mem.WriteAt(buf, off, nil)
			}
		case farmem.OpCAS:
			val = casWord((*uint64)(p), op.Cmp, op.Swap)
			if val != op.Cmp {
				r.failed++
			}
		default:
			val = s.mem.Atomic(op, off)
			if _, ok := transport.Apply(op, val); !ok {
				r.failed++
			}
		}
		transport.SetResult(op, val, nil)
	}
	debug.SetPanicOnFault(r.old)
	r.done = true
	if r.failed != 0 {
		c.Counters.CountFailedCAS(r.failed)
	}
}

// shortCopy is the longest aligned read run loads itself, word by word.
const shortCopy = 64

// fault finishes a plain run that panicked, the caller's panic-on-fault setting restored, with
// the value recover returned: if the run met a memory fault, it finishes the batch
// (plainFault); any other panic goes on.
func (r *plainRun) fault(v any) {
	if gerr := recovered(v); gerr != nil {
		r.err = r.c.plainFault(r.b, r.i, gerr, r.failed)
	}
}

// casWord is a CAS of the word at w from cmp to swap that returns the word it found, as
// wordmem applies it (transport.Apply's semantics): a load, and the locked compare-and-swap
// only if the word was cmp, again if another writer changed it in between.
func casWord(w *uint64, cmp, swap uint64) uint64 {
	for {
		found := atomic.LoadUint64(w)
		if found != cmp || atomic.CompareAndSwapUint64(w, found, swap) {
			return found
		}
	}
}

// plainFault finishes a plain batch whose op i met a memory fault (gerr) after the ops before
// it ran, failed comparisons among them: op i fails, the ops after it run under their own
// guards (runGuarded), and the counts are made exact, the bytes the failed ops did not receive
// taken back and the failed comparisons after op i added. It returns op i's error, the batch's
// first.
func (c *client) plainFault(b *farmem.Batch, i int, gerr error, failed uint64) error {
	op := &b.Ops[i]
	err := faultErr(op, gerr)
	transport.SetResult(op, 0, err)
	for j := i + 1; j < len(b.Ops); {
		j = c.runGuarded(b, j, &err)
	}
	for j := i + 1; j < len(b.Ops); j++ {
		k := b.Ops[j].Kind
		if val, e := b.Result(j); e == nil && (k == farmem.OpCAS || k == farmem.OpMaskedCAS) {
			if _, ok := transport.Apply(&b.Ops[j], val); !ok {
				failed++
			}
		}
	}
	c.Counters.UncountFailed(b)
	c.Counters.CountFailedCAS(failed)
	return err
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
