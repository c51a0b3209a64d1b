package race

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/farmem/farmem/farmem"
)

// errLostLock: a lock's lease ran out and another client took it over; the work is theirs now.
var errLostLock = errors.New("race: lock taken over")

// errDirMoved: the directory was replaced while this client thought it held the directory lock.
var errDirMoved = errors.New("race: directory replaced under the lock")

// subtableState is a read of a subtable's header area and slots.
type subtableState struct {
	st     farmem.Addr
	hdr    uint64
	lock   uint64
	parent farmem.Addr
	move   uint64 // the move word (layout version 4)
	child  [MaxDepthLimit]uint64
	words  []Slot
}

const headerAreaLen = stSlotsOff

func (s *subtableState) decodeHeader(b []byte) {
	le := binary.LittleEndian
	s.hdr = le.Uint64(b[stHeaderOff:])
	s.lock = le.Uint64(b[stLockOff:])
	s.parent = unpackAddr(le.Uint64(b[stParentOff:]))
	s.move = le.Uint64(b[stMoveOff:])
	for l := range s.child {
		s.child[l] = le.Uint64(b[childOff(uint(l)):])
	}
}

// readSubtable reads st's header area and, if slots is set, its slots (one round trip; the
// slots are read after the header area, in order).
func (t *Table) readSubtable(ctx context.Context, st farmem.Addr, slots bool) (*subtableState, error) {
	hb := make([]byte, headerAreaLen)
	var sb []byte
	var b farmem.Batch
	b.Read(st, hb)
	if slots {
		sb = make([]byte, t.geo.nslots*8)
		b.Read(t.geo.slotAddr(st, 0), sb)
	}
	if err := t.m.Do(ctx, &b); err != nil {
		return nil, fmt.Errorf("race: read subtable %v: %w", st, err)
	}
	s := &subtableState{st: st}
	s.decodeHeader(hb)
	if slots {
		s.words = make([]Slot, t.geo.nslots)
		for i := range s.words {
			s.words[i] = Slot(binary.LittleEndian.Uint64(sb[8*i:]))
		}
	}
	return s, nil
}

// walk follows child words from st, a subtable whose header does not cover a key with first
// hash h1, down to the subtable that does. Every directory entry names an ancestor of (or the
// same subtable as) the subtable that covers its suffix, so the walk always arrives; it
// matters only when the directory lags (an entry not yet updated, or an update lost to a
// client that stalled past its lease). One round trip per hop.
func (t *Table) walk(ctx context.Context, st farmem.Addr, h1 uint64) (farmem.Addr, uint, error) {
	for range maxAttempts {
		t.stats.Walks++
		s, err := t.readSubtable(ctx, st, false)
		if err != nil {
			return 0, 0, err
		}
		if covers(s.hdr, h1) {
			return st, headerDepth(s.hdr), nil
		}
		d, suffix := headerDepth(s.hdr), headerSuffix(s.hdr)
		if d > MaxDepthLimit {
			return 0, 0, fmt.Errorf("race: subtable %v: header %#x: %w", st, s.hdr, ErrCorrupt)
		}
		// The first bit where the key leaves this subtable: the subtable kept the half with a
		// 0 there when it split at that depth, and the child holds the other half.
		l := uint(0)
		for ; l < d && (h1>>l)&1 == (suffix>>l)&1; l++ {
		}
		if (suffix>>l)&1 == 1 {
			return 0, 0, fmt.Errorf("race: subtable %v (depth %d, suffix %#x) is no ancestor of hash %#x: %w",
				st, d, suffix, h1, ErrCorrupt)
		}
		next := unpackAddr(s.child[l])
		if next == 0 {
			// Torn read of the header area (the child word is written before the header): read
			// again.
			continue
		}
		st = next
	}
	return 0, 0, fmt.Errorf("race: walk from %v: %w", st, ErrCorrupt)
}

// tryLock tries to take the lock word at a: free, or held by a client whose lease has
// expired (a take-over). It returns the word it installed.
func (t *Table) tryLock(ctx context.Context, a farmem.Addr, seen uint64) (word uint64, held bool, prev uint64, err error) {
	now := t.rt.Now()
	if seen != 0 && !lockExpired(seen, now, t.opts.ClockSkew) {
		return 0, false, seen, nil
	}
	word = lockWord(t.id, now.Add(t.opts.Lease))
	prev, err = t.m.CAS(ctx, a, seen, word)
	if err != nil {
		return 0, false, 0, fmt.Errorf("race: take lock %v: %w", a, err)
	}
	if prev == seen {
		if seen != 0 {
			t.stats.Recoveries++
		}
		return word, true, prev, nil
	}
	if seen == 0 && lockExpired(prev, now, t.opts.ClockSkew) {
		return t.tryLock(ctx, a, prev)
	}
	return 0, false, prev, nil
}

