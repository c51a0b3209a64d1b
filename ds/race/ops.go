package race

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/bits"
	"time"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/ptrsync"
	"github.com/farmem/farmem/farmem"
)

// newBlock is a KV block an operation writes.
type newBlock struct {
	addr     farmem.Addr
	bytes    []byte
	size     uint64 // bytes allocated (whole Units)
	slot     Slot   // its committed slot word
	deadline farmem.Time
	written  bool
	visible  bool // a slot has held it: other clients may have read it
	// reps are the block's copies on other memory nodes (Params.Replicas), written with it.
	reps []replica
}

// replica is one copy of a new block: its address and bytes (encoded for that address).
type replica struct {
	addr  farmem.Addr
	bytes []byte
}

// replicated reports whether the table keeps several copies of each block (then every block
// is in the allocator's symmetric area).
func (t *Table) replicated() bool { return t.p.Replicas > 1 && len(t.memNodes) > 1 }

// addBlockWrites appends the writes of nb and its copies to b.
func addBlockWrites(b *farmem.Batch, nb *newBlock) {
	b.Write(nb.addr, nb.bytes)
	for _, r := range nb.reps {
		b.Write(r.addr, r.bytes)
	}
}

// freeBlockAt frees a block no slot ever held (all its copies).
func (t *Table) freeBlockAt(a farmem.Addr, size uint64) error {
	if t.replicated() {
		return t.a.FreeSymmetric(alloc.SymOffset(a.Offset()), size)
	}
	return t.a.Free(a, size)
}

// makeBlock allocates and encodes (but does not write) a block of op's key and val, in the
// scratch: the operation's previous new block, if any, must be dropped first.
func (t *Table) makeBlock(ctx context.Context, op *opState, val []byte, deadline farmem.Time) (*newBlock, error) {
	n := blockSize(len(op.key), len(val))
	size := (n + Unit - 1) &^ (Unit - 1)
	var a farmem.Addr
	var primary int
	if t.replicated() {
		o, err := t.a.AllocSymmetric(ctx, size, Unit)
		if err != nil {
			return nil, fmt.Errorf("race: allocate replicated KV block: %w", err)
		}
		primary = int(op.k.h2>>8) % len(t.memNodes)
		a = o.On(t.memNodes[primary])
	} else {
		var err error
		if a, err = t.a.Alloc(ctx, size, Unit); err != nil {
			return nil, fmt.Errorf("race: allocate KV block: %w", err)
		}
	}
	s, err := MakeSlot(op.fp, n, a)
	if err != nil {
		_ = t.freeBlockAt(a, size)
		return nil, err
	}
	if t.pf != nil {
		// The lines the block's write will fill, asked for while it is encoded.
		t.pf.Prefetch(a, int(size))
	}
	sc := t.scr
	sc.enc = grow(sc.enc, int(size))
	stamp := t.stamp()
	// Field by field rather than a literal (every field is set): no zeroed temporary copied
	// over the scratch, no pointer store for a block without copies.
	nb := &sc.nb
	nb.addr, nb.bytes, nb.size, nb.slot, nb.deadline = a, encodeBlockVersion(sc.enc, a, op.key, val, deadline, stamp, t.version), size, s, deadline
	nb.written, nb.visible = false, false
	if nb.reps != nil {
		nb.reps = nil
	}
	if indexReplicas(t.root) > 1 {
		// A replicated table writes the block's whole extent, the Unit-rounded size readers
		// read: a tail left from the block's previous life would be what it was on the
		// replicas that saw that life and version 0 on one repopulated since (which never
		// copied a freed block), and such a replica and one other could then never agree on
		// the read (replmem reads need f+1 replicas agreeing on every word).
		tail := sc.enc[len(sc.nb.bytes):size]
		clear(tail)
		sc.nb.bytes = sc.enc[:size]
	}
	if t.replicated() {
		for i := 1; i < min(t.p.Replicas, len(t.memNodes)); i++ {
			ra := farmem.MakeAddr(t.memNodes[(primary+i)%len(t.memNodes)], a.Offset())
			rb := encodeBlockVersion(make([]byte, size), ra, op.key, val, deadline, stamp, t.version)
			sc.nb.reps = append(sc.nb.reps, replica{ra, rb})
		}
	}
	return &sc.nb, nil
}

// dropBlock gives back a block the operation will not publish: freed at once if no slot ever
// held it, retired otherwise.
func (t *Table) dropBlock(ctx context.Context, nb *newBlock) {
	switch {
	case nb == nil:
	case nb.visible:
		t.retire(ctx, nb.slot)
	default:
		_ = t.freeBlockAt(nb.addr, nb.size)
	}
}

