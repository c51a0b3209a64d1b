package transport

import "github.com/farmem/farmem/farmem"

// CountDone counts a batch that a client on compute node self has already run to completion in
// its own goroutine (a transport that applies a batch inline, each op's outcome left in the
// op): what CountBatch and then CountResult of every op would count, with one addition per
// counter that changes instead of one or two per op, and those without locked instructions.
// Only the client's own goroutine may call it (see Counters).
func (c *Counters) CountDone(b *farmem.Batch, self farmem.NodeID) {
	var out, in, unsignaled, failed uint64
	rt := false
	// Verbs are added per run of ops of one target and kind (a batch is usually one run).
	runT, runK, run := farmem.Target(0), farmem.OpKind(0), uint64(0)
	for i := range b.Ops {
		op := &b.Ops[i]
		t := TargetOf(op.Addr.Node(), self)
		if op.Kind < farmem.NumOpKinds {
			if run > 0 && (t != runT || op.Kind != runK) {
				c.own.add(&c.own.verbs[runT][runK], run)
				run = 0
			}
			runT, runK = t, op.Kind
			run++
		}
		switch op.Kind {
		case farmem.OpWrite:
			out += uint64(len(op.Buf))
		case farmem.OpCAS, farmem.OpMaskedCAS:
			out += 16
		case farmem.OpFAA:
			out += 8
		}
		if op.Unsignaled {
			unsignaled++
			continue
		}
		rt = rt || t != farmem.TargetLocal
		val, err := b.Result(i)
		if err != nil {
			continue
		}
		switch op.Kind {
		case farmem.OpRead:
			in += uint64(len(op.Buf))
		case farmem.OpCAS, farmem.OpMaskedCAS:
			in += 8
			if _, ok := Apply(op, val); !ok {
				failed++
			}
		case farmem.OpFAA:
			in += 8
		}
	}
	c.addBatch(runT, runK, run, out, in, unsignaled, failed, rt)
}

// addBatch adds one batch's tallies to the own counters, each touched only when its tally is
// nonzero: the last run of verbs of one target and kind, the
// bytes out and in, the unsignaled ops, the failed CASes, and a round trip when the batch
// left the compute node.
func (c *Counters) addBatch(runT farmem.Target, runK farmem.OpKind, run, out, in, unsignaled, failed uint64, rt bool) {
	o := &c.own
	if run > 0 {
		o.add(&o.verbs[runT][runK], run)
	}
	if out != 0 {
		o.add(&o.bytesOut, out)
	}
	if in != 0 {
		o.add(&o.bytesIn, in)
	}
	if unsignaled != 0 {
		o.add(&o.unsignaled, unsignaled)
	}
	if failed != 0 {
		o.add(&o.failedCAS, failed)
	}
	if rt {
		o.add(&o.roundTrips, 1)
	}
}
