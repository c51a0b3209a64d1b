package race

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/farmem/farmem/farmem"
)

// A split moved region by region (layout version 4 tables; see SPLIT-DESIGN.md and the
// package doc's "Resizing"). The split of subtable S (depth d) into S and S1 (depth d+1)
// runs as steps, each under S's split lock, taken and released per step:
//
//   - begin: allocate S1 and write its image (header d+1, lock "held by parent", parent S,
//     every slot unborn), record it in child[d], and move S's move word to tag d;
//   - move region r: freeze r's slots in S, learn the keys of the committed ones, CAS each
//     moving word into S1's same slot from unborn to the frozen word, set r's bit in the move
//     word, then release r in both halves (in S moved and tentative slots become 0, the others
//     lose their frozen bit; in S1 unborn slots become 0 and copies lose their frozen bit);
//   - end, once every region's bit is set and nothing of S or S1 is left frozen or unborn:
//     publish S1 in the directory, move S's header to depth d+1 (counting the split), clear
//     S1's parent lock and mark child[d] done.
//
// Between two steps the table is consistent: the owner rule (move.go) tells a lookup whether
// S, S1 or both (a mixed key) hold a key. Every step is decided from far memory and is
// idempotent, so a client that takes an expired lock over (recoverSplit) redoes or finishes
// whatever a dead holder left.

// regionSplit reports whether the table splits region by region (layout version 4).
func (t *Table) regionSplit() bool { return t.version >= 4 }

// partitionOf is the partition (see ReadPartition) of the subtable with header word hdr: the
// low Params.InitialDepth bits of its suffix (a subtable is never shallower than that).
func (t *Table) partitionOf(hdr uint64) uint64 {
	return headerSuffix(hdr) & (1<<t.p.InitialDepth - 1)
}

// stepGoal is what a holder of a subtable's split lock does in one visit (stepSplit).
type stepGoal uint8

const (
	// stepOne moves one region of the split in progress (the lowest unmoved), or ends it once
	// every region moved; with begin set and no split in progress it begins one.
	stepOne stepGoal = iota
	// stepKey moves the unmoved regions of the operation's key, beginning a split if none is
	// in progress (with begin set); if they have all moved, it finishes the split.
	stepKey
	// stepAll finishes the split in progress: every remaining region, then the end.
	stepAll
)

// splitting reports whether s (a read of a subtable's header area) has a split in progress
// at its own depth: its child word for that depth is set and not done.
func (s *subtableState) splitting() bool {
	d := headerDepth(s.hdr)
	return d < MaxDepthLimit && s.child[d] != 0 && s.child[d]&childDone == 0
}

// regionSlots returns the slot indices [lo, hi) of region r (its groups are contiguous).
func (g *geometry) regionSlots(r uint) (lo, hi uint64) {
	first, last := g.groups, uint64(0)
	if g.groups <= maxRegions {
		first, last = uint64(r), uint64(r)
	} else {
		// regionOf(grp) = grp*maxRegions/groups: the groups of r are those from
		// ceil(r*groups/maxRegions) to ceil((r+1)*groups/maxRegions)-1.
		first = (uint64(r)*g.groups + maxRegions - 1) / maxRegions
		last = (uint64(r+1)*g.groups+maxRegions-1)/maxRegions - 1
	}
	return first * 3 * g.perB, (last + 1) * 3 * g.perB
}

// allRegions is the move word bitmap of a subtable whose every region moved.
func (g *geometry) allRegions() uint64 { return 1<<g.regions() - 1 }

// lockStep takes st's split lock with a CAS and reads st's header area after it in the same
// batch (one round trip), taking the lock over if its holder's lease expired. held is false
// when another client holds it.
func (t *Table) lockStep(ctx context.Context, st farmem.Addr, sm *splitMem) (word uint64, held bool, s *subtableState, prev uint64, err error) {
	la := st.Add(stLockOff)
	now := t.rt.Now()
	word = lockWord(t.id, now.Add(t.opts.Lease))
	hb := sm.hb[0]
	b := sm.batch(3)
	b.CAS(la, 0, word)
	b.Read(st, hb)
	if err := t.m.Do(ctx, b); err != nil {
		sm.lost = true
		return 0, false, nil, 0, fmt.Errorf("race: take split lock of %v: %w", st, err)
	}
	if prev, _ = b.Result(0); prev != 0 {
		if !lockExpired(prev, now, t.opts.ClockSkew) {
			return 0, false, nil, prev, nil
		}
		if word, held, prev, err = t.tryLock(ctx, la, prev); err != nil || !held {
			return 0, false, nil, prev, err
		}
		if err := t.m.Read(ctx, st, hb); err != nil {
			sm.lost = true
			return word, true, nil, prev, fmt.Errorf("race: read subtable %v: %w", st, err)
		}
	}
	s = &sm.state[0]
	*s = subtableState{st: st}
	s.decodeHeader(hb)
	return word, true, s, prev, nil
}