// renew extends the lease of the lock word at a if half of it has run: one CAS. It returns
// errLostLock if another client took the lock over.
func (t *Table) renew(ctx context.Context, a farmem.Addr, word *uint64) error {
	now := t.rt.Now()
	if now < lockDeadline(*word).Add(-t.opts.Lease/2) {
		return nil
	}
	next := lockWord(t.id, now.Add(t.opts.Lease))
	prev, err := t.m.CAS(ctx, a, *word, next)
	if err != nil {
		return fmt.Errorf("race: renew lock %v: %w", a, err)
	}
	if prev != *word {
		return errLostLock
	}
	*word = next
	return nil
}

// unlock releases the lock word at a if it still holds word.
func (t *Table) unlock(ctx context.Context, a farmem.Addr, word uint64) error {
	if _, err := t.m.CAS(context.WithoutCancel(ctx), a, word, 0); err != nil {
		return fmt.Errorf("race: release lock %v: %w", a, err)
	}
	return nil
}

// split splits subtable st, whose header an inserter saw as hdr with both of its key's combined
// buckets full. If another client holds st's lock it waits for that client instead.
func (t *Table) split(ctx context.Context, st farmem.Addr, hdr uint64) error {
	if headerDepth(hdr) >= uint(t.p.MaxDepth) {
		return fmt.Errorf("race: subtable %v at depth %d: %w", st, headerDepth(hdr), ErrFull)
	}
	la := st.Add(stLockOff)
	word, held, prev, err := t.tryLock(ctx, la, 0)
	if err != nil {
		return err
	}
	if !held {
		if prev == lockParent || prev != 0 {
			return t.waitSplit(ctx, nil, st)
		}
		return nil
	}
	err = t.runSplit(ctx, st, &word, hdr, false)
	if errors.Is(err, errLostLock) {
		return nil
	}
	if uerr := t.unlock(ctx, la, word); err == nil {
		err = uerr
	}
	return err
}

// waitSplit waits for the split that froze slots of st (or, st being a half that split has not
// released yet, its parent's) to finish, taking the split over if its lease expired. A lock
// found free returns at once the first time for op (the split just ended); found free again,
// with the caller still seeing frozen slots, it is taken and the split finished (its owner
// gave up, after an error).
func (t *Table) waitSplit(ctx context.Context, op *opState, st farmem.Addr) error {
	t.stats.SplitWaits++
	var backoff time.Duration
	la := st.Add(stLockOff)
	for range maxAttempts {
		s, err := t.readSubtable(ctx, st, false)
		if err != nil {
			return err
		}
		switch {
		case s.lock == lockParent:
			if s.parent == 0 {
				return fmt.Errorf("race: subtable %v: parent lock without a parent: %w", st, ErrCorrupt)
			}
			if t.regionSplit() {
				// The half stays "held by parent" for the whole split, moved region by
				// region: the frozen slots that sent op here are one step's, and waiting
				// for (or recovering) the parent's step is enough.
				return t.waitSplit(ctx, op, s.parent)
			}
			if err := t.waitSplit(ctx, nil, s.parent); err != nil {
				return err
			}
			continue
		case s.lock == 0 && op != nil && op.waited != st:
			op.waited = st
			return nil
		case s.lock == 0 || lockExpired(s.lock, t.rt.Now(), t.opts.ClockSkew):
			word, held, _, err := t.tryLock(ctx, la, s.lock)
			if err != nil {
				return err
			}
			if !held {
				continue
			}
			if t.regionSplit() {
				err = t.recoverSplit(ctx, st, &word)
			} else {
				err = t.runSplit(ctx, st, &word, 0, true)
			}
			if errors.Is(err, errLostLock) {
				continue
			}
			if uerr := t.unlock(ctx, la, word); err == nil {
				err = uerr
			}
			return err
		}
		if err := t.splitPause(ctx, &backoff); err != nil {
			return err
		}
	}
	return fmt.Errorf("race: waiting for split of %v: %w", st, ErrCorrupt)
}

// maxSplitPoll caps the pause between two polls of a split another client holds (or
// Options.Backoff, if longer): a waiter resumes at most that long plus one read after the split
// releases its lock. The cost is polls: one read of the subtable's header area (5 Units) per
// pause, about (split duration)/maxSplitPoll of them during a long split (some ten for a split
// of the default geometry on cxl, under a millisecond), where pauses doubling up to a
// millisecond (maxBackoff) polled less but overshot the split's end by up to a millisecond.
const maxSplitPoll = 64 * time.Microsecond