// Search returns the value stored under key, or ErrNotFound. It never waits for another client:
// not for a split (frozen slots are read as usual), nor for a writer.
//
// Cost: 2 round trips when the key is present (both combined buckets and the subtable header in
// one batch, then the KV block), 1 when no slot has the key's fingerprint, 2 when one has
// without holding the key; plus 1 per stale directory entry (2 after a doubling) and a retry of
// the whole when a block fails validation. With an address cache (Options.AddressCache), 1
// (CachedSearchRoundTrips) when the handle found the key before and its block is still the
// key's value, with no pin or clock reading; a stale entry adds 1 to the costs above.
func (t *Table) Search(ctx context.Context, key []byte) ([]byte, error) {
	return t.AppendSearch(ctx, nil, key)
}

// AppendSearch is Search that appends the value to dst and returns the extended slice (dst
// itself, with ErrNotFound or another error): a caller that reuses dst with room for the value
// reads it with no allocation. A nil dst gives Search's fresh copy. The costs are Search's.
func (t *Table) AppendSearch(ctx context.Context, dst, key []byte) ([]byte, error) {
	if t.closed {
		return dst, t.usable()
	}
	t.stats.Searches++
	op := t.newOp(key)
	op.dst = dst
	early := t.ac.early()
	if early {
		t.prefetchLookup(op)
	}
	// A handle without cache entries (none kept yet, or no cache) has nothing to consult.
	if t.ac.sets != nil {
		if v, ok := t.searchCached(ctx, op); ok {
			t.ac.lookedUp(false)
			return v, nil
		}
	}
	t.ac.lookedUp(true)
	if !early {
		t.prefetchLookup(op)
	}
	op.keepValue = true
	op.matchOnly = true
	op.search = true
	straight := t.straightSearch()
	for {
		if err := t.pinRead(ctx); err != nil {
			return dst, err
		}
		var val []byte
		var err error
		if straight {
			val, err = t.searchStraight(ctx, op)
		} else {
			val, err = t.search(ctx, op)
		}
		ok := t.unpin()
		if err != nil && !errors.Is(err, ErrNotFound) {
			return dst, err
		}
		if !ok {
			// The allocator's lease ran out: blocks read may have been reused. Read again.
			op.forget()
			continue
		}
		if err != nil {
			return dst, err
		}
		return val, nil
	}
}

// search is a Search's pinned section on the general path: look the key up (locate), then read
// its one candidate block (searchOne) or all of them (findKey), looking again while a block
// fails validation.
func (t *Table) search(ctx context.Context, op *opState) ([]byte, error) {
	return t.searchFrom(ctx, op, nil)
}

// searchFrom is search whose first look, with first set, read the buckets already: first is
// that look's view, not yet checked against the owner rule (searchStraight hands over so).
func (t *Table) searchFrom(ctx context.Context, op *opState, first *view) ([]byte, error) {
	for range maxAttempts {
		var v view
		var err error
		if first != nil {
			v, err = t.locateFrom(ctx, op, nil, first)
			first = nil
		} else {
			v, err = t.locate(ctx, op, nil)
		}
		if err != nil {
			return nil, err
		}
		if len(v.words) == 1 && !t.replicated() && indexReplicas(t.root) <= 1 {
			st, idx := t.viewSlot(&v, 0)
			val, err := t.searchOne(ctx, op, v.words[0], st, idx)
			if errors.Is(err, errStale) {
				continue
			}
			return val, err
		}
		j, err := t.findKey(ctx, op, &v, false)
		if errors.Is(err, errStale) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if j < 0 {
			return nil, ErrNotFound
		}
		w := blockKey(v.words[j])
		info, _ := op.info(w)
		st, idx := t.viewSlot(&v, j)
		t.ac.keep(op, w, st, idx, info.stamp)
		return info.value, nil
	}
	return nil, fmt.Errorf("race: search: blocks keep failing validation: %w", ErrCorrupt)
}

