package transport

import "github.com/farmem/farmem/farmem"

// CountAhead counts, before it runs, a batch of reads and writes only that a client on compute
// node self is about to run inline, as CountDone would count it once run if every op
// succeeds, and reports true; for a batch holding any atomic (whose outcome the counts depend
// on) it counts nothing and reports false, and the caller counts with CountDone afterwards.
// After a batch counted ahead has run, the caller calls UncountFailed if any op failed.
//
// Counting first lets a transport do it while the batch's cache misses, asked for with
// prefetches, are on their way: the atomic additions (locked instructions, full fences) then
// do not wait behind the copies' loads and stores. A reader of the counters sees the batch
// counted from the moment it starts rather than once it is done.
func (c *Counters) CountAhead(b *farmem.Batch, self farmem.NodeID) bool {
	if len(b.Ops) == 1 {
		// A lone read or write that leaves self: one verb and one round trip in one addition
		// (lone), and its bytes.
		op := &b.Ops[0]
		if k := op.Kind; (k == farmem.OpRead || k == farmem.OpWrite) && !op.Unsignaled {
			if t := TargetOf(op.Addr.Node(), self); t != farmem.TargetLocal {
				c.lone[t][k].Add(1)
				if n := uint64(len(op.Buf)); n != 0 {
					if k == farmem.OpRead {
						c.bytesIn.Add(n)
					} else {
						c.bytesOut.Add(n)
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
			c.verbs[runT][runK].Add(run)
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

// UncountFailed takes back, for a batch CountAhead counted and that has now run, the bytes
// received that its signaled reads which failed did not receive, so that the counts equal
// CountDone's.
func (c *Counters) UncountFailed(b *farmem.Batch) {
	var in uint64
	for i := range b.Ops {
		op := &b.Ops[i]
		if op.Kind != farmem.OpRead || op.Unsignaled {
			continue
		}
		if _, err := b.Result(i); err != nil {
			in += uint64(len(op.Buf))
		}
	}
	if in != 0 {
		c.bytesIn.Add(-in)
	}
}