// splitPause pauses a split's waiter for the current backoff and doubles it, up to
// maxSplitPoll.
func (t *Table) splitPause(ctx context.Context, d *time.Duration) error {
	if *d == 0 {
		*d = t.opts.Backoff
	}
	if err := t.rt.Sleep(ctx, *d); err != nil {
		return err
	}
	*d = min(2**d, max(maxSplitPoll, t.opts.Backoff))
	return nil
}

// runSplit, holding st's lock (*word), finishes the split of st in progress if any, then, when
// not recoverOnly and st's header is still expect, splits st. Every step is idempotent and
// decided from far memory alone, so a client that takes over an expired lock resumes where the
// previous holder stopped.
func (t *Table) runSplit(ctx context.Context, st farmem.Addr, word *uint64, expect uint64, recoverOnly bool) error {
	sm := takeSplitMem(&t.geo) // the split's reads, and the first hash of the key of each block read
	defer giveSplitMem(sm)
	for range 4 {
		s, hd, err := t.readHeld(ctx, st, word, sm)
		if err != nil {
			return err
		}
		if hd > 0 && s.child[hd-1] != 0 && s.child[hd-1]&childDone == 0 {
			// The split at hd-1 updated the header; its slots and new half are not all released.
			if err := t.finishSplit(ctx, s, hd-1, false, word, sm); err != nil {
				return err
			}
			continue
		}
		if hd < MaxDepthLimit && s.child[hd] != 0 && s.child[hd]&childDone == 0 {
			// The split at hd wrote its new half; publish it and finish.
			if err := t.finishSplit(ctx, s, hd, true, word, sm); err != nil {
				return err
			}
			continue
		}
		anyFrozen := false
		for _, w := range s.words {
			anyFrozen = anyFrozen || w.Frozen()
		}
		if !anyFrozen && (recoverOnly || s.hdr != expect) {
			return nil
		}
		if hd >= uint(t.p.MaxDepth) {
			return fmt.Errorf("race: subtable %v at depth %d: %w", st, hd, ErrFull)
		}
		// A new split at depth hd, or one whose holder stopped before writing the new half.
		if err := t.startSplit(ctx, s, word, sm); err != nil {
			return err
		}
		recoverOnly = true // finish it on the next round, then stop
	}
	return nil
}