// Insert stores value under key if the table does not hold key, and returns ErrExists if it
// does.
//
// It writes the KV block while it reads the key's buckets, then CASes an empty slot to a
// tentative word (invisible to readers) and re-reads the buckets in the same batch, then
// commits the slot with a second CAS once no other slot holds the key; concurrent inserters of
// one key settle which of them commits by slot position (see the package doc).
//
// Cost: 3 round trips when no slot has the key's fingerprint (write ∥ read, CAS ∥ re-read,
// commit), 4 when one has (its block is read before the tentative CAS); more under
// contention, and a split when both buckets are full. One clock reading when it commits
// uncontended (see the package doc's Clock readings); one more round trip after an idle time
// longer than Options.PinBudget.
func (t *Table) Insert(ctx context.Context, key, value []byte) error {
	if err := t.usable(); err != nil {
		return err
	}
	if err := checkKV(key, value); err != nil {
		return err
	}
	t.stats.Inserts++
	op := t.newOp(key)
	t.prefetchLookup(op)
	// The section starts with no clock reading (pinRead: pinAt is the allocator's last reading,
	// a lower bound of the start, which makes the block's lease and the budget fresh checks
	// shorter, never longer, than measured from the start). The one reading of an insert that
	// commits is fresh's before the tentative CAS, which the allocator is told of (NoteClock),
	// so the section ends with unpinSeen; one that finds the key reads the clock at its unpin
	// instead, to know that the key's block was read while the lease held.
	if err := t.pinRead(ctx); err != nil {
		return err
	}
	defer t.unpinSeen()
	// exists is the answer of an insert that found the key: ErrExists if the blocks it read
	// were read under a lease that held (Unpin, with a reading of its own). If the lease ran
	// out, a block may have been reused since its slot was read: it pins again and returns
	// nil (or the pin's error), and the insert looks again.
	exists := func() error {
		if t.unpin() {
			return ErrExists
		}
		op.forget()
		return t.pinRead(ctx)
	}
	var nb *newBlock
	for attempt := 0; ; attempt++ {
		if attempt >= maxAttempts {
			t.dropBlock(ctx, nb)
			return fmt.Errorf("race: insert: no progress after %d attempts: %w", attempt, ErrCorrupt)
		}
		// The first attempt starts right after pin's clock reading: it serves (a deadline
		// from it is at most that much earlier, which only shortens the block's lease).
		now := t.pinAt
		if attempt > 0 {
			now = t.rt.Now()
		}
		if nb == nil || nb.visible || now > nb.deadline.Add(-t.opts.Lease/2) {
			// A block whose tentative slot was ever in place is not reused (others may hold it
			// as a competitor's), nor one whose lease is half gone.
			t.dropBlock(ctx, nb)
			var err error
			if nb, err = t.makeBlock(ctx, op, value, now.Add(t.opts.Lease)); err != nil {
				return err
			}
		}
		var pre *newBlock
		if !nb.written {
			pre = nb
		}
		v, err := t.locate(ctx, op, pre)
		if err != nil {
			t.dropBlock(ctx, nb)
			return err
		}
		nb.written = true
		j, err := t.findKey(ctx, op, &v, false)
		if errors.Is(err, errStale) {
			continue
		}
		if err != nil {
			t.dropBlock(ctx, nb)
			return err
		}
		if j >= 0 {
			t.dropBlock(ctx, nb)
			nb = nil
			if err := exists(); err != nil {
				return err
			}
			continue
		}
		if v.frozen() {
			if err := t.waitSplit(ctx, op, v.st); err != nil {
				t.dropBlock(ctx, nb)
				return err
			}
			continue
		}
		x, free := t.pickEmpty(op, &v)
		if x < 0 {
			split := t.split
			if t.regionSplit() {
				split = func(ctx context.Context, _ farmem.Addr, _ uint64) error { return t.splitFull(ctx, op, &v) }
			}
			if err := split(ctx, v.st, v.hdr); err != nil {
				t.dropBlock(ctx, nb)
				return err
			}
			continue
		}
		if ok, err := t.fresh(ctx, op); err != nil || !ok {
			if err != nil {
				t.dropBlock(ctx, nb)
				return err
			}
			// Re-pinned: the block is written again with the next look (see Table.fresh).
			nb.written = false
			continue
		}
		st, idx := v.st, v.idx[x] // before tryInsert decodes its re-read over v
		res, err := t.tryInsert(ctx, op, nb, &v, x)
		if err != nil {
			// The outcome is unknown: a tentative slot of ours may stay in place (its lease
			// lets others remove it, a split drops it) or even be committed; the block leaks.
			return err
		}
		switch res {
		case inserted:
			// The commit published the block: the key's committed value, for the address cache.
			t.ac.keep(op, blockKey(nb.slot), st, idx, blockStamp(nb.bytes))
			if t.regionSplit() {
				t.afterInsert(ctx, &v, free)
			}
			return nil
		case found:
			t.dropBlock(ctx, nb)
			nb = nil
			if err := exists(); err != nil {
				return err
			}
		}
	}
}

type insertResult uint8

const (
	restart insertResult = iota
	inserted
	found // the key exists
)

// pickEmpty returns the position in v of an empty slot of the combined bucket with more empty
// slots, chosen at random among them (so that concurrent inserters into one bucket rarely
// pick the same slot), or -1 if both are full, and how many empty slots that bucket has.
func (t *Table) pickEmpty(op *opState, v *view) (int, int) {
	return t.pickFree(op, v, t.rt.Rand().IntN)
}

