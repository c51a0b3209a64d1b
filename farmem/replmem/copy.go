package replmem

import (
	"context"
	"fmt"
	"slices"

	"github.com/farmem/farmem/farmem"
)

// copyChunk is how many words Repopulate copies per round.
const copyChunk = 128

// CopyReport counts what Repopulate did.
type CopyReport struct {
	// Words is the words examined, Copied those written to the node, Current those it held
	// at the latest version already, Skipped those being written (locked) that it left to the
	// next write or read of them.
	Words, Copied, Current, Skipped uint64
}

// Add returns the sum of two reports.
func (c CopyReport) Add(o CopyReport) CopyReport {
	return CopyReport{c.Words + o.Words, c.Copied + o.Copied, c.Current + o.Current, c.Skipped + o.Skipped}
}

// Repopulate copies to replica node every word of the logical range [a, a+n) whose latest
// version it lacks, from the other replicas (the largest version they hold), while other
// clients use the words. Per chunk of words it takes three round trips: a read of the range on every replica,
// a lock round on node alone (a CAS of each lagging word's control word there, and a read of
// its group after it), and a write round (the words written as a write round of an atomic
// writes them, each released at the version copied). Locking node's copy alone suffices: the
// largest version the others hold is the latest committed one or a later write already
// released on one of them (its holder had a majority locked, so a write that began after it
// carries a larger version: copying it completes it, as a lock round that found it would); a
// concurrent write either includes node in its lock set (then it waits for the copy's lock, or
// comes after it and finds the copy older than what the others hold) or commits without it,
// leaving it lagging as any write may. A word locked everywhere it was read (a write in
// progress) is skipped and counted: the write brings node up to date if it locks it, and any
// later write or repairing read of the word does. So are the words of a chunk whose lock round
// ended after the lease (Options.Lease less ClockSkew) had run out, a client stalled between
// its rounds: their locks are given back unchanged, and the caller copies them again.
//
// Until it is repopulated, a node that lost its memory holds version 0 everywhere, which no
// lock round counts toward its majority, so concurrent operations stay correct without it:
// Repopulate only restores redundancy (and reads that need node's agreement, while another
// replica is down, find it again).
func (r *Memory) Repopulate(ctx context.Context, node farmem.NodeID, a farmem.Addr, n int) (CopyReport, error) {
	var rep CopyReport
	if err := r.usable(); err != nil {
		return rep, err
	}
	x := slices.Index(r.o.Nodes, node)
	if x < 0 || !r.virtual(a) {
		return rep, fmt.Errorf("replmem: repopulate %v of %v: not a replica of the virtual node: %w", node, a, farmem.ErrInvalid)
	}
	if err := checkWords(a, n); err != nil {
		return rep, err
	}
	for off := 0; off < n; off += 8 * copyChunk {
		c, err := r.copyChunk(ctx, x, a.Add(uint64(off)), min(8*copyChunk, n-off))
		rep = rep.Add(c)
		if err != nil {
			return rep, err
		}
	}
	return rep, nil
}