// startSplit allocates what the split needs, then freezes every slot of s.st, copies the slots
// whose keys move into a new subtable (frozen too, released only at the end, beside a frozen
// empty slot per overflow bucket that holds none of them: splitSentinels) and records it as
// the child for depth hd. Everything is allocated before anything is frozen: when far memory is
// exhausted the split fails with an error wrapping farmem.ErrNoSpace and the subtable is left
// exactly as it was (no slot frozen), so its keys stay deletable and updatable, and the insert
// that asked for the split can be retried once memory is freed.
func (t *Table) startSplit(ctx context.Context, s *subtableState, word *uint64, sm *splitMem) (err error) {
	st, d, suffix := s.st, headerDepth(s.hdr), headerSuffix(s.hdr)
	hashes := &sm.hashes
	// 0. Allocate: the new half, and the doubled directory when publishing will need one.
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
	// 1. Learn the keys' hashes before freezing, so that the slots stay frozen only for the
	// blocks committed since and for the split's writes, not for reading every block. Only in a
	// pinned section: what is learnt is kept only if the section is still within its budget
	// once the slots are frozen, so that no block read here can have been reused by then.
	early := t.pinned
	if early {
		if err := t.learnHashes(ctx, s.words, hashes, true); err != nil {
			return err
		}
	}
	// 2. Freeze: set the frozen bit of every slot, learning its final value.
	frozen := sm.frozen[:len(s.words)]
	fb := takeSplitBuf()
	b := farmem.Batch{Ops: fb.ops[:0]}
	pos := sm.pos[:0]
	for i, w := range s.words {
		if w.Frozen() {
			frozen[i] = w
			continue
		}
		pos = append(pos, i)
		b.MaskedCAS(t.geo.slotAddr(st, uint64(i)), 0, 0, uint64(SlotFrozen), uint64(SlotFrozen))
	}
	fb.ops, sm.pos = b.Ops, pos
	if len(pos) > 0 {
		if err := doChunked(ctx, t.m, &b); err != nil {
			// The transport may still own the batch: its ops are not reused.
			return fmt.Errorf("race: freeze subtable %v: %w", st, err)
		}
	}
	for k, i := range pos {
		prev, _ := b.Result(k)
		frozen[i] = Slot(prev) | SlotFrozen
	}
	giveSplitBuf(fb)
	// 3. Which keys move: those whose first hash has bit d set.
	if early && t.rt.Now().Sub(t.pinAt) > t.opts.PinBudget {
		// Pinned too long for what was learnt unfrozen to be trusted: learn it all again.
		hashes.forget()
	}
	if err := t.learnHashes(ctx, frozen, hashes, false); err != nil {
		return err
	}
	if err := t.renew(ctx, st.Add(stLockOff), word); err != nil {
		return err
	}
	// 4. The new half: a subtable of depth d+1 and suffix suffix|1<<d, locked by its parent's
	// split, holding frozen copies of the moved slots at the same indices (a key's bucket
	// choice does not depend on the suffix), empty slots elsewhere, and a frozen empty slot in
	// every overflow bucket that holds no moved slot (splitSentinels).
	ps, _ := packAddr(st)
	img := splitImage(&t.geo, sm, headerWord(d+1, suffix|1<<d), lockParent, ps)
	for i, w := range frozen {
		if h, _ := hashes.get(i, w); w.Committed() && h>>d&1 == 1 {
			binary.LittleEndian.PutUint64(img[stSlotsOff+8*i:], uint64(w))
		}
	}
	t.geo.splitSentinels(img[stSlotsOff : stSlotsOff+8*t.geo.nslots])
	if err := t.m.Write(ctx, s1, img); err != nil {
		sm.lost = true // the transport may still own img
		return fmt.Errorf("race: write subtable %v: %w", s1, err)
	}
	// 5. Record it. Only a lock holder writes child words; a holder whose lease lapsed may
	// race a successor here, and the CAS picks one of them.
	prev, err := t.m.CAS(ctx, st.Add(childOff(d)), s.child[d], p1)
	if err != nil {
		// It may have landed: the block may be the child now, so it is not freed.
		recorded = true
		return fmt.Errorf("race: record child of %v: %w", st, err)
	}
	recorded = prev == s.child[d]
	return nil
}

// reserveDir makes sure the handle holds a block for the directory that publishing a split at
// depth d would need if it doubled the directory (d at least the global depth this handle last
// saw), so that the split allocates nothing once it has frozen slots. The block is kept in the
// handle for the next doubling that fits it and freed by Close; none is needed (and any held
// is kept) when d is below the global depth.
func (t *Table) reserveDir(ctx context.Context, d uint) error {
	// A subtable's depth is at most the global depth, and the directory doubles only when the
	// split subtable's depth is the global depth: then the block is dirBlockSize(d), whatever
	// this handle's cached global depth says.
	if d < entryDepth(t.dirWord) || d >= uint(t.p.MaxDepth) {
		return nil
	}
	size := dirBlockSize(d)
	if t.spareDir != 0 && t.spareDirSize == size {
		return nil
	}
	t.dropSpareDir()
	na, err := t.allocDirectory(ctx, size)
	if err != nil {
		return fmt.Errorf("race: allocate directory: %w", err)
	}
	t.spareDir, t.spareDirSize = na, size
	return nil
}

// dirBlockSize is the size of the block of a directory doubled from global depth gd.
func dirBlockSize(gd uint) uint64 { return max(8*(uint64(2)<<gd), Unit) }

// dropSpareDir frees the directory block reserveDir kept, if any.
func (t *Table) dropSpareDir() {
	if t.spareDir != 0 {
		_ = t.a.Free(t.spareDir, t.spareDirSize)
		t.spareDir, t.spareDirSize = 0, 0
	}
}