// pickFree is pickEmpty with the random choice made by pick (pick(c) is in [0, c)).
func (t *Table) pickFree(op *opState, v *view, pick func(int) int) (int, int) {
	n := int(2 * t.geo.perB)
	want := n // the view's length when it is whole (decodeView)
	if !op.same {
		want += min(int(op.ranges[1]-op.ranges[0]), n)
	}
	if len(v.words) > 64 || len(v.words) != want || op.matchOnly {
		return t.pickFreeSlow(op, v, pick)
	}
	// A whole view (decodeView) holds the first combined bucket's n slots at positions
	// [0, n), then the second's slots not among them: the second bucket is positions
	// [min(d, n), len), d its distance from the first. One pass marks the free slots; the
	// clock is read only if a tombstone is met (free needs it then).
	var free uint64
	var now farmem.Time
	clock := false
	for j, w := range v.words {
		if w != 0 {
			if !w.Tombstone() || w.Frozen() {
				continue
			}
			if !clock {
				now, clock = t.rt.Now(), true
			}
			if !t.free(w, now) {
				continue
			}
		}
		free |= 1 << j
	}
	all := uint64(1)<<len(v.words) - 1
	if len(v.words) == 64 {
		all = ^uint64(0)
	}
	best := free & (1<<n - 1)
	if !op.same {
		d := min(int(op.ranges[1]-op.ranges[0]), n)
		if second := free & all &^ (1<<d - 1); bits.OnesCount64(second) > bits.OnesCount64(best) {
			best = second
		}
	}
	c := bits.OnesCount64(best)
	if c == 0 {
		return -1, 0
	}
	for k := pick(c); k > 0; k-- {
		best &= best - 1
	}
	return bits.TrailingZeros64(best), c
}

// pickFreeSlow is pickFree for any view (pickFree's fast path takes whole views of at most
// 64 slots): a count of the free slots of each combined bucket, then a walk to the chosen one.
func (t *Table) pickFreeSlow(op *opState, v *view, pick func(int) int) (int, int) {
	var best uint64
	bestN := 0
	now := t.rt.Now()
	for r, start := range op.ranges {
		if r == 1 && op.same {
			break
		}
		n := 0
		for j, i := range v.idx {
			if i >= start && i < start+2*t.geo.perB && t.free(v.words[j], now) {
				n++
			}
		}
		if n > bestN {
			best, bestN = start, n
		}
	}
	if bestN == 0 {
		return -1, 0
	}
	k := pick(bestN)
	for j, i := range v.idx {
		if i >= best && i < best+2*t.geo.perB && t.free(v.words[j], now) {
			if k == 0 {
				return j, bestN
			}
			k--
		}
	}
	return -1, 0 // unreachable: bestN empty slots were counted
}

// nearlyFull is the most empty slots an insert may find in the better of its key's combined
// buckets for it to begin a split of the subtable (layout version 4): the split then moves a
// region per insert, and should end before a bucket fills.
const nearlyFull = 2

// splitFull makes room for an insert whose view v found both of its key's combined buckets
// full (layout version 4): in a split's new half (v.from set), it finishes the parent's split
// in progress, after which the half may split; in a subtable, it begins a split if none is in
// progress and moves the key's regions, or, when they have moved already, finishes the split.
// A step another client holds is not waited for beyond a pause: the insert looks again.
func (t *Table) splitFull(ctx context.Context, op *opState, v *view) error {
	st, goal, begin := v.st, stepKey, true
	if v.from != 0 {
		st, goal, begin = v.from, stepAll, false
	}
	held, _, err := t.stepSplit(ctx, st, goal, op, begin, v.hdr)
	if err != nil || held {
		return err
	}
	return t.splitPause(ctx, &op.backoff)
}

// afterInsert is what an insert that committed in view v, whose better bucket had free
// empty slots, does before returning (layout version 4): it notes a split in progress it met
// or, finding its bucket nearly full, asks for a split of v's subtable, and then moves one
// region of the handle's pending split (or begins or ends it). A step that fails, or whose
// lock another client holds, is left to a later insert (every step is idempotent and
// recovered from far memory); the insert has committed either way.
func (t *Table) afterInsert(ctx context.Context, v *view, free int) {
	switch {
	case v.from != 0:
		t.notePending(v.from)
	case free <= nearlyFull && t.pending == 0 && headerDepth(v.hdr) < uint(t.p.MaxDepth):
		t.pending, t.pendingBegin, t.pendingHdr = v.st, true, v.hdr
	}
	if t.pending == 0 {
		return
	}
	if t.pendingBegin && t.partitionOf(v.hdr) != t.partitionOf(t.pendingHdr) {
		// A begin deferred (the lock was busy) is made only by an insert into the same
		// partition: a proxy (kvstore's FlexKV) may have taken the other partition over
		// since, and no split may begin under it. The next insert that finds the subtable
		// nearly full asks again.
		t.pending, t.pendingBegin = 0, false
		return
	}
	held, more, err := t.stepSplit(ctx, t.pending, stepOne, nil, t.pendingBegin, t.pendingHdr)
	switch {
	case err != nil || held && !more:
		t.pending, t.pendingBegin = 0, false
	case held:
		t.pendingBegin = false
	}
}

