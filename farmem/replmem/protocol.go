package replmem

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// readBufs are one replica's three reads of one logical read: controls, values, controls.
type readBufs struct{ c1, v, c3 []byte }

// plain runs the reads and writes seg (indices into b, all on the virtual node) as one round:
// every write to every target replica and three reads of every read's range, in one batch.
// Writes need f+1 replicas; a read returns the words of f+1 replicas that agree on every word
// of every read of the round (same free control word in the first and third reads, same value
// and version), retrying (and after repairAfter tries, repairing) until they do.
func (r *Memory) plain(ctx context.Context, b *farmem.Batch, seg []int) error {
	fail := func(err error) error {
		for _, i := range seg {
			transport.SetResult(&b.Ops[i], 0, err)
		}
		return err
	}
	reads := 0
	for _, i := range seg {
		op := &b.Ops[i]
		if err := checkWords(op.Addr, len(op.Buf)); err != nil {
			return fail(err)
		}
		if op.Kind == farmem.OpRead {
			reads++
			r.stats.Reads++
		} else {
			r.stats.Writes++
		}
	}
	written := false
	wver := r.nextVersion(0)
	var backoff time.Duration
	disagree := 0
	short := 0 // consecutive rounds in which at most f replicas answered, some left out
	for range maxAttempts {
		ts := r.targets()
		writes := !written
		var pb farmem.Batch
		bufs := make([][]readBufs, len(ts))
		for k, i := range ts {
			bufs[k] = make([]readBufs, 0, reads)
			for _, j := range seg {
				op := &b.Ops[j]
				pa := r.Phys(i, op.Addr)
				n := Stride * len(op.Buf)
				if op.Kind == farmem.OpWrite {
					if !written {
						pb.Write(pa, spread(op.Buf, wver))
					}
					continue
				}
				rb := readBufs{make([]byte, n), make([]byte, n), make([]byte, n)}
				pb.Read(pa, rb.c1)
				pb.Read(pa, rb.v)
				pb.Read(pa, rb.c3)
				bufs[k] = append(bufs[k], rb)
			}
		}
		sent := r.rt.Now()
		_ = r.m.Do(ctx, &pb)
		ok := make([]bool, len(ts))
		nok := 0
		var errs []error
		per := len(pb.Ops) / len(ts)
		for k, i := range ts {
			ok[k] = true
			for x := k * per; x < (k+1)*per; x++ {
				if _, err := pb.Result(x); err != nil {
					ok[k] = false
					r.note(i, sent, err)
					errs = append(errs, fmt.Errorf("%v: %w", r.o.Nodes[i], err))
					break
				}
			}
			if ok[k] {
				nok++
				if per > 0 {
					r.note(i, sent, nil)
				}
			}
		}
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		if nok <= r.f {
			// A round that left suspected replicas out, and then lost one it asked, asks
			// again: the next round's targets include the suspected ones (fewer than f+1 are
			// not suspected now). Only a few rounds in a row that still get no majority fail.
			if len(ts) < len(r.o.Nodes) {
				if short++; short < 3 {
					continue
				}
			}
			return fail(fmt.Errorf("%w: %d of %d replicas answered: %w", ErrNoQuorum, nok, len(r.o.Nodes), errors.Join(errs...)))
		}
		short = 0
		if writes {
			r.missed(b, seg, ts, ok)
		}
		written = true
		if reads == 0 {
			return fail(nil)
		}
		if ref := r.agree(ts, ok, bufs); ref >= 0 {
			k := 0
			for _, j := range seg {
				op := &b.Ops[j]
				if op.Kind == farmem.OpRead {
					gather(op.Buf, bufs[ref][k].v)
					r.remember(op.Addr, ts, ok, bufs, k)
					for _, q := range holes(ts, ok, bufs, ref, k) {
						r.heal(ctx, r.o.Nodes[ts[q]], op.Addr, len(op.Buf))
					}
					k++
				}
			}
			return fail(nil)
		}
		r.stats.ReadRetries++
		disagree++
		k := 0
		var repair []farmem.Addr
		for _, j := range seg {
			op := &b.Ops[j]
			if op.Kind == farmem.OpRead {
				repair = append(repair, r.remember(op.Addr, ts, ok, bufs, k)...)
				k++
			}
		}
		if disagree >= repairAfter && len(repair) > 0 {
			disagree = 0
			for _, a := range repair {
				r.stats.Repairs++
				if _, err := r.rmw(ctx, a, func(old uint64) (uint64, bool) { return old, false }); err != nil {
					return fail(err)
				}
			}
			continue
		}
		if err := r.sleep(ctx, &backoff); err != nil {
			return fail(err)
		}
	}
	return fail(fmt.Errorf("%w: replicas never agreed", ErrNoQuorum))
}