// learnHashes records in hashes the first hash of the key of every committed slot word among
// words (a subtable's, by slot index) whose block it has not learnt yet (frozen words only,
// unless all is set).
//
// It reads each such block's head only: its first Unit (the header and the key, when the key
// is at most Unit-blockHeader bytes), one round trip for all of them, and a second round trip
// reading the whole of the blocks whose key is longer, validated in full. A head is checked
// against the slot word that names it: its lengths must give the block the word's length and
// its key must hash to the word's fingerprint; a block that fails is a corrupt table
// (ErrCorrupt). The checksum of a head-read block is not checked (it covers the whole block):
// a committed block is written in full before a slot names it and never changed after (but
// for its valid word, outside the head's key), so the head is what its writer wrote, and the
// checks above catch a block that is not a KV block of the word's key. Reading heads instead of
// blocks is what keeps a split's reads at about one Unit per slot, whatever the values' size.
//
// A block must not be reused while it is being learnt: those of frozen slots cannot be retired
// while frozen; those of other words (all) must have been read within the caller's pinned
// section, and what is learnt from them holds only while that section lasts (see startSplit).
func (t *Table) learnHashes(ctx context.Context, words []Slot, hashes *slotHashes, all bool) error {
	// The blocks to read: those of the words whose block is not the one learnt at their index.
	sb := takeSplitBuf()
	idx := sb.idx[:0]
	for i, w := range words {
		if !w.Committed() || !all && !w.Frozen() {
			continue
		}
		if _, ok := hashes.get(i, w); !ok {
			idx = append(idx, i)
		}
	}
	sb.idx = idx
	if len(idx) == 0 {
		giveSplitBuf(sb)
		return nil
	}
	heads := grow(sb.all, len(idx)*Unit)
	sb.all = heads
	b := &sb.b
	b.Ops = b.Ops[:0]
	for n, i := range idx {
		b.Read(words[i].Addr(), heads[n*Unit:(n+1)*Unit:(n+1)*Unit])
	}
	if err := doChunked(ctx, t.m, b); err != nil {
		// The transport may still own the buffers: they are not reused.
		return fmt.Errorf("race: read blocks to split: %w", err)
	}
	var long []int // indices of the blocks whose key does not fit the head
	for n, i := range idx {
		h, whole, err := t.headHash(words[i], heads[n*Unit:(n+1)*Unit])
		if err != nil {
			giveSplitBuf(sb)
			return err
		}
		if !whole {
			long = append(long, i)
			continue
		}
		hashes.set(i, words[i], h)
	}
	giveSplitBuf(sb)
	if len(long) == 0 {
		return nil
	}
	var lb farmem.Batch
	for _, i := range long {
		lb.Read(words[i].Addr(), make([]byte, words[i].Size()))
	}
	if err := doChunked(ctx, t.m, &lb); err != nil {
		return fmt.Errorf("race: read blocks to split: %w", err)
	}
	for n, i := range long {
		w := words[i]
		blk, err := t.decode(w.Addr(), lb.Ops[n].Buf)
		if err == nil && t.fingerprint(t.hashOf(blk.Key)) != w.Fingerprint() {
			err = fmt.Errorf("race: block at %v: key does not match the fingerprint of its slot: %w", w.Addr(), ErrCorrupt)
		}
		if err != nil {
			return fmt.Errorf("race: split: block of slot %v: %w", w, err)
		}
		hashes.set(i, w, t.hashOf(blk.Key).h1)
	}
	return nil
}

// slotHashes is what a split learnt of a subtable's keys, by slot index: the block (its slot
// word without the frozen and tentative bits) whose key it learnt there, and that key's first
// hash. A slot is indexed rather than a map of blocks kept, as a split looks every slot up a
// few times (a map's hashing was a sixth of a split's CPU time); a slot whose word names
// another block than the one learnt is simply not known.
type slotHashes struct {
	block []Slot
	h1    []uint64
}

// get returns the first hash of the key of the block committed word w (at slot i) names, if
// learnt.
func (h *slotHashes) get(i int, w Slot) (uint64, bool) {
	if !w.Committed() || h.block[i] != blockKey(w) {
		return 0, false
	}
	return h.h1[i], true
}

// set records that the key of the block w (at slot i) names has first hash h1.
func (h *slotHashes) set(i int, w Slot, h1 uint64) { h.block[i], h.h1[i] = blockKey(w), h1 }

// forget drops everything learnt.
func (h *slotHashes) forget() { clear(h.block) }

// headHash checks head, the first Unit of the block that committed word w names, against w and
// returns its key's first hash; whole is false (and nothing checked but the lengths) when the
// key does not fit the head.
func (t *Table) headHash(w Slot, head []byte) (h1 uint64, whole bool, err error) {
	kl, vl, ok := headLengths(w, head)
	if !ok {
		return 0, false, fmt.Errorf("race: split: block of slot %v: header says %d key and %d value bytes: %w", w, kl, vl, ErrCorrupt)
	}
	if blockHeader+kl > len(head) {
		return 0, false, nil
	}
	k := t.hashOf(head[blockHeader : blockHeader+kl])
	if t.fingerprint(k) != w.Fingerprint() {
		return 0, false, fmt.Errorf("race: split: block of slot %v: key does not match the slot's fingerprint: %w", w, ErrCorrupt)
	}
	return k.h1, true, nil
}