// free reports whether an insert may take a slot holding w at now: it is empty and not
// frozen, and a tombstone's delete lease has run out (plus ClockSkew).
func (t *Table) free(w Slot, now farmem.Time) bool {
	return w == 0 || w.Tombstone() && !w.Frozen() && w.ReusableAt().Add(t.opts.ClockSkew) < now
}

// tryInsert CASes slot v.idx[x] from empty to nb's tentative word, re-reading the buckets in the
// same batch, and then settles the insert (resolve).
func (t *Table) tryInsert(ctx context.Context, op *opState, nb *newBlock, v *view, x int) (insertResult, error) {
	i := v.idx[x]
	tw := nb.slot | SlotTentative
	b := t.batch()
	b.CAS(t.geo.slotAddr(v.st, i), uint64(v.words[x]), uint64(tw))
	t.addReads(b, op, v.st)
	t.stats.Lookups++
	if err := t.m.Do(ctx, b); err != nil {
		t.lost()
		return restart, fmt.Errorf("race: CAS tentative slot: %w", err)
	}
	if prev, _ := b.Result(0); prev != uint64(v.words[x]) {
		t.stats.Conflicts++
		return restart, nil
	}
	nb.visible = true
	rv := t.decodeView(op, v.st, &t.scr.rv)
	return t.resolve(ctx, op, nb, i, tw, rv)
}

// resolve settles an insert whose tentative word tw is in slot i of v.st, v being a read of
// the key's buckets made after the tentative CAS. The rules (see the package doc): a committed
// slot of the key means it exists; a tentative one of the key at a lower position wins, so
// this insert waits for it to commit or vanish (removing it once its lease expired); tentative
// ones at higher positions lose and are removed; then this insert commits.
func (t *Table) resolve(ctx context.Context, op *opState, nb *newBlock, i uint64, tw Slot, v view) (insertResult, error) {
	var backoff time.Duration
	slot := t.geo.slotAddr(v.st, i)
	retract := func() error {
		if _, err := t.m.CAS(ctx, slot, uint64(tw), 0); err != nil {
			return fmt.Errorf("race: retract tentative slot: %w", err)
		}
		return nil
	}
	for try := range maxAttempts {
		if t.owner(op, &v) != ownsAll {
			// The subtable split since the lookup, and the key now belongs to the other half
			// (or the re-read was torn across the start of a split: look again).
			if err := retract(); err != nil {
				return restart, err
			}
			return restart, t.refresh(ctx, op.k.h1)
		}
		if w, _ := v.word(i); w != tw {
			// Removed by a competitor or frozen by a split (which drops tentative slots).
			if w.Frozen() {
				return restart, t.waitSplit(ctx, op, v.st)
			}
			return restart, nil
		}
		if v.frozen() {
			// A split is freezing the subtable. The whole split drops the tentative slot; a
			// region split drops it only if it freezes the slot's region, and the frozen slot
			// may be in the other bucket's: retract it, or the insert's next try would wait for
			// its own tentative slot's lease to run out.
			if t.regionSplit() {
				if err := retract(); err != nil {
					return restart, err
				}
			}
			return restart, t.waitSplit(ctx, op, v.st)
		}
		js := t.matching(op, &v, func(s Slot) bool { return blockKey(s) != blockKey(tw) })
		if err := t.learn(ctx, op, &v, js, false); err != nil {
			if !errors.Is(err, errStale) {
				return restart, err
			}
			nv, err := t.reread(ctx, op, v.st, nil)
			if err != nil {
				return restart, err
			}
			v = nv
			continue
		}
		var lower, higher []int
		for _, j := range js {
			w := v.words[j]
			if info, _ := op.info(blockKey(w)); !info.isKey {
				continue
			}
			if w.Committed() {
				return found, retract()
			}
			if v.idx[j] < i {
				lower = append(lower, j)
			} else {
				higher = append(higher, j)
			}
		}
		if len(lower) > 0 {
			// Wait for the lower competitor to commit (then the key exists) or to go; remove it
			// once its lease has expired (its owner is dead or stalled, and will restart).
			var kb farmem.Batch
			now := t.rt.Now()
			for _, j := range lower {
				if info, _ := op.info(blockKey(v.words[j])); info.deadline.Add(t.opts.ClockSkew) < now {
					kb.CAS(t.geo.slotAddr(v.st, v.idx[j]), uint64(v.words[j]), 0)
					t.stats.Kills++
				}
			}
			if len(kb.Ops) == 0 {
				if err := t.sleep(ctx, &backoff); err != nil {
					return restart, err
				}
			}
			nv, err := t.reread(ctx, op, v.st, &kb)
			if err != nil {
				return restart, err
			}
			v = nv
			continue
		}
		if len(higher) > 0 {
			var kb farmem.Batch
			for _, j := range higher {
				kb.CAS(t.geo.slotAddr(v.st, v.idx[j]), uint64(v.words[j]), 0)
			}
			if err := t.m.Do(ctx, &kb); err != nil {
				return restart, fmt.Errorf("race: remove competing tentative slots: %w", err)
			}
			moved := false
			for k, j := range higher {
				prev, _ := kb.Result(k)
				switch Slot(prev) {
				case v.words[j]:
					t.stats.Kills++
				case 0:
					// Gone already (retracted, removed, or committed and since deleted).
				default:
					// It committed before we could remove it, and may since have been updated:
					// the key exists, unless it was deleted since. Read again to know.
					moved = true
				}
			}
			if moved {
				nv, err := t.reread(ctx, op, v.st, nil)
				if err != nil {
					return restart, err
				}
				v = nv
				continue
			}
		}
		// The budget is checked again before the commit unless nothing was read since the
		// check that preceded the tentative CAS but the re-read in its batch, which this
		// decision rests on only for slot words, not blocks (the first pass found no other
		// slot with the key's fingerprint): the commit then follows that check by one round
		// trip, as every CAS follows its check by a flight, within the lease's margin over
		// PinBudget. A replicated table checks anyway: Repopulate's bound counts from the
		// block's write to its commit.
		recheck := try > 0 || len(js) > 0 || t.replicated() || indexReplicas(t.root) > 1
		if ok, err := t.freshIf(ctx, op, recheck); err != nil || !ok {
			if err == nil {
				err = retract()
			}
			return restart, err
		}
		prev, err := t.m.CAS(ctx, slot, uint64(tw), uint64(tw&^SlotTentative))
		if err != nil {
			return restart, fmt.Errorf("race: commit slot: %w", err)
		}
		if Slot(prev) == tw {
			return inserted, nil
		}
		t.stats.Conflicts++
		if Slot(prev).Frozen() {
			return restart, t.waitSplit(ctx, op, v.st)
		}
		return restart, nil
	}
	return restart, fmt.Errorf("race: insert: competitors never settled: %w", ErrCorrupt)
}

