package swarm

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/farmem/farmem/ds/maxreg"

	"github.com/farmem/farmem/farmem"
)

// Timestamp-lock words. One per writer per replica, compared as unsigned integers:
//
//	bits 63..1  the timestamp (the tag's 47-bit timestamp; 0: never locked)
//	bit  0      the mode: 1 WRITE, 0 READ
//
// A word only ever moves to a larger timestamp (a CAS is issued only while the word's
// timestamp is below the one being locked), so it never switches mode for one timestamp and
// its value only grows: a cached value is a lower bound of it.
const (
	modeRead  uint64 = 0
	modeWrite uint64 = 1
)

func lockWord(ts, mode uint64) uint64 { return ts<<1 | mode }

func lockTS(w uint64) uint64 { return w >> 1 }

// lockAddr returns the lock word of writer c on replica i.
func (r *Register) lockAddr(i int, c farmem.ClientID) farmem.Addr {
	return r.locks[i] + farmem.Addr(8*(uint64(c)-1))
}

// cachedLock returns a copy of what the handle knows of writer c's lock words.
func (r *Register) cachedLock(c farmem.ClientID) []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.lockCache[c]
	if s == nil {
		s = make([]uint64, r.n)
		r.lockCache[c] = s
	}
	return append([]uint64(nil), s...)
}

// raiseLock raises the cached lock word of writer c on replica i to w.
func (r *Register) raiseLock(c farmem.ClientID, i int, w uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.lockCache[c]
	if s == nil {
		s = make([]uint64, r.n)
		r.lockCache[c] = s
	}
	s[i] = max(s[i], w)
}