// fingerprint is the slot fingerprint of a key of hash k.
func (t *Table) fingerprint(k keyHash) uint8 {
	return uint8(k.h2>>slotFPShift) >> (8 - t.p.FingerprintBits)
}

// splitBuf is the memory of a split's batches: their ops (an op per slot of the subtable:
// about 160 KiB with the default geometry) and, for learnHashes, the slots whose blocks it
// reads and one buffer for all their heads (a Unit per slot: 96 KiB). Splits are rare and
// handles may be many, so the buffers are not kept per handle but in a small process-wide
// stack (splitBufs): a split that reuses one allocates none of them. At most maxSplitBufs are
// kept; the mutex guards the stack only, never a verb.
type splitBuf struct {
	ops []farmem.Op
	b   farmem.Batch // learnHashes's, kept so that it allocates no batch
	idx []int
	all []byte
}

// maxSplitBufs is how many split buffers the process keeps between splits.
const maxSplitBufs = 4

var splitBufs struct {
	mu   sync.Mutex
	free []*splitBuf
}

// takeSplitBuf takes a kept split buffer, or a new one.
func takeSplitBuf() *splitBuf {
	splitBufs.mu.Lock()
	defer splitBufs.mu.Unlock()
	if n := len(splitBufs.free); n > 0 {
		sb := splitBufs.free[n-1]
		splitBufs.free = splitBufs.free[:n-1]
		return sb
	}
	return new(splitBuf)
}

// giveSplitBuf keeps sb for a later split, once the batch that read into it has completed
// (never after a failed Do, whose ops the transport may still complete). The ops are kept as
// they are, not cleared: a split's batches read only into sb's own buffer (all) and CAS words
// with no buffer, so they reference no memory of a handle, and the next batch built on them
// overwrites every op it uses whole (clearing 160 KiB of ops holding pointers cost a split
// tens of microseconds of write barriers while the collector marks).
func giveSplitBuf(sb *splitBuf) {
	splitBufs.mu.Lock()
	defer splitBufs.mu.Unlock()
	if len(splitBufs.free) < maxSplitBufs {
		splitBufs.free = append(splitBufs.free, sb)
	}
}

// finishSplit completes the split of s.st at depth d whose new half is child[d]: publishes it
// in the directory and moves the header to depth d+1 (when publish is set: not yet done),
// clears the moved slots of s.st and releases the others, releases the new half, and marks
// the child word done.
func (t *Table) finishSplit(ctx context.Context, s *subtableState, d uint, publish bool, word *uint64, sm *splitMem) error {
	st, la := s.st, s.st.Add(stLockOff)
	hashes := &sm.hashes
	cw := s.child[d]
	s1 := unpackAddr(cw)
	suffix := headerSuffix(s.hdr) &^ (1 << d) // the same before and after the header moves
	if publish {
		if err := t.renew(ctx, la, word); err != nil {
			return err
		}
		if err := t.publishAndDeepen(ctx, st, s1, d, suffix, word); err != nil {
			return err
		}
	}
	// Release the old half: moved keys' slots and empty or tentative ones become empty, the
	// staying keys' slots lose their frozen bit.
	if err := t.learnHashes(ctx, s.words, hashes, false); err != nil {
		return err
	}
	if err := t.renew(ctx, la, word); err != nil {
		return err
	}
	ob := takeSplitBuf()
	b := farmem.Batch{Ops: ob.ops[:0]}
	for i, w := range s.words {
		if !w.Frozen() {
			continue
		}
		var v Slot
		if h, _ := hashes.get(i, w); w.Committed() && h>>d&1 == 0 || w.Tombstone() {
			v = w.Plain() // a tombstone keeps its delete lease in the old half
		}
		b.CAS(t.geo.slotAddr(st, uint64(i)), uint64(w), uint64(v))
	}
	ob.ops = b.Ops
	if len(b.Ops) > 0 {
		if err := doChunked(ctx, t.m, &b); err != nil {
			// The transport may still own the batch: its ops are not reused.
			return fmt.Errorf("race: release subtable %v: %w", st, err)
		}
	}
	giveSplitBuf(ob)
	// Release the new half, if its parent lock is still in place (once it is cleared the half
	// may be splitting on its own, and its frozen slots are not ours).
	if err := t.renew(ctx, la, word); err != nil {
		return err
	}
	h1, err := t.readSplitSubtable(ctx, s1, sm, 1)
	if err != nil {
		return err
	}
	if h1.lock == lockParent {
		nb := takeSplitBuf()
		rb := farmem.Batch{Ops: nb.ops[:0]}
		for i, w := range h1.words {
			if w.Frozen() {
				rb.CAS(t.geo.slotAddr(s1, uint64(i)), uint64(w), uint64(w.Plain()))
			}
		}
		rb.CAS(s1.Add(stLockOff), lockParent, 0)
		nb.ops = rb.Ops
		if err := doChunked(ctx, t.m, &rb); err != nil {
			// The transport may still own the batch: its ops are not reused.
			return fmt.Errorf("race: release subtable %v: %w", s1, err)
		}
		giveSplitBuf(nb)
	}
	if _, err := t.m.CAS(ctx, st.Add(childOff(d)), cw, cw|childDone); err != nil {
		return fmt.Errorf("race: mark split of %v done: %w", st, err)
	}
	t.stats.Splits++
	return nil
}