func (r *Memory) copyChunk(ctx context.Context, x int, a farmem.Addr, n int) (CopyReport, error) {
	words := n / 8
	rep := CopyReport{Words: uint64(words)}
	// Read round: every replica, three reads (controls, values, controls).
	var rb farmem.Batch
	bufs := make([]readBufs, len(r.o.Nodes))
	for i := range r.o.Nodes {
		pa := r.Phys(i, a)
		bufs[i] = readBufs{make([]byte, Stride*n), make([]byte, Stride*n), make([]byte, Stride*n)}
		rb.Read(pa, bufs[i].c1)
		rb.Read(pa, bufs[i].v)
		rb.Read(pa, bufs[i].c3)
	}
	sent := r.rt.Now()
	_ = r.m.Do(ctx, &rb)
	ok := make([]bool, len(r.o.Nodes))
	for i := range r.o.Nodes {
		ok[i] = true
		for k := 3 * i; k < 3*i+3; k++ {
			if _, err := rb.Result(k); err != nil {
				ok[i] = false
				r.note(i, sent, err)
			}
		}
	}
	if !ok[x] {
		_, err := rb.Result(3 * x)
		return rep, fmt.Errorf("replmem: repopulate %v: %w", r.o.Nodes[x], err)
	}
	// Per word: the latest version and value the other replicas hold, and node's control word.
	type want struct {
		w        int
		ver, val uint64
		from     uint64 // node's control word as read
	}
	var todo []want
	for w := range words {
		o := stride * w
		consistent := func(i int) (uint64, uint64, bool) {
			c1 := le.Uint64(bufs[i].c1[o+ctlOff:])
			if !ok[i] || isLocked(c1) || c1 != le.Uint64(bufs[i].c3[o+ctlOff:]) {
				return 0, 0, false
			}
			return c1, le.Uint64(bufs[i].v[o:]), true
		}
		// The largest version among the other replicas: the latest committed one (it is on
		// f+1 replicas, one of them answering unless more than f are lost or down), or a later
		// write whose holder released it there, which the copy completes.
		var ver, val uint64
		found, busy := false, false
		for i := range r.o.Nodes {
			if i == x || !ok[i] {
				continue
			}
			c, v, good := consistent(i)
			if !good {
				busy = true
				continue
			}
			if c != 0 && (!found || c > ver) {
				ver, val, found = c, v, true
			}
		}
		if !found {
			if busy {
				rep.Skipped++
			} else {
				rep.Current++ // never written on any other replica: nothing to copy
			}
			continue
		}
		nc := le.Uint64(bufs[x].c3[o+ctlOff:])
		if nc == le.Uint64(bufs[x].c1[o+ctlOff:]) && !isLocked(nc) && nc >= ver {
			rep.Current++
			continue
		}
		if isLocked(nc) {
			rep.Skipped++ // a writer holds it: its write round brings it up to date
			continue
		}
		todo = append(todo, want{w: w, ver: ver, val: val, from: nc})
	}
	if len(todo) == 0 {
		return rep, nil
	}
	// Lock round on node alone.
	lw := lockedBit | r.nextVersion(0)
	var lb farmem.Batch
	gs := make([][]byte, len(todo))
	for k, t := range todo {
		pa := r.Phys(x, a.Add(uint64(8*t.w)))
		gs[k] = make([]byte, stride)
		lb.CAS(pa.Add(ctlOff), t.from, lw)
		lb.Read(pa, gs[k])
	}
	lockAt := r.rt.Now()
	if err := r.m.Do(ctx, &lb); err != nil {
		r.note(x, lockAt, err)
	}
	var wb farmem.Batch
	copied := uint64(0) // words of this chunk counted in rep.Copied
	for k, t := range todo {
		prev, err := lb.Result(2 * k)
		if err != nil {
			return rep, fmt.Errorf("replmem: repopulate %v: %w", r.o.Nodes[x], err)
		}
		if prev != t.from {
			rep.Skipped++ // changed since the read: a writer reached it
			continue
		}
		pa := r.Phys(x, a.Add(uint64(8*t.w)))
		if v, _ := state(gs[k]); v >= t.ver {
			wb.CAS(pa.Add(ctlOff), lw, t.from)
			rep.Current++
			continue
		}
		var nb, vb, db [8]byte
		le.PutUint64(nb[:], t.val)
		le.PutUint64(vb[:], t.ver)
		le.PutUint64(db[:], t.ver|dirtyBit)
		wb.Write(pa.Add(pendOff), nb[:])
		wb.Write(pa.Add(verOff), db[:])
		wb.Write(pa, nb[:])
		wb.Write(pa.Add(verOff), vb[:])
		wb.CAS(pa.Add(ctlOff), lw, t.ver)
		rep.Copied++
		copied++
	}
	if len(wb.Ops) == 0 {
		return rep, nil
	}
	if r.rt.Now() > lockAt.Add(r.o.Lease-r.o.ClockSkew) {
		// Past the lease: give the locks back unchanged and let the caller run again.
		r.stats.Expired++
		var ub farmem.Batch
		for k, t := range todo {
			if prev, _ := lb.Result(2 * k); prev == t.from {
				ub.CAS(r.Phys(x, a.Add(uint64(8*t.w))).Add(ctlOff), lw, t.from)
			}
		}
		_ = r.m.Do(ctx, &ub)
		// Nothing was written: the words it would have copied are skipped, for the caller to
		// copy again (a loaded machine stalled this client past its lease, which is no fault
		// of the replicas).
		rep.Copied -= copied
		rep.Skipped += copied
		return rep, nil
	}
	if err := r.m.Do(ctx, &wb); err != nil {
		r.note(x, r.rt.Now(), err)
		return rep, fmt.Errorf("replmem: repopulate %v: %w", r.o.Nodes[x], err)
	}
	return rep, nil
}