// stepSplit visits subtable st under its split lock (see stepGoal; op is the key of stepKey,
// and with begin set a split may begin only while st's header is still hdr). It reports
// whether it found the lock free; a held lock is not waited for (a split's step holds it
// briefly: the caller looks again), and more whether a split of st may still be in progress
// after the visit. Any state a dead holder left behind is recovered first. A new half whose
// parent's split has not ended (its lock "held by parent") is waited for through the parent
// (waitSplit), except by stepOne, which only skips it.
func (t *Table) stepSplit(ctx context.Context, st farmem.Addr, goal stepGoal, op *opState, begin bool, hdr uint64) (held, more bool, err error) {
	sm := takeSplitMem(&t.geo)
	defer giveSplitMem(sm)
	var word, prev uint64
	var s *subtableState
	word, held, s, prev, err = t.lockStep(ctx, st, sm)
	if err != nil {
		return false, true, err
	}
	if !held {
		if prev == lockParent && goal != stepOne {
			// The parent's split ends by releasing this half: wait for (or finish) it.
			return true, true, t.waitSplit(ctx, nil, st)
		}
		if goal != stepOne {
			t.stats.SplitWaits++ // a skipped step is no wait
		}
		return false, true, nil
	}
	more, err = t.stepLocked(ctx, s, &word, goal, op, begin, hdr, sm)
	if errors.Is(err, errLostLock) {
		return true, true, nil
	}
	if !sm.unlocked {
		if uerr := t.unlock(ctx, st.Add(stLockOff), word); err == nil {
			err = uerr
		}
	}
	return true, more, err
}

// stepLocked is stepSplit's work, holding the lock (*word) on s.st, whose header area s is.
func (t *Table) stepLocked(ctx context.Context, s *subtableState, word *uint64, goal stepGoal, op *opState, begin bool, hdr uint64, sm *splitMem) (bool, error) {
	d := headerDepth(s.hdr)
	if d > MaxDepthLimit {
		return false, fmt.Errorf("race: subtable %v: header %#x: %w", s.st, s.hdr, ErrCorrupt)
	}
	if d > 0 && s.child[d-1] != 0 && s.child[d-1]&childDone == 0 {
		// The previous split's end stopped after moving the header: finish it, and look at the
		// subtable afresh (recoverSplit reads it whole).
		return true, t.recoverSplit(ctx, s.st, word)
	}
	if !s.splitting() {
		if !begin || s.hdr != hdr || goal == stepAll {
			return false, nil
		}
		if d >= uint(t.p.MaxDepth) {
			return false, fmt.Errorf("race: subtable %v at depth %d: %w", s.st, d, ErrFull)
		}
		if err := t.beginSplit(ctx, s, word, sm); err != nil {
			return false, err
		}
		if goal == stepOne {
			return true, nil
		}
	} else if err := t.ensureTag(ctx, s); err != nil {
		return true, err
	}
	s1 := unpackAddr(s.child[d])
	all := t.geo.allRegions()
	switch goal {
	case stepOne:
		if rest := all &^ moveBits(s.move); rest != 0 {
			return true, t.moveRegion(ctx, s, s1, lowestBit(rest), word, sm, true)
		}
	case stepKey:
		kr := t.keyRegions(op)
		if op.k.h1>>d&1 == 0 && moveBits(s.move)>>kr[0]&1 == 1 && moveBits(s.move)>>kr[1]&1 == 1 {
			break // a staying key whose regions moved: only the split's end frees more
		}
		moved := false
		for _, r := range kr {
			if moveBits(s.move)>>r&1 == 0 {
				if err := t.moveRegion(ctx, s, s1, r, word, sm, false); err != nil {
					return true, err
				}
				moved = true
			}
		}
		if moved || op.k.h1>>d&1 == 1 {
			return true, nil
		}
	}
	// Every remaining region, then the end.
	for rest := all &^ moveBits(s.move); rest != 0; rest = all &^ moveBits(s.move) {
		if err := t.moveRegion(ctx, s, s1, lowestBit(rest), word, sm, false); err != nil {
			return true, err
		}
	}
	return false, t.endSplit(ctx, s.st, word, sm)
}