// publish makes the directory name s1 for the suffixes it took over from st at depth d
// (doubling the directory first if d is the global depth), under the directory lock. Only
// entries that still name st change, so publishing twice, or late, never moves an entry back
// to an ancestor.
func (t *Table) publish(ctx context.Context, st, s1 farmem.Addr, d uint, suffix uint64, hold func() error) error {
	err := t.underDirLock(ctx, hold, func() error { return t.publishLocked(ctx, st, s1, d, suffix) })
	if errors.Is(err, errLockAttempts) {
		return fmt.Errorf("race: publish split of %v: %w", st, ErrCorrupt)
	}
	return err
}

// errLockAttempts: underDirLock gave up after maxAttempts.
var errLockAttempts = errors.New("race: directory lock: too many attempts")

// underDirLock runs body holding the directory lock, taking it with backoff (calling wait, if
// not nil, before each sleep: a split keeps its own lease meanwhile) and releasing it after.
// A body that fails with errDirMoved is run again under a new acquisition; after maxAttempts
// it fails with errLockAttempts.
func (t *Table) underDirLock(ctx context.Context, wait func() error, body func() error) error {
	la := t.root.Add(rootDirLockOff)
	var backoff time.Duration
	for range maxAttempts {
		word, held, _, err := t.tryLock(ctx, la, 0)
		if err != nil {
			return err
		}
		if !held {
			if wait != nil {
				if err := wait(); err != nil {
					return err
				}
			}
			if err := t.sleep(ctx, &backoff); err != nil {
				return err
			}
			continue
		}
		err = body()
		if uerr := t.unlock(ctx, la, word); err == nil {
			err = uerr
		}
		if !errors.Is(err, errDirMoved) {
			return err
		}
	}
	return errLockAttempts
}

