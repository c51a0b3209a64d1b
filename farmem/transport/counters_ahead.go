package transport

import (
	"github.com/farmem/farmem/atomics"
	"github.com/farmem/farmem/farmem"
)

// CountAhead counts, before it runs, a batch of reads and writes only that a client on compute
// node self is about to run inline, as CountDone would count it once run if every op
// succeeds, and reports true; for a batch holding any atomic (whose outcome the counts depend
// on) it counts nothing and reports false, and the caller counts with CountDone afterwards.
// After a batch counted ahead has run, the caller calls UncountFailed if any op failed.
//
// Counting first lets a transport do it while the batch's cache misses, asked for with
// prefetches, are on their way. A reader of the counters sees the batch counted from the
// moment it starts rather than once it is done. Only the client's own goroutine may call it
// (see Counters).
func (c *Counters) CountAhead(b *farmem.Batch, self farmem.NodeID) bool {
	if len(b.Ops) == 1 {
		// A lone read or write that leaves self: one verb and one round trip in one addition
		// (lone), and its bytes.
		op := &b.Ops[0]
		if k := op.Kind; (k == farmem.OpRead || k == farmem.OpWrite) && !op.Unsignaled {
			if t := TargetOf(op.Addr.Node(), self); t != farmem.TargetLocal {
				o := &c.own
				o.add(&o.lone[t][k], 1)
				if n := uint64(len(op.Buf)); n != 0 {
					if k == farmem.OpRead {
						o.add(&o.bytesIn, n)
					} else {
						o.add(&o.bytesOut, n)
					}
				}
				return true
			}
		}
	}
	for i := range b.Ops {
		if k := b.Ops[i].Kind; k != farmem.OpRead && k != farmem.OpWrite {
			return false
		}
	}
	var out, in, unsignaled uint64
	rt := false
	runT, runK, run := farmem.Target(0), farmem.OpKind(0), uint64(0)
	for i := range b.Ops {
		op := &b.Ops[i]
		t := TargetOf(op.Addr.Node(), self)
		if run > 0 && (t != runT || op.Kind != runK) {
			c.own.add(&c.own.verbs[runT][runK], run)
			run = 0
		}
		runT, runK = t, op.Kind
		run++
		if op.Kind == farmem.OpWrite {
			out += uint64(len(op.Buf))
		}
		if op.Unsignaled {
			unsignaled++
			continue
		}
		rt = rt || t != farmem.TargetLocal
		if op.Kind == farmem.OpRead {
			in += uint64(len(op.Buf))
		}
	}
	c.addBatch(runT, runK, run, out, in, unsignaled, 0, rt)
	return true
}

// UncountFailed takes back, for a batch counted before it ran (CountAhead, or CountTally
// with each op's success assumed) and that has now run, the bytes received ([ResultBytes])
// that its signaled ops which failed did not receive, so that the counts equal CountDone's.
func (c *Counters) UncountFailed(b *farmem.Batch) {
	var in uint64
	for i := range b.Ops {
		op := &b.Ops[i]
		if _, err := b.Result(i); err != nil {
			in += ResultBytes(op)
		}
	}
	if in != 0 {
		c.own.add(&c.own.bytesIn, -in)
	}
}

// Tally is what a transport tallies of a plain batch, signaled verbs of memory nodes only
// that a client of a compute node runs inline, as it checks the batch, for
// [Counters.CountTally]: its verbs by kind, its round trip, and the bytes its verbs receive if
// they succeed and send, laid out as Counters' own plain words (see plainWords), so that
// counting it is one addition of eight words. The zero value is an empty tally.
type Tally struct {
	w [plainWords]uint64
}

// Read tallies a read of n bytes.
func (t *Tally) Read(n uint64) {
	t.w[farmem.OpRead]++
	t.w[plainRoundTrips] = 1
	t.w[plainBytesIn] += n
}

// Write tallies a write of n bytes.
func (t *Tally) Write(n uint64) {
	t.w[farmem.OpWrite]++
	t.w[plainRoundTrips] = 1
	t.w[plainBytesOut] += n
}

// Atomic tallies an atomic of kind k (OpCAS, OpMaskedCAS or OpFAA; anything else is not
// tallied): its operands out (16 bytes for a comparison, 8 for an addition) and the word it
// finds back.
func (t *Tally) Atomic(k farmem.OpKind) {
	if k < farmem.OpCAS || k >= farmem.NumOpKinds {
		return
	}
	t.w[k]++
	t.w[plainRoundTrips] = 1
	t.w[plainBytesOut] += 16
	if k == farmem.OpFAA {
		t.w[plainBytesOut] -= 8
	}
	t.w[plainBytesIn] += 8
}

// CountTally counts, before it runs, a plain batch that a client of a compute node is about to
// run inline, from the tally the transport made of it as it checked it: what CountDone counts
// for it once run if every op succeeds and every comparison swaps. After the batch has run, the
// transport adds its failed comparisons ([Counters.CountFailedCAS]) and, if any op failed,
// calls UncountFailed. It counts nothing for an empty tally. Only the client's own goroutine
// may call it.
func (c *Counters) CountTally(t *Tally) { atomics.AddOwned8(&c.own.plain, &t.w) }

// CountFailedCAS counts n comparisons (CAS, MaskedCAS) of a batch counted with CountTally that
// found a word other than the one they expected. Only the client's own goroutine may call it.
func (c *Counters) CountFailedCAS(n uint64) {
	if n != 0 {
		c.own.add(&c.own.failedCAS, n)
	}
}

// CountLone counts a signaled one-op batch to a memory node that a client of a compute node
// has run inline, with its outcome: what CountOp and then CountResult count for it. Only the
// client's own goroutine may call it.
func (c *Counters) CountLone(op *farmem.Op, val uint64, err error) {
	o := &c.own
	k := op.Kind
	if k >= farmem.NumOpKinds {
		return
	}
	o.add(&o.lone[farmem.TargetMemory][k], 1)
	var out, in uint64
	switch k {
	case farmem.OpRead:
		in = uint64(len(op.Buf))
	case farmem.OpWrite:
		out = uint64(len(op.Buf))
	case farmem.OpCAS, farmem.OpMaskedCAS:
		out, in = 16, 8
		if _, ok := Apply(op, val); !ok && err == nil {
			o.add(&o.failedCAS, 1)
		}
	case farmem.OpFAA:
		out, in = 8, 8
	}
	if out != 0 {
		o.add(&o.bytesOut, out)
	}
	if in != 0 && err == nil {
		o.add(&o.bytesIn, in)
	}
}