// spread lays src's words out at the stride: value, control and version words holding ver,
// zero pending value.
func spread(src []byte, ver uint64) []byte {
	out := make([]byte, Stride*len(src))
	for w := 0; w < len(src)/8; w++ {
		o := stride * w
		copy(out[o:o+8], src[8*w:8*w+8])
		le.PutUint64(out[o+ctlOff:], ver)
		le.PutUint64(out[o+verOff:], ver)
	}
	return out
}

// clockShift makes a version's counter at least the fabric time in units of 2^14 ns (16µs),
// so that 47 bits of Unix time last until 2043, and a word written anew after its memory was
// freed and reused gets a version above those of its previous life (reuse comes an allocator
// lease after the last write, far more than the clock skew and than the counters a burst of
// writes to one word can add above the clock).
const clockShift = 14

// nextVersion returns a version no write of this handle used before: a counter above its last
// one and above its clock (in 2^16 ns units), and its client id.
func (r *Memory) nextVersion(floor uint64) uint64 {
	k := max(r.last, uint64(r.rt.Now())>>clockShift, floor) + 1
	r.last = k
	return versionWord(k, r.id)
}

// gather copies the values of a strided read into dst.
func gather(dst, src []byte) {
	for w := 0; w < len(dst)/8; w++ {
		copy(dst[8*w:8*w+8], src[stride*w:stride*w+8])
	}
}

// clean reports whether a replica's read of one range saw every word free and unchanged
// (the same free control word in the first and third reads).
func clean(rb readBufs) bool {
	for w := 0; w < len(rb.v)/stride; w++ {
		c1 := le.Uint64(rb.c1[stride*w+ctlOff:])
		if isLocked(c1) || c1 != le.Uint64(rb.c3[stride*w+ctlOff:]) {
			return false
		}
	}
	return true
}

// same reports whether two clean reads of one range agree on every word's value and version.
func same(x, y readBufs) bool {
	for w := 0; w < len(x.v)/stride; w++ {
		o := stride * w
		if !bytes.Equal(x.v[o:o+8], y.v[o:o+8]) || !bytes.Equal(x.c1[o+ctlOff:o+ctlOff+8], y.c1[o+ctlOff:o+ctlOff+8]) {
			return false
		}
	}
	return true
}

// agree returns the position in ts of a replica that f others, all clean, agree with on
// every read of the round, or -1.
func (r *Memory) agree(ts []int, ok []bool, bufs [][]readBufs) int {
	isClean := make([]bool, len(ts))
	for k := range ts {
		if !ok[k] {
			continue
		}
		isClean[k] = true
		for _, rb := range bufs[k] {
			if !clean(rb) {
				isClean[k] = false
				break
			}
		}
	}
	for x := range ts {
		if !isClean[x] {
			continue
		}
		n := 1
		for y := range ts {
			if y == x || !isClean[y] {
				continue
			}
			match := true
			for k := range bufs[x] {
				if !same(bufs[x][k], bufs[y][k]) {
					match = false
					break
				}
			}
			if match {
				n++
			}
		}
		if n > r.f {
			return x
		}
	}
	return -1
}

