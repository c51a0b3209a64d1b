package swarm

import (
	"context"
	"fmt"

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
func (r *Register) tryLock(ctx context.Context, c farmem.ClientID, ts, mode uint64) (bool, error) {
	if c == 0 || int(c) > r.p.Writers {
		return false, fmt.Errorf("%w: client %d has no timestamp lock", ErrNotWriter, c)
	}
	want := lockWord(ts, mode)
	seen := r.cachedLock(c)
	out := func(i int) bool { return lockTS(seen[i]) >= ts }
	rounds := uint64(0)
	defer func() {
		for {
			cur := r.lockRounds.Load()
			if rounds <= cur || r.lockRounds.CompareAndSwap(cur, rounds) {
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
		rounds++
		b := new(farmem.Batch)
		idx := make([]int, r.n)
		exp := make([]uint64, r.n)
		for _, i := range todo {
			exp[i] = seen[i]
			idx[i] = b.CAS(r.lockAddr(i, c), seen[i], want)
		}
		p := r.m.Post(ctx, b)
		absorb := func(p *farmem.Pending, apply func(i int, w uint64)) {
			for _, i := range todo {
				if !p.OpDone(idx[i]) {
					continue
				}
				prev, err := b.Result(idx[i])
				if err != nil {
					continue
				}
				w := prev
				if prev == exp[i] {
					w = want
				}
				apply(i, w)
			}
		}
		if err := p.Then(func(p *farmem.Pending) {
			absorb(p, func(i int, w uint64) { r.raiseLock(c, i, w) })
		}); err != nil {
			return false, err
		}
		err := p.WaitNodes(ctx, min(r.maj-left, len(todo)))
		absorb(p, func(i int, w uint64) {
			seen[i] = max(seen[i], w)
			r.raiseLock(c, i, w)
		})
		if err != nil {
			return false, fmt.Errorf("%w: %w", errLock, err)
		}
	}
	for i := range r.n {
		if lockTS(seen[i]) > ts || (lockTS(seen[i]) == ts && seen[i] != want) {
			return false, nil
		}
	}
	return true, nil
}