// reread reads op's buckets in st again, after the ops already in pre (if any), in one batch.
// The view is in tryInsert's storage: the one it replaces is dead.
func (t *Table) reread(ctx context.Context, op *opState, st farmem.Addr, pre *farmem.Batch) (view, error) {
	if pre == nil {
		pre = t.batch()
	}
	t.addReads(pre, op, st)
	t.stats.Lookups++
	if err := t.m.Do(ctx, pre); err != nil {
		t.lost()
		return view{}, fmt.Errorf("race: re-read buckets: %w", err)
	}
	return t.decodeView(op, st, &t.scr.rv), nil
}

// Update replaces the value stored under key, or returns ErrNotFound if the table does not hold
// key. The pointer change is the synchronizer's (Options.Sync).
//
// Cost with Optimistic, uncontended: 3 round trips (new KV block written ∥ buckets read, the
// head of the key's block read: its header and the key, not the value; CAS); each lost CAS
// costs 1 more (the winner's block read) and a CAS.
func (t *Table) Update(ctx context.Context, key, value []byte) error {
	if err := t.usable(); err != nil {
		return err
	}
	if err := checkKV(key, value); err != nil {
		return err
	}
	t.stats.Updates++
	return t.change(ctx, ptrsync.Update, key, value, nil)
}

// Delete removes key, or returns ErrNotFound if the table does not hold it. The pointer change
// is the synchronizer's (Options.Sync).
//
// Cost with Optimistic, uncontended: 3 round trips (buckets read, the head of the key's block
// read, CAS); the old block is retired with no verb.
func (t *Table) Delete(ctx context.Context, key []byte) error {
	if err := t.usable(); err != nil {
		return err
	}
	t.stats.Deletes++
	return t.change(ctx, ptrsync.Delete, key, nil, nil)
}