// remember records the control words read k of a round saw (the third read's), and returns the
// logical words on which the answering replicas disagree or that some replica has locked.
func (r *Memory) remember(a farmem.Addr, ts []int, ok []bool, bufs [][]readBufs, k int) []farmem.Addr {
	var bad []farmem.Addr
	n := 0
	for q := range ts {
		if ok[q] {
			n = len(bufs[q][k].v) / stride
			break
		}
	}
	now := r.rt.Now()
	for w := range n {
		o := stride * w
		var first []byte
		var firstC uint64
		differ, nonzero := false, false
		for q, i := range ts {
			if !ok[q] {
				continue
			}
			c := le.Uint64(bufs[q][k].c3[o+ctlOff:])
			v := bufs[q][k].v[o : o+8]
			if c != 0 {
				nonzero = true
			}
			if isLocked(c) {
				differ = true
				if _, seen := r.seen[c]; !seen && le.Uint64(bufs[q][k].c1[o+ctlOff:]) == c {
					r.seenAt(c, now)
				}
			}
			if first == nil {
				first, firstC = v, c
			} else if c != firstC || !bytes.Equal(v, first) {
				differ = true
			}
			_ = i
		}
		wa := a.Add(uint64(o / Stride))
		if nonzero {
			cs := r.controls(wa)
			for q, i := range ts {
				if ok[q] {
					cs[i] = le.Uint64(bufs[q][k].c3[o+ctlOff:])
				}
			}
		}
		if differ {
			bad = append(bad, wa)
		}
	}
	return bad
}

// seenAt records that lock word c was first seen at now.
func (r *Memory) seenAt(c uint64, now farmem.Time) {
	if len(r.seen) >= maxCached {
		clear(r.seen)
	}
	r.seen[c] = now
}

// expired reports whether lock word c (another client's, or an abandoned one of this client)
// has been seen for longer than a lease: its holder posts nothing under it any more.
func (r *Memory) expired(c uint64, now farmem.Time) bool {
	at, ok := r.seen[c]
	if !ok {
		r.seenAt(c, now)
		return false
	}
	return now >= at.Add(r.o.Lease+2*r.o.ClockSkew)
}

// state decodes one replica's group of words read under this client's lock: the version and
// value it holds (a dirty version word means the pending value was written whole first).
func state(g []byte) (ver, val uint64) {
	v := le.Uint64(g[verOff:])
	if v&dirtyBit != 0 {
		return v &^ dirtyBit, le.Uint64(g[pendOff:])
	}
	return v, le.Uint64(g[0:])
}

// rmw applies apply to the replicated word a (see the package doc): lock a majority of its
// replicas, take the value of the largest version among them, and either write apply's new
// value with a new version to every locked replica (ok) or write the largest version's value
// back (not ok). It returns the value it found.
func (r *Memory) rmw(ctx context.Context, a farmem.Addr, apply func(uint64) (uint64, bool)) (uint64, error) {
	v, _, err := r.rmwThen(ctx, a, apply, nil, nil)
	return v, err
}

// rmwThen is rmw that also reads, in its write round and after it on each replica, the ops
// follow of b (reads on the virtual node), and sets their results if f+1 replicas agree on
// them there (as a plain read would require); it reports whether they did.
func (r *Memory) rmwThen(ctx context.Context, a farmem.Addr, apply func(uint64) (uint64, bool), b *farmem.Batch, follow []int) (uint64, bool, error) {
	return r.rmwCore(ctx, a, apply, b, follow, nil)
}

// rmwOutcome is what rmwCore's last round reports to settle: the largest version among its
// locked replicas, and how many of them released the round's write.
type rmwOutcome struct {
	best uint64
	done int
}