// lowestBit returns the index of the lowest set bit of x (x nonzero).
func lowestBit(x uint64) uint {
	n := uint(0)
	for x&1 == 0 {
		x >>= 1
		n++
	}
	return n
}

// ensureTag makes sure the move word of s, splitting at its depth d, carries tag d (a begin
// whose holder died between recording the child and the move word leaves an older tag).
func (t *Table) ensureTag(ctx context.Context, s *subtableState) error {
	d := headerDepth(s.hdr)
	for moveTag(s.move) < d {
		prev, err := t.m.CAS(ctx, s.st.Add(stMoveOff), s.move, moveWord(d, 0))
		if err != nil {
			return fmt.Errorf("race: move word of %v: %w", s.st, err)
		}
		if prev == s.move {
			s.move = moveWord(d, 0)
		} else {
			s.move = prev
		}
	}
	if moveTag(s.move) > d {
		return fmt.Errorf("race: subtable %v: move word %#x at depth %d: %w", s.st, s.move, d, ErrCorrupt)
	}
	return nil
}

// beginSplit begins the split of s.st at its depth d: allocates the new half (and reserves the
// directory block publishing it may need), writes its image with every slot unborn, records
// it as child[d] and sets the move word's tag to d (one batch after the image's write). Out of
// far memory, it fails with an error wrapping farmem.ErrNoSpace before changing anything.
func (t *Table) beginSplit(ctx context.Context, s *subtableState, word *uint64, sm *splitMem) error {
	st, d, suffix := s.st, headerDepth(s.hdr), headerSuffix(s.hdr)
	s1, p1, err := t.newHalf(ctx, d)
	if err != nil {
		return err
	}
	recorded := false
	defer func() {
		if !recorded {
			_ = t.a.Free(s1, t.geo.size)
		}
	}()
	if s.child[d] != 0 {
		return fmt.Errorf("race: subtable %v at depth %d: child word %#x before its split: %w", st, d, s.child[d], ErrCorrupt)
	}
	ps, _ := packAddr(st)
	img := splitImage(&t.geo, sm, headerWord(d+1, suffix|1<<d), lockParent, ps)
	for i := range t.geo.nslots {
		binary.LittleEndian.PutUint64(img[stSlotsOff+8*i:], uint64(unbornSlot))
	}
	if err := t.renew(ctx, st.Add(stLockOff), word); err != nil {
		return err
	}
	if err := t.m.Write(ctx, s1, img); err != nil {
		sm.lost = true
		return fmt.Errorf("race: write subtable %v: %w", s1, err)
	}
	if err := t.renew(ctx, st.Add(stLockOff), word); err != nil {
		return err
	}
	b := sm.batch(3)
	b.CAS(st.Add(childOff(d)), s.child[d], p1)
	tagged := moveWord(d, 0)
	if moveTag(s.move) == d {
		tagged = s.move // depth 0: the fresh word 0 is tag 0 already
	}
	b.CAS(st.Add(stMoveOff), s.move, tagged)
	if err := t.m.Do(ctx, b); err != nil {
		recorded = true // it may have landed
		return fmt.Errorf("race: record child of %v: %w", st, err)
	}
	prev, _ := b.Result(0)
	recorded = prev == s.child[d]
	if recorded {
		s.child[d] = p1
	} else {
		s.child[d] = prev
	}
	if pm, _ := b.Result(1); pm == s.move {
		s.move = tagged
	} else {
		s.move = pm
	}
	if !s.splitting() {
		return fmt.Errorf("race: subtable %v: child word %#x after beginning a split: %w", st, s.child[d], ErrCorrupt)
	}
	if recorded {
		t.stats.Begins++
	}
	return t.ensureTag(ctx, s)
}