func (t *Table) publishLocked(ctx context.Context, st, s1 farmem.Addr, d uint, suffix uint64) error {
	// The root's directory word and, speculatively, the cached directory: one round trip
	// unless the directory was replaced.
	var rb [8]byte
	dbuf := make([]byte, 8*len(t.dir))
	var b farmem.Batch
	b.Read(t.root.Add(rootDirOff), rb[:])
	b.Read(unpackAddr(t.dirWord), dbuf)
	if err := t.m.Do(ctx, &b); err != nil {
		return fmt.Errorf("race: read directory: %w", err)
	}
	w := binary.LittleEndian.Uint64(rb[:])
	if w != t.dirWord {
		if err := t.loadDir(ctx, w); err != nil {
			return err
		}
	} else {
		for i := range t.dir {
			t.dir[i] = binary.LittleEndian.Uint64(dbuf[8*i:])
		}
	}
	gd := entryDepth(w)
	ps, err := packAddr(st)
	if err != nil {
		return err
	}
	p1, err := packAddr(s1)
	if err != nil {
		return err
	}
	apply := func(entries []uint64) []int {
		var changed []int
		mask := uint64(1)<<(d+1) - 1
		for j, e := range entries {
			if e&ptrMask != ps {
				continue
			}
			switch uint64(j) & mask {
			case suffix | 1<<d:
				entries[j] = entryWord(p1, d+1)
				changed = append(changed, j)
			case suffix:
				if entryDepth(e) < d+1 {
					entries[j] = entryWord(ps, d+1)
					changed = append(changed, j)
				}
			}
		}
		return changed
	}
	if d < gd {
		entries := append([]uint64(nil), t.dir...)
		changed := apply(entries)
		var wb farmem.Batch
		base := unpackAddr(w)
		for _, j := range changed {
			buf := make([]byte, 8)
			binary.LittleEndian.PutUint64(buf, entries[j])
			wb.Write(base.Add(8*uint64(j)), buf)
		}
		if len(wb.Ops) > 0 {
			if err := doChunked(ctx, t.m, &wb); err != nil {
				return fmt.Errorf("race: update directory: %w", err)
			}
		}
		t.dir = entries
		return nil
	}
	// Double: a directory of 2^(gd+1) entries, entry j a copy of j mod 2^gd, with the split
	// applied; then swing the root's directory word to it.
	if gd >= uint(t.p.MaxDepth) {
		return fmt.Errorf("race: directory at depth %d: %w", gd, ErrFull)
	}
	n := uint64(2) << gd
	entries := make([]uint64, n)
	for j := range entries {
		entries[j] = t.dir[uint64(j)&(uint64(len(t.dir))-1)]
	}
	apply(entries)
	size := dirBlockSize(gd)
	na := t.spareDir
	if na == 0 || t.spareDirSize != size {
		// Not reserved (a split taken over from another client, or the directory moved
		// since): allocate it now.
		var err error
		if na, err = t.allocDirectory(ctx, size); err != nil {
			return fmt.Errorf("race: allocate directory: %w", err)
		}
	} else {
		t.spareDir, t.spareDirSize = 0, 0
	}
	pn, err := packAddr(na)
	if err != nil {
		_ = t.a.Free(na, size)
		return err
	}
	img := make([]byte, size)
	for j, e := range entries {
		binary.LittleEndian.PutUint64(img[8*j:], e)
	}
	if err := t.m.Write(ctx, na, img); err != nil {
		_ = t.a.Free(na, size)
		return fmt.Errorf("race: write directory: %w", err)
	}
	nw := entryWord(pn, gd+1)
	var cb farmem.Batch
	cb.CAS(t.root.Add(rootDirOff), w, nw)
	if err := t.m.Do(ctx, &cb); err != nil {
		return fmt.Errorf("race: swing directory: %w", err)
	}
	if prev, _ := cb.Result(0); prev != w {
		// Another client doubled it: our hold on the directory lock lapsed. Start over.
		_ = t.a.Free(na, size)
		return errDirMoved
	}
	if _, err := t.m.FAA(ctx, t.root.Add(rootDoublingsOff), 1); err != nil {
		return fmt.Errorf("race: count doubling: %w", err)
	}
	t.stats.Doublings++
	// Clients read the old directory only while pinned (a refresh), so it is retired.
	_ = t.a.Retire(ctx, unpackAddr(w), max(uint64(8)<<gd, Unit))
	t.dirWord, t.dir = nw, entries
	return nil
}

// publishAndDeepen ends a split of st at depth d into s1 (st's suffix suffix, its lock word
// held as *word): it publishes s1 in the directory (renewing the lock as it goes), renews the
// lock, and moves st's header to depth d+1 with a CAS. Exactly one client moves the header, and
// it counts the split; a header found moved already is fine, any other is corrupt.
func (t *Table) publishAndDeepen(ctx context.Context, st, s1 farmem.Addr, d uint, suffix uint64, word *uint64) error {
	la := st.Add(stLockOff)
	if err := t.publish(ctx, st, s1, d, suffix, func() error { return t.renew(ctx, la, word) }); err != nil {
		return err
	}
	if err := t.renew(ctx, la, word); err != nil {
		return err
	}
	old := headerWord(d, suffix)
	prev, err := t.m.CAS(ctx, st.Add(stHeaderOff), old, headerWord(d+1, suffix))
	if err != nil {
		return fmt.Errorf("race: move header of %v: %w", st, err)
	}
	switch prev {
	case old:
		if _, err := t.m.FAA(ctx, t.root.Add(rootSplitsOff), 1); err != nil {
			return fmt.Errorf("race: count split: %w", err)
		}
	case headerWord(d+1, suffix):
	default:
		return fmt.Errorf("race: subtable %v: header %#x during split at depth %d: %w", st, prev, d, ErrCorrupt)
	}
	return nil
}

// newHalf allocates the new half of a split at depth d and reserves the directory block that
// publishing it may need; it returns the half and its packed address. On an error nothing is
// left allocated; otherwise the caller frees the half unless the split recorded it.
func (t *Table) newHalf(ctx context.Context, d uint) (farmem.Addr, uint64, error) {
	s1, err := t.a.Alloc(ctx, t.geo.size, Unit)
	if err != nil {
		return 0, 0, fmt.Errorf("race: allocate subtable: %w", err)
	}
	p1, err := packAddr(s1)
	if err == nil {
		err = t.reserveDir(ctx, d)
	}
	if err != nil {
		_ = t.a.Free(s1, t.geo.size)
		return 0, 0, err
	}
	return s1, p1, nil
}