// tryLock is the paper's TRYLOCK(ts, mode) on writer c's timestamp lock: for each replica, CAS
// the word from the value last seen to (ts, mode) until the word's timestamp is at least ts (a
// failed CAS returns a strictly larger word), all replicas in parallel, one round trip per
// round, until a majority has left its loop; replicas it stopped waiting for finish through
// the batch's completion hook, which raises the cache. It returns false if a word seen holds a
// larger timestamp, or ts in the other mode; true otherwise. TRYLOCK(ts, READ) and
// TRYLOCK(ts, WRITE) never both return true (two majorities share a replica, whose word never
// switches mode for ts). Rounds: one when the cache is right, more per concurrent locker.
//
// Lease. The replicas it counts as holding (ts, mode) are those that answered so in the
// current attempt, whose rounds are all posted within Params.Lease of its first (on the
// client's clock): a round due later starts a new attempt, which counts only answers to its
// own rounds (a replica whose word is known to hold (ts, mode) already is read again, in the
// same batch as the other replicas' CASes). An answer from a replica that restarted since is
// so never paired with answers from after its adoption, which waits out the fabric's down
// timeout, the lease and twice the skew before copying (kvstore's Swarm kind): every CAS an
// attempt counts has applied on the replicas the copy reads before it reads them (see
// "Failures" in the package doc). A word seen holding a larger timestamp or ts in the other
// mode, in any attempt or in the cache, makes the lock fail (failing is always safe).
//
// wb, if not nil, is the write-back of the larger tuple the writer's read returned: its ops go
// into the first round's batch, ahead of the CASes on each replica, so a replica's word holds
// (ts, WRITE) only after the write-back applied there (see the package doc's Round trips). In
// read mode every round also reads each replica's metadata words after the CASes there, so a
// reader that finds ts locked in write mode on a replica also learns the tuple written back
// there before it.
func (r *Register) tryLock(ctx context.Context, c farmem.ClientID, ts, mode uint64, wb *maxreg.WriteBack) (bool, error) {
	if c == 0 || int(c) > r.p.Writers {
		return false, fmt.Errorf("%w: client %d has no timestamp lock", ErrNotWriter, c)
	}
	want := lockWord(ts, mode)
	// seen: per replica, the largest word known (the cache, every answer): the CASes'
	// expectations and the evidence of failure. cur: the word a replica answered in the
	// current attempt (answered), the only evidence of success.
	seen := r.cachedLock(c)
	cur := make([]uint64, r.n)
	answered := make([]bool, r.n)
	failed := func(w uint64) bool { return lockTS(w) > ts || (lockTS(w) == ts && w != want) }
	out := func(i int) bool { return failed(seen[i]) || (answered[i] && lockTS(cur[i]) >= ts) }
	rounds := uint64(0)
	var attempt farmem.Time // when the current attempt posted its first round
	attemptRounds := 0
	outCount := func() int {
		n := 0
		for i := range r.n {
			if out(i) {
				n++
			}
		}
		return n
	}
	pendingCAS := func(p *farmem.Pending, cas []int) bool {
		for _, i := range cas {
			if !p.NodeDone(r.locks[i].Node()) {
				return true
			}
		}
		return false
	}
	probed := false // a replica was found locked in write mode with a larger tuple (read mode)
	defer func() {
		if probed {
			r.stats.ReadLockProbed++
		}
		if mode == modeWrite {
			r.maxWLock = max(r.maxWLock, rounds)
		}
		for {
			most := r.lockRounds.Load()
			if rounds <= most || r.lockRounds.CompareAndSwap(most, rounds) {
				return
			}
		}
	}()
	for {
		left := 0
		var todo []int
		for i := range r.n {
			if out(i) {
				left++
			} else {
				todo = append(todo, i)
			}
		}
		if left >= r.maj {
			break
		}
		now := r.rt.Now()
		if attemptRounds > 0 && now.Sub(attempt) > r.p.Lease {
			// The lease ran out: the answers so far count no more (see Lease above).
			r.stats.LockRestarts++
			attemptRounds = 0
			clear(answered)
			continue
		}
		if attemptRounds == 0 {
			attempt = now
		}
		attemptRounds++
		rounds++
		b := new(farmem.Batch)
		// Per replica, the CASes of this round in posting order, with the value each expects:
		// the word last seen, then (for this handle's own lock) the larger words the replica
		// may hold by now (see candidates). They apply in order at the replica, so the first
		// whose expectation holds installs want and the others fail harmlessly. A replica
		// whose word is known to hold want already (from an earlier attempt) is read instead.
		idx := make([][]int, r.n)
		exp := make([][]uint64, r.n)
		rd := make([]int, r.n)
		rbuf := make([][]byte, r.n)
		if wb != nil && rounds == 1 {
			for i := range r.n {
				wb.Add(i, b)
			}
		}
		var probe *maxreg.Probe
		if mode == modeRead {
			probe = r.rep.NewProbe()
		}
		var cas []int // the replicas this round CASes or reads the word of
		for _, i := range todo {
			rd[i] = -1
			if wb != nil && rounds == 1 && !wb.Sure(i) {
				// The write-back may not install m there: the lock waits for a later round,
				// so that a replica never holds (ts, WRITE) without m.
				continue
			}
			cas = append(cas, i)
			last := seen[i]
			if answered[i] {
				last = cur[i]
			}
			if lockTS(last) >= ts {
				rbuf[i] = make([]byte, 8)
				rd[i] = b.Read(r.lockAddr(i, c), rbuf[i])
			} else {
				for _, e := range r.candidates(c, last, ts) {
					exp[i] = append(exp[i], e)
					idx[i] = append(idx[i], b.CAS(r.lockAddr(i, c), e, want))
				}
			}
			if probe != nil {
				probe.Add(i, b)
			}
		}
		carried := wb
		if rounds != 1 {
			carried = nil
		}
		// The replicas this round reaches, counted before the post: once posted, the batch's
		// ops (and their results) belong to the transport until they are done.
		nodes := len(cas)
		for i := range r.n {
			if !slices.Contains(cas, i) && slices.ContainsFunc(b.Ops, func(op farmem.Op) bool { return op.Addr.Node() == r.locks[i].Node() }) {
				nodes++
			}
		}
		p := r.m.Post(ctx, b)
		// A replica's results count once all its ops are done: its word seen then comes with
		// the write-back or the probe that the same batch carried. apply gets, per replica,
		// the word it holds after this round's ops there.
		absorb := func(p *farmem.Pending, hook bool, apply func(i int, w uint64)) {
			if carried != nil {
				carried.Absorb(p, hook)
			}
			if probe != nil {
				probe.Absorb(p, hook)
			}
			for _, i := range cas {
				if !p.NodeDone(r.locks[i].Node()) {
					continue
				}
				if rd[i] >= 0 {
					if _, err := b.Result(rd[i]); err == nil {
						apply(i, binary.LittleEndian.Uint64(rbuf[i]))
					}
					continue
				}
				var w uint64
				ok := false
				for j, k := range idx[i] {
					if !p.OpDone(k) {
						continue
					}
					prev, err := b.Result(k)
					if err != nil {
						continue
					}
					if prev == exp[i][j] {
						prev = want
					}
					w, ok = max(w, prev), true
				}
				if ok {
					apply(i, w)
				}
			}
		}
		if err := p.Then(func(p *farmem.Pending) {
			absorb(p, true, func(i int, w uint64) { r.raiseLock(c, i, w) })
		}); err != nil {
			return false, err
		}
		// Wait for as many replicas as could complete the majority; when some of them did not
		// leave their loop (or carried only the write-back), wait on for the round's other
		// CASes before posting another round: each replica's loop is its own (Appendix B).
		k := min(r.maj-left, nodes)
		for {
			err := p.WaitNodes(ctx, k)
			absorb(p, false, func(i int, w uint64) {
				seen[i] = max(seen[i], w)
				cur[i], answered[i] = w, true
				r.raiseLock(c, i, w)
			})
			if probe != nil && !probed {
				probed = r.probedAbove(p, b, probe, cas, idx, c, ts)
			}
			if err != nil && k == min(r.maj-left, nodes) {
				return false, fmt.Errorf("%w: %w", errLock, err)
			}
			if err != nil || k >= nodes || outCount() >= r.maj || !pendingCAS(p, cas) {
				break
			}
			k++
		}
	}
	for i := range r.n {
		if failed(seen[i]) {
			return false, nil
		}
	}
	return true, nil
}