// change runs an Update (value) or a Delete of key through the synchronizer. A Delete with
// cond set is DeleteIf's: the key's block must hold *cond (ErrChanged otherwise, and a CAS
// retries only over a word whose block holds it too: condDelete).
func (t *Table) change(ctx context.Context, kind ptrsync.Kind, key, value []byte, cond *[]byte) error {
	op := t.newOp(key)
	// The buckets are asked for before the entry is read when entries have mostly failed of
	// late (addrCache.early).
	early := t.ac.early()
	if early {
		t.prefetchLookup(op)
	}
	// The key's address-cache entry is taken out of the cache (a committed Update keeps its new
	// block's entry when it ends): it may spare the lookup (changeCached).
	ce, ae := t.ac.take(op)
	op.invalidate = t.opts.Invalidate
	op.keepValue = cond != nil
	// Only committed slots with the key's fingerprint matter to findKey, the one reader of
	// this operation's views (a replicated index keeps the whole view, as before: its
	// failure handling was validated that way).
	op.matchOnly = indexReplicas(t.root) <= 1
	// findOne, which reads only a block's head, is what such an operation uses when its view
	// holds one candidate (oneCandidate also needs no lock words read with it).
	op.keyOnly = op.matchOnly && !op.keepValue && !t.replicated()
	cached := ce.word != 0 && op.keyOnly && ce.slot(&t.geo).Node() == ce.word.Addr().Node() &&
		t.adoptionCount() == t.adoptions
	skipped := cached && (ce.volatile() || !t.ac.useful())
	cached = cached && !skipped
	if !cached && !early {
		t.prefetchLookup(op)
	}
	// The section starts with no clock reading (pinAt is then a lower bound of its start, so
	// the deadline below is, if anything, early), Commit's deadline check before each CAS is
	// the one reading before it, and a committed change's retire and unpin use that reading:
	// one reading in all (see the package doc, "Clock readings").
	if err := t.pinRead(ctx); err != nil {
		return err
	}
	// The section ends here whatever changePinned returns (no deferred closure on the path of
	// every change): with unpinSeen after a committed change's retire, which read or was
	// handed the clock after the last access.
	var retired bool
	var err error
	if cached && kind == ptrsync.Update && cond == nil && t.straight != nil {
		retired, err = t.updateStraight(ctx, key, value, op, &ce, ae)
	} else {
		retired, err = t.changePinned(ctx, kind, key, value, cond, op, &ce, ae, cached, skipped)
	}
	if retired {
		t.unpinSeen()
	} else {
		t.unpin()
	}
	return err
}

// changePinned is change's pinned section: ce is the entry taken (ae the key's entry in use,
// see acEntry.holds), cached whether the first look goes through it, skipped whether it was passed
// over (volatile or not useful). retired reports a committed change's retire of the replaced
// block (its clock reading then serves the unpin).
func (t *Table) changePinned(ctx context.Context, kind ptrsync.Kind, key, value []byte, cond *[]byte, op *opState,
	ce *acEntry, ae *acEntry, cached, skipped bool) (retired bool, _ error) {
	c := t.changeOf(kind, key, value, op)
	plan := t.sync.Plan(kind, op.k.identity())
	return t.changePlanned(ctx, c, cond, op, ce, ae, cached, skipped, plan)
}

// changeOf returns the scratch's change for an operation of kind on key (value: an Update's),
// with no block yet. The fields of the slot (subtable to oldValid) are set before each
// Commit; a literal assignment of the whole struct cost the Put some 3% of its CPU time.
func (t *Table) changeOf(kind ptrsync.Kind, key, value []byte, op *opState) *change {
	c := &t.scr.change
	c.kind, c.key, c.value, c.t, c.op, c.blk = kind, key, value, t, op, nil
	return c
}

// changePlanned is changePinned once the synchronizer has planned the operation: the new
// block made (unless the plan defers its write), then the attempts (changeLoop).
func (t *Table) changePlanned(ctx context.Context, c *change, cond *[]byte, op *opState,
	ce *acEntry, ae *acEntry, cached, skipped bool, plan ptrsync.Plan) (retired bool, _ error) {
	plan.Prefetch = plan.Prefetch && t.lockSize > 0
	// A plan that wants the lock entry read with the lookup takes the lookup (a volatile
	// entry's skip is counted only where the entry would have been used).
	cached = cached && !plan.Prefetch
	if skipped && !plan.Prefetch {
		t.stats.CacheSkips++
	}
	var pre *newBlock
	if c.kind == ptrsync.Update && !plan.DeferWrite {
		nb, err := t.makeBlock(ctx, op, c.value, 0)
		if err != nil {
			return false, err
		}
		c.blk = nb
		pre = nb
	}
	return t.changeLoop(ctx, c, cond, op, ce, ae, cached, plan, pre, 0, false)
}