// moveRegion moves region r of s.st (splitting at depth d into s1) to s1: freeze, learn,
// copy, set the bit, release (see the file's comment). It is idempotent: a region a dead
// holder froze or partly copied is moved again from its frozen words, which nobody else can
// have changed. s.move is updated. With last set the lock is released in the release's
// batch, after the old half's releases (sm.unlocked reports it).
func (t *Table) moveRegion(ctx context.Context, s *subtableState, s1 farmem.Addr, r uint, word *uint64, sm *splitMem, last bool) error {
	st, d, la := s.st, headerDepth(s.hdr), s.st.Add(stLockOff)
	lo, hi := t.geo.regionSlots(r)
	frozen := sm.frozen
	clear(frozen)
	if err := t.renew(ctx, la, word); err != nil {
		return err
	}
	b := sm.batch(0)
	for i := lo; i < hi; i++ {
		b.MaskedCAS(t.geo.slotAddr(st, i), 0, 0, uint64(SlotFrozen), uint64(SlotFrozen))
	}
	if err := doChunked(ctx, t.m, b); err != nil {
		sm.lost = true // the transport may still own the ops
		return fmt.Errorf("race: freeze region %d of %v: %w", r, st, err)
	}
	for i := lo; i < hi; i++ {
		prev, _ := b.Result(int(i - lo))
		frozen[i] = Slot(prev) | SlotFrozen
	}
	if err := t.learnHashes(ctx, frozen, &sm.hashes, false); err != nil {
		return err
	}
	if err := t.renew(ctx, la, word); err != nil {
		return err
	}
	// The copies, from unborn: a slot a dead holder copied already holds the same word.
	copies := sm.words[1]
	clear(copies[lo:hi])
	cb := sm.batch(1)
	at := sm.at[:0]
	for i := lo; i < hi; i++ {
		w := frozen[i]
		if h, _ := sm.hashes.get(int(i), w); w.Committed() && h>>d&1 == 1 {
			cb.CAS(t.geo.slotAddr(s1, i), uint64(unbornSlot), uint64(w))
			at = append(at, i)
		}
	}
	// With both halves on one memory node the bit's CAS rides the copies' batch, after them
	// (ordered); a copy that failed because a successor released the region already leaves a
	// bit that successor set, so the CAS then changes nothing.
	bitOp := -1
	if s1.Node() == st.Node() && moveTag(s.move) == d && moveBits(s.move)>>r&1 == 0 {
		bitOp = len(cb.Ops)
		cb.CAS(st.Add(stMoveOff), s.move, s.move|1<<r)
	}
	sm.at = at
	if len(cb.Ops) > 0 {
		if err := doChunked(ctx, t.m, cb); err != nil {
			sm.lost = true
			return fmt.Errorf("race: copy region %d of %v: %w", r, st, err)
		}
	}
	if bitOp >= 0 {
		if prev, _ := cb.Result(bitOp); prev == s.move {
			s.move |= 1 << r
		} else {
			s.move = prev
		}
	}
	for k, i := range at {
		prev, _ := cb.Result(k)
		if Slot(prev) != unbornSlot && Slot(prev) != frozen[i] {
			// Released already: another client moved the region after this one's lease
			// lapsed. If the lock is still this client's, the half holds what no split
			// wrote (a half Purge replaced with an empty subtable): an error, not a hang.
			var lb [8]byte
			if err := t.m.Read(ctx, la, lb[:]); err != nil {
				return fmt.Errorf("race: read split lock of %v: %w", st, err)
			}
			if binary.LittleEndian.Uint64(lb[:]) != *word {
				return errLostLock
			}
			return fmt.Errorf("race: new half %v slot %d holds %v, neither unborn nor the copy of %v: %w", s1, i, Slot(prev), frozen[i], ErrCorrupt)
		}
		copies[i] = frozen[i]
	}
	for i := lo; i < hi; i++ {
		if copies[i] == 0 {
			copies[i] = unbornSlot
		}
	}
	if err := t.renew(ctx, la, word); err != nil {
		return err
	}
	if err := t.setBit(ctx, s, r); err != nil {
		return err
	}
	t.stats.Moves++
	return t.releaseRegion(ctx, s, s1, r, frozen, copies, word, sm, last)
}