// rmwCore is rmwThen, reporting its last round's outcome in out if set.
func (r *Memory) rmwCore(ctx context.Context, a farmem.Addr, apply func(uint64) (uint64, bool), b *farmem.Batch, follow []int, out *rmwOutcome) (uint64, bool, error) {
	exp := r.controls(a)
	var backoff time.Duration
	short := 0 // consecutive rounds in which at most f replicas answered
	for range maxAttempts {
		if err := ctx.Err(); err != nil {
			return 0, false, err
		}
		now := r.rt.Now()
		// The version this round will write: above every counter this handle knows of.
		var floor uint64
		for _, c := range exp {
			floor = max(floor, counterOf(c))
		}
		newVer := r.nextVersion(floor)
		k := counterOf(newVer)
		lw := lockedBit | newVer
		ts := r.targets()
		var lb farmem.Batch
		type sent struct {
			i, cas, rd int
			from       uint64
			g          []byte
		}
		var ss []sent
		var peek []int // replicas held by a live holder: their control word is only read
		var peekBuf [][]byte
		for _, i := range ts {
			c := exp[i]
			if isLocked(c) && !r.expired(c, now) {
				pb := make([]byte, 8)
				peek = append(peek, lb.Read(r.Phys(i, a).Add(ctlOff), pb), i)
				peekBuf = append(peekBuf, pb)
				continue
			}
			g := make([]byte, stride)
			pa := r.Phys(i, a)
			ci := lb.CAS(pa.Add(ctlOff), c, lw)
			ri := lb.Read(pa, g)
			ss = append(ss, sent{i: i, cas: ci, rd: ri, from: c, g: g})
		}
		var got []sent
		answered := 0
		if len(lb.Ops) > 0 {
			posted := r.rt.Now()
			_ = r.m.Do(ctx, &lb)
			for n := 0; n < len(peek); n += 2 {
				_, err := lb.Result(peek[n])
				r.note(peek[n+1], posted, err)
				if err != nil {
					continue
				}
				answered++
				if c := le.Uint64(peekBuf[n/2]); c != exp[peek[n+1]] {
					exp[peek[n+1]] = c
					if isLocked(c) {
						r.seenAt(c, now)
					}
				}
			}
			for _, s := range ss {
				prev, err := lb.Result(s.cas)
				if err == nil {
					answered++
					_, err = lb.Result(s.rd)
				}
				r.note(s.i, posted, err)
				if err != nil {
					continue
				}
				if prev == s.from {
					if isLocked(s.from) {
						r.stats.Takeovers++
					}
					got = append(got, s)
					continue
				}
				exp[s.i] = prev
				if isLocked(prev) {
					if _, ok := r.seen[prev]; !ok {
						r.seenAt(prev, now)
					}
				}
			}
		}
		restore := func() error {
			if len(got) == 0 {
				return nil
			}
			var rb farmem.Batch
			for _, s := range got {
				rb.CAS(r.Phys(s.i, a).Add(ctlOff), lw, s.from)
			}
			return r.m.Do(ctx, &rb)
		}
		// A replica holding version 0 has never had the word written (it lost its memory, or
		// missed the write that laid the word out): it is locked like the others and written
		// below, but does not count toward the majority.
		voters := 0
		for _, s := range got {
			if v, _ := state(s.g); v != 0 {
				voters++
			}
		}
		if voters <= r.f {
			r.stats.LockRetries++
			_ = restore()
			if err := ctx.Err(); err != nil {
				return 0, false, err
			}
			if answered <= r.f || len(got) > r.f {
				if short++; short >= 3 {
					return 0, false, fmt.Errorf("%w: word %v: %d replicas answered, %d of them hold it (a replica at version 0 never had it written)", ErrNotWritten, a, answered, voters)
				}
			} else {
				short = 0
			}
			if err := r.sleep(ctx, &backoff); err != nil {
				return 0, false, err
			}
			continue
		}
		// The largest version among the locked replicas is the latest committed one, or a
		// later write that failed midway (completed now).
		best, bestVal := uint64(0), uint64(0)
		for n, s := range got {
			v, x := state(s.g)
			if n == 0 || v > best {
				best, bestVal = v, x
			}
		}
		if counterOf(best) >= k {
			// A version this round's cannot exceed: release and go above it.
			r.last = max(r.last, counterOf(best))
			_ = restore()
			continue
		}
		nv, ok := apply(bestVal)
		ver := newVer
		if !ok {
			nv, ver = bestVal, best
		}
		if r.rt.Now() > now.Add(r.o.Lease-r.o.ClockSkew) {
			// Past the lease: nothing may be written under these locks any more. Give them
			// back (a CAS of our own lock word is harmless if someone took it over).
			r.stats.Expired++
			_ = restore()
			continue
		}
		var wb farmem.Batch
		casAt := make([]int, len(got))
		var nb, vb, db [8]byte
		le.PutUint64(nb[:], nv)
		le.PutUint64(vb[:], ver)
		le.PutUint64(db[:], ver|dirtyBit)
		for n, s := range got {
			pa := r.Phys(s.i, a)
			if v, x := state(s.g); v != ver || x != nv || le.Uint64(s.g[verOff:]) != ver {
				wb.Write(pa.Add(pendOff), nb[:])
				wb.Write(pa.Add(verOff), db[:])
				wb.Write(pa, nb[:])
				wb.Write(pa.Add(verOff), vb[:])
			}
			casAt[n] = wb.CAS(pa.Add(ctlOff), lw, ver)
		}
		// The following reads, on every replica of the round, after its release there.
		var rbufs [][]readBufs
		var ridx [][]int
		if len(follow) > 0 {
			ts = r.targets() // without the replicas the lock round found down
			rbufs, ridx = make([][]readBufs, len(ts)), make([][]int, len(ts))
			for k, i := range ts {
				for _, j := range follow {
					op := &b.Ops[j]
					n := Stride * len(op.Buf)
					rb := readBufs{make([]byte, n), make([]byte, n), make([]byte, n)}
					pa := r.Phys(i, op.Addr)
					ridx[k] = append(ridx[k], wb.Read(pa, rb.c1), wb.Read(pa, rb.v), wb.Read(pa, rb.c3))
					rbufs[k] = append(rbufs[k], rb)
				}
			}
		}
		posted := r.rt.Now()
		_ = r.m.Do(ctx, &wb)
		served := false
		if len(follow) > 0 {
			okR := make([]bool, len(ts))
			for k, i := range ts {
				okR[k] = true
				for _, x := range ridx[k] {
					if _, err := wb.Result(x); err != nil {
						okR[k] = false
						r.note(i, posted, err)
						break
					}
				}
				if okR[k] {
					r.note(i, posted, nil)
				}
			}
			if ref := r.agree(ts, okR, rbufs); ref >= 0 {
				served = true
				for n, j := range follow {
					op := &b.Ops[j]
					gather(op.Buf, rbufs[ref][n].v)
					r.remember(op.Addr, ts, okR, rbufs, n)
					transport.SetResult(op, 0, nil)
					r.stats.Reads++
				}
			}
		}
		done := 0
		for n, s := range got {
			prev, err := wb.Result(casAt[n])
			r.note(s.i, posted, err)
			switch {
			case err != nil:
				exp[s.i] = lw // still this client's lock there, or released: the next round sees
			case prev == lw:
				exp[s.i] = ver
				done++
			default:
				exp[s.i] = prev
			}
		}
		if out != nil {
			out.best, out.done = best, done
		}
		if !ok || done > r.f {
			return bestVal, served, nil
		}
		if r.settle(ctx, a, ver) {
			return bestVal, served, nil
		}
		return bestVal, false, fmt.Errorf("%w: the write reached %d replicas, outcome unknown", ErrNoQuorum, done)
	}
	return 0, false, fmt.Errorf("%w: no lock round succeeded", ErrNotWritten)
}

// settleTries bounds the identity rounds of settle.
const settleTries = 4

// settle runs when this client's write of version ver was released on at most f replicas (a
// locked replica failed in the write round: crashed, or cut off, its outcome there unknown).
// Without more, the write's outcome is unknown to the caller although at most f replicas may
// be down. settle runs identity rounds (rmw writing the latest version back, as a repairing
// read does) over the replicas that answer: one that finds ver the largest version among f+1
// replicas holding the word and releases it on f+1 of them has committed the write, as the
// first lock set to see an unfinished write completes it (see the package doc), and settle
// reports true. A larger version found, or none of ver, leaves the outcome unknown (false):
// the write may have been overtaken unseen. Cost: two round trips per identity round, at most
// settleTries of them, only after such a failure.
func (r *Memory) settle(ctx context.Context, a farmem.Addr, ver uint64) bool {
	for range settleTries {
		var out rmwOutcome
		if _, _, err := r.rmwCore(ctx, a, func(v uint64) (uint64, bool) { return v, false }, nil, nil, &out); err != nil {
			return false
		}
		switch {
		case out.best != ver:
			return false
		case out.done > r.f:
			r.stats.Settled++
			return true
		}
	}
	return false
}