// changeLoop makes the attempts of a change c, from attempt first: each looks the key up (the
// first through the address-cache entry ce when cached) and commits through the synchronizer,
// until one commits or fails. pre is the new block if it is yet to be written (with the next
// look). looked says that attempt 0's look through the entry was made already, and missed
// (updateStraight hands over so): attempt 0 then begins with the lookup, its counts made.
func (t *Table) changeLoop(ctx context.Context, c *change, cond *[]byte, op *opState,
	ce *acEntry, ae *acEntry, cached bool, plan ptrsync.Plan, pre *newBlock, first int, looked bool) (retired bool, _ error) {
	kind := c.kind
	var target ptrsync.Target = c
	if cond != nil {
		target = condDelete{change: c, want: *cond}
	}
	// v is set by changeCached (a hit) or locate before every use.
	var v view
	for attempt := first; attempt < maxAttempts; attempt++ {
		j, hit := 0, false
		if attempt == 0 && !looked {
			if cached {
				var err error
				hit, err = t.changeCached(ctx, op, ce, pre, &v)
				if err != nil {
					t.dropBlock(ctx, c.blk)
					return false, err
				}
				if hit {
					t.ac.miss(op, ae, -1)
				} else {
					t.ac.miss(op, ae, +1)
				}
				if pre != nil {
					c.blk.written, pre = true, nil
				}
				if !hit {
					t.prefetchLookup(op)
				}
			}
			if t.ac.size > 0 {
				t.ac.lookedUp(!hit)
			}
		}
		if !hit {
			var err error
			v, err = t.locate(ctx, op, pre)
			if err != nil {
				t.dropBlock(ctx, c.blk)
				return false, err
			}
			if pre != nil {
				c.blk.written, pre = true, nil
			}
			if t.oneCandidate(op, &v, plan.Prefetch) {
				j, err = t.findOne(ctx, op, v.words[0])
			} else {
				j, err = t.findKey(ctx, op, &v, plan.Prefetch)
			}
			if errors.Is(err, errStale) {
				continue
			}
			if err != nil {
				t.dropBlock(ctx, c.blk)
				return false, err
			}
			if j < 0 {
				t.dropBlock(ctx, c.blk)
				return false, ErrNotFound
			}
			if attempt == 0 && !cached && ce.word != 0 {
				// The entry taken was not used: count what it would have found.
				if blockKey(v.words[j]) == ce.word {
					t.ac.miss(op, ae, -1)
				} else {
					t.ac.miss(op, ae, +1)
				}
			}
		}
		w := v.words[j]
		if cond != nil {
			if info, _ := op.info(blockKey(w)); !bytes.Equal(info.value, *cond) {
				return false, ErrChanged
			}
		}
		if w.Frozen() {
			if err := t.waitSplit(ctx, op, v.st); err != nil {
				t.dropBlock(ctx, c.blk)
				return false, err
			}
			continue
		}
		i := v.idx[j]
		c.subtable, c.index, c.slot, c.meta, c.metaBytes = v.st, i, t.geo.slotAddr(v.st, i), t.geo.metaAddr(v.st, i), op.metaOf(i)
		c.old = w
		// The cached look read the old block's head without setting its valid word: Install
		// sets it, in the CAS's batch.
		c.oldValid = hit && op.invalidate
		res, err := t.sync.Commit(ctx, target)
		if err != nil {
			// Unknown outcome: the new block may be in place; it is leaked rather than freed.
			return false, err
		}
		switch res.Outcome {
		case ptrsync.Committed:
			if c.blk != nil {
				c.blk.visible = true
				// Install's CAS published this block: the key's committed value, which the
				// address cache may name (a Combined change's block never was).
				t.ac.keepAt(op, ae, blockKey(c.blk.slot), c.subtable, c.index, blockStamp(c.blk.bytes))
			}
			// The retire takes the reading of the deadline check before the CAS when the
			// synchronizer reports it (the budget that bounds the CAS bounds the unlink), and
			// reads the clock after the CAS otherwise; that reading is the section's end.
			return t.retireAt(ctx, Slot(res.Replaced), res.CheckedAt), nil
		case ptrsync.Combined:
			t.dropBlock(ctx, c.blk)
			return false, nil
		}
		if pre, err = t.changeRetried(ctx, op, c); err != nil {
			return false, err
		}
	}
	t.dropBlock(ctx, c.blk)
	return false, fmt.Errorf("race: %v: no progress after %d attempts: %w", kind, maxAttempts, ErrCorrupt)
}

// changeRetried is what a change does after a Commit of c returned Retry: Commit checks the
// deadline (the pinned section's budget) before every CAS and returns Retry past it, so it
// re-pins, as fresh does, before looking again; a change still within its budget lost its CAS
// (a conflict). It returns the new block if it is to be written again with the next look (after
// a re-pin: see Table.fresh), or the error that ends the change (its block dropped).
func (t *Table) changeRetried(ctx context.Context, op *opState, c *change) (*newBlock, error) {
	if ok, err := t.fresh(ctx, op); err != nil || !ok {
		if err != nil {
			t.dropBlock(ctx, c.blk)
			return nil, err
		}
		if c.blk != nil && c.blk.written {
			c.blk.written = false
			return c.blk, nil
		}
		return nil, nil
	}
	t.stats.Conflicts++
	return nil, nil
}

// stamp returns a new block's stamp: a hash of the client's id, a count of the blocks this
// handle made and the fabric time (the pinned section's pinAt, the start or a lower bound of
// it: no clock reading of its own), so that two blocks written at one address (reused after a deferred
// free) differ with probability 1-2^-32 without drawing on the runtime's random source.
func (t *Table) stamp() uint32 {
	t.stamps++
	at := t.pinAt
	if !t.pinned {
		at = t.rt.Now()
	}
	return uint32(fmix(uint64(t.id)<<48 ^ t.stamps ^ uint64(at)*mulA))
}