// setBit sets region r's bit in s's move word (tag d), updating s.move. It returns
// errLostLock if the split ended meanwhile (only a successor's work can have done that).
func (t *Table) setBit(ctx context.Context, s *subtableState, r uint) error {
	d := headerDepth(s.hdr)
	for range maxAttempts {
		if moveTag(s.move) != d {
			return errLostLock
		}
		if moveBits(s.move)>>r&1 == 1 {
			return nil
		}
		next := s.move | 1<<r
		prev, err := t.m.CAS(ctx, s.st.Add(stMoveOff), s.move, next)
		if err != nil {
			return fmt.Errorf("race: move word of %v: %w", s.st, err)
		}
		if prev == s.move {
			s.move = next
			return nil
		}
		s.move = prev
	}
	return fmt.Errorf("race: move word of %v keeps changing: %w", s.st, ErrCorrupt)
}

// releaseRegion releases region r of both halves once its bit is set: in s.st, from its
// frozen words (words, indexed by slot; the others are skipped), moved keys' slots and
// tentative and empty ones become 0 and the others lose their frozen bit (a tombstone keeps
// its delete lease in the old half); in s1, from its words as known (s1Words), unborn slots
// become 0 and frozen copies lose their frozen bit. One batch of CASes.
func (t *Table) releaseRegion(ctx context.Context, s *subtableState, s1 farmem.Addr, r uint, words, s1Words []Slot, word *uint64, sm *splitMem, unlock bool) error {
	st, d := s.st, headerDepth(s.hdr)
	lo, hi := t.geo.regionSlots(r)
	if err := t.learnHashes(ctx, words, &sm.hashes, false); err != nil {
		return err
	}
	if err := t.renew(ctx, st.Add(stLockOff), word); err != nil {
		return err
	}
	b := sm.batch(2)
	for i := lo; i < hi; i++ {
		w := words[i]
		if !w.Frozen() {
			continue
		}
		var v Slot
		if h, _ := sm.hashes.get(int(i), w); w.Committed() && h>>d&1 == 0 || w.Tombstone() {
			v = w.Plain()
		}
		b.CAS(t.geo.slotAddr(st, i), uint64(w), uint64(v))
	}
	for i := lo; i < hi; i++ {
		switch w := s1Words[i]; {
		case w == unbornSlot:
			b.CAS(t.geo.slotAddr(s1, i), uint64(w), 0)
		case w.Frozen():
			b.CAS(t.geo.slotAddr(s1, i), uint64(w), uint64(w.Plain()))
		}
	}
	if unlock {
		// Last, on the old half's node: after its releases (the new half's may land after
		// it, which a waiter that finds them frozen with the lock free recovers).
		b.CAS(st.Add(stLockOff), *word, 0)
	}
	if len(b.Ops) == 0 {
		return nil
	}
	if err := doChunked(ctx, t.m, b); err != nil {
		sm.lost = true
		return fmt.Errorf("race: release region %d of %v: %w", r, st, err)
	}
	sm.unlocked = unlock
	return nil
}

// recoverSplit, holding st's lock (*word), puts right whatever a dead or lapsed holder left:
// the end of the previous split (S1's parent lock, the child word's done mark), regions of
// the split in progress frozen or not fully released (moved again if their bit is unset,
// released if set), and frozen slots of a subtable with no split in progress (a lapsed
// holder's late freeze); a split whose every region moved is ended. It reads the subtable,
// and its new half, whole: 1 round trip each.
func (t *Table) recoverSplit(ctx context.Context, st farmem.Addr, word *uint64) error {
	sm := takeSplitMem(&t.geo)
	defer giveSplitMem(sm)
	for range 4 {
		s, d, err := t.readHeld(ctx, st, word, sm)
		if err != nil {
			return err
		}
		if d > 0 && s.child[d-1] != 0 && s.child[d-1]&childDone == 0 {
			if err := t.endTail(ctx, st, d-1, s.child[d-1]); err != nil {
				return err
			}
			continue
		}
		if !s.splitting() {
			return t.thaw(ctx, s, word, sm)
		}
		if err := t.ensureTag(ctx, s); err != nil {
			return err
		}
		s1 := unpackAddr(s.child[d])
		h1, err := t.readSplitSubtable(ctx, s1, sm, 1)
		if err != nil {
			return err
		}
		if err := t.recoverRegions(ctx, s, s1, h1.words, word, sm); err != nil {
			return err
		}
		if moveBits(s.move) == t.geo.allRegions() {
			// Every region moved: the end may have begun (the new half published, even its
			// header moved), and the new half waits for it.
			return t.endSplit(ctx, st, word, sm)
		}
		return nil
	}
	return nil
}