// probedAbove reports whether one of the replicas cas of p (a read-mode round of
// TRYLOCK(ts, READ) on writer c's lock, posted as b, its CASes at idx) is complete, returned
// (ts, WRITE) from a CAS and, from the probe read behind that CAS, a metadata word above the
// tuple (ts, c): the writer's write-back reached that replica ahead of its lock, and the
// probe has raised what the handle knows the replica holds, so the reader's next M read
// returns a larger tuple whichever majority answers it (the package doc's Round trips).
func (r *Register) probedAbove(p *farmem.Pending, b *farmem.Batch, probe *maxreg.Probe, cas []int, idx [][]int, c farmem.ClientID, ts uint64) bool {
	locked := lockWord(ts, modeWrite)
	for _, i := range cas {
		if !p.NodeDone(r.locks[i].Node()) {
			continue
		}
		sawWrite := false
		for _, k := range idx[i] {
			if prev, err := b.Result(k); err == nil && prev == locked {
				sawWrite = true
			}
		}
		if top, ok := probe.Top(p, i); sawWrite && ok && top > maxreg.MakeTag(ts, c, true) {
			return true
		}
	}
	return false
}

// maxCandidates bounds the CASes one round of a TRYLOCK sends to one replica.
const maxCandidates = 16

// candidates returns the values, ascending, that one round of TRYLOCK(ts, ·) on writer c's
// lock expects on a replica whose word was last seen holding last: last itself and, when c is
// this handle's own writer, every word the replica may have moved to since without reaching
// ts: a read-mode or write-mode lock on one of this writer's own earlier timestamps above
// last's (only readers that read those tuples, and this writer, lock this word). With them
// all in one batch, the writer's TRYLOCK takes one round whatever readers pinned meanwhile
// (each CAS is one iteration of Appendix B's loop, pipelined; each expects a timestamp below
// ts, so none overwrites ts or a larger one). At most maxCandidates: the most recent ones.
func (r *Register) candidates(c farmem.ClientID, last, ts uint64) []uint64 {
	out := []uint64{last}
	if c != r.id {
		return out
	}
	var more []uint64
	for _, t := range r.mine {
		if t < ts && lockWord(t, modeRead) > last {
			more = append(more, lockWord(t, modeRead))
		}
		if t < ts && lockWord(t, modeWrite) > last {
			more = append(more, lockWord(t, modeWrite))
		}
	}
	if len(more) > maxCandidates-1 {
		more = more[len(more)-(maxCandidates-1):]
	}
	return append(out, more...)
}

// noteGuess records ts, a timestamp this writer published GUESSED, as a value its lock words
// may take, and forgets those no replica's cached word is below any more.
func (r *Register) noteGuess(ts uint64) {
	low := lockTS(slices.Min(r.cachedLock(r.id)))
	kept := r.mine[:0]
	for _, t := range r.mine {
		if t >= low {
			kept = append(kept, t)
		}
	}
	r.mine = append(kept, ts)
}