// recoverRegions finishes, region by region, what holders of s's split left undone (see
// recoverSplit); s.words and s1Words are whole reads of both halves made under the lock.
func (t *Table) recoverRegions(ctx context.Context, s *subtableState, s1 farmem.Addr, s1Words []Slot, word *uint64, sm *splitMem) error {
	for r := range uint(t.geo.regions()) {
		lo, hi := t.geo.regionSlots(r)
		sFrozen, s1Left := false, false
		for i := lo; i < hi; i++ {
			sFrozen = sFrozen || s.words[i].Frozen()
			s1Left = s1Left || s1Words[i].Frozen()
		}
		moved := moveBits(s.move)>>r&1 == 1
		switch {
		case !moved && sFrozen:
			if err := t.moveRegion(ctx, s, s1, r, word, sm, false); err != nil {
				return err
			}
		case moved && (sFrozen || s1Left):
			// The bit is set, so every copy is in place: only the releases are left. The
			// frozen words of the old half are final (nobody else unfreezes them).
			words := sm.frozen
			clear(words)
			copy(words[lo:hi], s.words[lo:hi])
			s1w := make([]Slot, len(s1Words))
			copy(s1w[lo:hi], s1Words[lo:hi])
			if err := t.releaseRegion(ctx, s, s1, r, words, s1w, word, sm, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// thaw releases frozen slots of a subtable with no split in progress at its depth (a lapsed
// holder's freeze landing after its region was moved and released): every key there is the
// subtable's, so committed words and tombstones lose their frozen bit and the others become
// 0 (a tentative slot's inserter starts over, as after any split).
func (t *Table) thaw(ctx context.Context, s *subtableState, word *uint64, sm *splitMem) error {
	var b farmem.Batch
	for i, w := range s.words {
		if !w.Frozen() {
			continue
		}
		var v Slot
		if w.Committed() || w.Tombstone() {
			v = w.Plain()
		}
		b.CAS(t.geo.slotAddr(s.st, uint64(i)), uint64(w), uint64(v))
	}
	if len(b.Ops) == 0 {
		return nil
	}
	if err := t.renew(ctx, s.st.Add(stLockOff), word); err != nil {
		return err
	}
	if err := doChunked(ctx, t.m, &b); err != nil {
		return fmt.Errorf("race: release subtable %v: %w", s.st, err)
	}
	return nil
}

// endSplit ends the split in progress of st once every region's bit is set: it reads both
// halves whole and releases what a dead holder left frozen or unborn (recoverRegions), then
// publishes the new half in the directory, moves st's header to depth d+1 (the client whose
// CAS succeeds counts the split), and finishes with endTail.
func (t *Table) endSplit(ctx context.Context, st farmem.Addr, word *uint64, sm *splitMem) error {
	s, d, err := t.readHeld(ctx, st, word, sm)
	if err != nil {
		return err
	}
	if !s.splitting() {
		return nil
	}
	suffix := headerSuffix(s.hdr)
	if moveTag(s.move) != d || moveBits(s.move) != t.geo.allRegions() {
		return fmt.Errorf("race: subtable %v: ending a split at depth %d with move word %#x: %w", st, d, s.move, ErrCorrupt)
	}
	cw := s.child[d]
	s1 := unpackAddr(cw)
	h1, err := t.readSplitSubtable(ctx, s1, sm, 1)
	if err != nil {
		return err
	}
	if err := t.recoverRegions(ctx, s, s1, h1.words, word, sm); err != nil {
		return err
	}
	if err := t.publishAndDeepen(ctx, st, s1, d, suffix, word); err != nil {
		return err
	}
	return t.endTail(ctx, st, d, cw)
}

// endTail finishes the end of st's split at depth d, whose header moved: clears the new
// half's parent lock (it may split on its own from then on) and marks the child word cw done.
func (t *Table) endTail(ctx context.Context, st farmem.Addr, d uint, cw uint64) error {
	if _, err := t.m.CAS(ctx, unpackAddr(cw).Add(stLockOff), lockParent, 0); err != nil {
		return fmt.Errorf("race: release subtable %v: %w", unpackAddr(cw), err)
	}
	if _, err := t.m.CAS(ctx, st.Add(childOff(d)), cw, cw|childDone); err != nil {
		return fmt.Errorf("race: mark split of %v done: %w", st, err)
	}
	t.stats.Splits++
	return nil
}

// FinishSplits finishes every split in progress of a table split region by region
// (layout version 4) that it reaches from the directory along child words, moving their
// remaining regions and ending them, and returns how many it ended. A split stays half done
// while nobody inserts into its subtable; ReadPartition refuses a partition holding one, so a
// caller that must read a quiet partition (a FlexKV hand-over) finishes its splits first
// (FinishPartitionSplits). A split another client is stepping meanwhile is waited for, a step
// at a time. Tables of layout versions 2 and 3 have none (0, nil). Cost: one round trip per
// subtable visited, and per split some 5 round trips per remaining region plus the end's.
func (t *Table) FinishSplits(ctx context.Context) (int, error) {
	return t.finishSplits(ctx, -1)
}

// FinishPartitionSplits is FinishSplits for the subtables of partition p alone (those the
// directory entries whose low Params.InitialDepth bits are p lead to: see ReadPartition),
// visiting only them. It fails with farmem.ErrInvalid if p is not a partition.
func (t *Table) FinishPartitionSplits(ctx context.Context, p int) (int, error) {
	if p < 0 || p >= 1<<t.p.InitialDepth {
		return 0, fmt.Errorf("race: partition %d of %d: %w", p, 1<<t.p.InitialDepth, farmem.ErrInvalid)
	}
	return t.finishSplits(ctx, p)
}

// finishSplitOf ends the split in progress of subtable st, if any, waiting a step at a time for
// another client's; it returns st's header area as read at the end and 1 if this handle ended
// the split (0 otherwise).
func (t *Table) finishSplitOf(ctx context.Context, st farmem.Addr) (*subtableState, int, error) {
	s, err := t.readSubtable(ctx, st, false)
	if err != nil {
		return nil, 0, err
	}
	ended := 0
	var backoff time.Duration
	for attempt := 0; s.splitting(); attempt++ {
		if attempt >= maxAttempts {
			return s, ended, fmt.Errorf("race: finish split of %v: %w", st, ErrCorrupt)
		}
		held, more, err := t.stepSplit(ctx, st, stepAll, nil, false, 0)
		if err != nil {
			return s, ended, err
		}
		if !held {
			if err := t.splitPause(ctx, &backoff); err != nil {
				return s, ended, err
			}
		} else if !more {
			ended++
		}
		if s, err = t.readSubtable(ctx, st, false); err != nil {
			return s, ended, err
		}
	}
	return s, ended, nil
}

// finishSplits is FinishSplits over partition p's subtables, or every subtable if p < 0.
func (t *Table) finishSplits(ctx context.Context, p int) (int, error) {
	if err := t.usable(); err != nil {
		return 0, err
	}
	if !t.regionSplit() {
		return 0, nil
	}
	if err := t.pin(ctx); err != nil {
		return 0, err
	}
	defer t.unpin()
	if err := t.refreshAll(ctx); err != nil {
		return 0, err
	}
	seen := make(map[farmem.Addr]bool)
	var queue []farmem.Addr
	parts := uint64(1)<<t.p.InitialDepth - 1
	for j, e := range t.dir {
		if p >= 0 && uint64(j)&parts != uint64(p) {
			continue
		}
		if st := unpackAddr(e); !seen[st] {
			seen[st] = true
			queue = append(queue, st)
		}
	}
	ended := 0
	for len(queue) > 0 {
		st := queue[0]
		queue = queue[1:]
		s, n, err := t.finishSplitOf(ctx, st)
		ended += n
		if err != nil {
			return ended, err
		}
		for _, cw := range s.child {
			if child := unpackAddr(cw); cw != 0 && !seen[child] {
				seen[child] = true
				queue = append(queue, child)
			}
		}
	}
	if seen[t.pending] {
		t.pending, t.pendingBegin = 0, false // ended (or never begun: a quiet table needs none)
	}
	return ended, nil
}
