package race

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// Location is where a key lives: the slot that holds it and its KV block.
type Location struct {
	// Subtable is the subtable holding the key's slot, Index the slot's index in it, and Slot
	// the slot word's address.
	Subtable farmem.Addr
	Index    int
	Slot     farmem.Addr
	// Block is the key's KV block.
	Block farmem.Addr
}

// Locate returns where key lives, or an error wrapping ErrNotFound. It is a diagnostic (tools,
// tests that must know which memory node holds what): a Search that reports the slot instead of
// the value. Cost: a Search's.
func (t *Table) Locate(ctx context.Context, key []byte) (Location, error) {
	if err := t.usable(); err != nil {
		return Location{}, err
	}
	op := t.newOp(key)
	for {
		if err := t.pin(ctx); err != nil {
			return Location{}, err
		}
		loc, err := t.locateKey(ctx, op)
		ok := t.unpin()
		if err != nil && !errors.Is(err, ErrNotFound) {
			return Location{}, err
		}
		if !ok {
			op.forget()
			continue
		}
		return loc, err
	}
}

func (t *Table) locateKey(ctx context.Context, op *opState) (Location, error) {
	for range maxAttempts {
		v, err := t.locate(ctx, op, nil)
		if err != nil {
			return Location{}, err
		}
		j, err := t.findKey(ctx, op, &v, false)
		if errors.Is(err, errStale) {
			continue
		}
		if err != nil {
			return Location{}, err
		}
		if j < 0 {
			return Location{}, ErrNotFound
		}
		i := v.idx[j]
		return Location{Subtable: v.st, Index: int(i), Slot: t.geo.slotAddr(v.st, i), Block: v.words[j].Addr()}, nil
	}
	return Location{}, fmt.Errorf("race: locate: blocks keep failing validation: %w", ErrCorrupt)
}

// LostEntry is a committed slot that named a KV block in lost memory. The block (and with it
// the key and value) is gone; what identifies the entry is where its slot was and what the slot
// word says: the key's fingerprint, and the suffix (the low Depth bits of the key's first hash)
// of the subtable that held it.
type LostEntry struct {
	Subtable farmem.Addr
	Index    int
	Word     Slot
	Depth    uint
	Suffix   uint64
}

// LostSubtable is a subtable that lived in lost memory, with every slot in it: how many keys it
// held cannot be known. Its keys had first hashes whose low Depth bits are Suffix. Replacement
// is the empty subtable that took its place.
type LostSubtable struct {
	Addr        farmem.Addr
	Depth       uint
	Suffix      uint64
	Replacement farmem.Addr
}

// PurgeReport is what Purge removed.
type PurgeReport struct {
	// Entries are the committed slots whose blocks were lost (they are now empty).
	Entries []LostEntry
	// Subtables are the subtables that were lost (each replaced by an empty one).
	Subtables []LostSubtable
	// Scanned counts the subtables read; Retracted the tentative slots into lost memory
	// removed (inserts that never committed: no key was acknowledged for them); Finished the
	// splits in progress (layout version 4) that Purge ended once the lost memory was gone.
	Scanned, Retracted, Finished int
}

// Purge removes from the table everything that pointed into the memory of node, which restarted
// and lost it (see farmem.ErrNodeLost): after it, the table is as if the keys whose slots or
// subtables were there had been deleted. The caller has adopted the node (the fabric lets verbs
// reach it again) and the allocator knows (its blocks there are forgotten), so that new
// subtables and blocks may land there again.
//
// It walks every subtable reachable from the directory and child words, as Audit does:
//
//   - a slot (committed, tentative, frozen or not) naming a block on node is CASed to empty
//     (frozen stays frozen, so a split in progress is undisturbed); committed ones are
//     reported, identified by their fingerprint and subtable suffix (the key's bytes were in
//     the block);
//   - a subtable on node is lost with its slots: an empty subtable of the same depth and suffix
//     replaces it, allocated with the handle's allocator, and the directory entries (under the
//     directory lock) and the child words that named it name the replacement. Its keys are
//     lost and cannot be counted: the report names the subtable and its suffix. The new half of
//     a split in progress (layout version 4) is replaced by a half that split goes on into
//     (locked by its parent, unborn but for the regions moved into the lost one, whose keys
//     are lost).
//
// A lost old half of a split in progress (layout version 4) takes with it the keys already
// moved into its new half: that half, not yet in the directory, was reachable only through
// the lost one's child word, so nothing finds it (it leaks). Those keys are reported with the
// lost subtable, whose depth and suffix cover them (the new half's suffix extends it by one
// bit), and the table is, as for the lost subtable's other keys, as if they had been deleted.
// If the split had published the new half already (its end was under way), the half is in the
// directory and keeps its keys; Purge clears its parent lock, which only the lost half's split
// would have cleared, so that it may split in its turn.
//
// Once the lost memory is gone (no slot names it, every lost subtable replaced), Purge ends
// every split in progress it found (layout version 4; PurgeReport.Finished), that of a
// replaced new half included, so that a purged table holds no split half done. It does so
// last: moving a region earlier would read the heads of lost blocks. A split it cannot end
// fails Purge, after everything else was done (a second Purge finds nothing more to remove
// and ends it).
//
// If the table's root or directory was on node, the table is lost: Purge fails with an error
// wrapping farmem.ErrNodeLost and changes nothing.
//
// Stale pointers into re-used memory: a block address that survives somewhere (a client's
// cached view, a slot Purge has not reached yet) may name memory the allocator hands out again.
// A KV block is only ever trusted after its checksum, which covers the block's own address, and
// its key check: bytes that are not a block written for that address and key are refused (the
// lookup starts over), so such a pointer never yields a wrong value. A subtable is trusted only
// when its header covers the key (depth and suffix), checked in the same ordered batch as its
// slots. Purge is meant for a table no one is splitting: a split racing it may re-publish the
// lost subtable's address, which a later Purge removes.
//
// Cost: one round trip per subtable and one CAS per lost slot, plus, per lost subtable, an
// allocation, one write and the directory update, and per split in progress its remaining
// steps (about 5 round trips per region) and end.
func (t *Table) Purge(ctx context.Context, node farmem.NodeID) (PurgeReport, error) {
	var rep PurgeReport
	if err := t.usable(); err != nil {
		return rep, err
	}
	if t.root.Node() == node {
		return rep, fmt.Errorf("race: purge %v: the table's root was there: the table is lost: %w", node, farmem.ErrNodeLost)
	}
	if err := t.pin(ctx); err != nil {
		return rep, err
	}
	defer t.unpin()
	if err := t.refreshAll(ctx); err != nil {
		return rep, err
	}
	if unpackAddr(t.dirWord).Node() == node {
		return rep, fmt.Errorf("race: purge %v: the table's directory was there: the table is lost: %w", node, farmem.ErrNodeLost)
	}
	type todo struct {
		st     farmem.Addr
		depth  uint // known depth and suffix (lost subtables found by child word)
		suffix uint64
	}
	type childRef struct {
		parent farmem.Addr
		level  uint
		word   uint64
	}
	var queue []todo
	seen := make(map[farmem.Addr]bool)
	lost := make(map[farmem.Addr]*LostSubtable)
	var lostOrder []farmem.Addr
	var refs []childRef
	// halves are the lost new halves of splits in progress (layout version 4): their
	// parent, and its move word.
	type halfOf struct {
		parent farmem.Addr
		move   uint64
		depth  uint
	}
	halves := make(map[farmem.Addr]halfOf)
	// splitting are the surviving subtables with a split in progress (layout version 4),
	// ended once the lost memory is gone; orphans the new halves published by a split whose
	// old half was lost before the split's tail cleared their parent lock.
	var splitting, orphans []farmem.Addr
	noteLost := func(st farmem.Addr, d uint, suffix uint64) {
		if lost[st] == nil {
			lost[st] = &LostSubtable{Addr: st, Depth: d, Suffix: suffix}
			lostOrder = append(lostOrder, st)
		}
	}
	for j, e := range t.dir {
		st := unpackAddr(e)
		if st.Node() == node {
			d := entryDepth(e)
			noteLost(st, d, uint64(j)&(1<<d-1))
		}
		if !seen[st] {
			seen[st] = true
			queue = append(queue, todo{st: st})
		}
	}
	for len(queue) > 0 {
		q := queue[0]
		queue = queue[1:]
		if q.st.Node() == node {
			noteLost(q.st, q.depth, q.suffix)
			continue
		}
		s, err := t.readSubtable(ctx, q.st, true)
		if err != nil {
			return rep, err
		}
		rep.Scanned++
		d, suffix := headerDepth(s.hdr), headerSuffix(s.hdr)
		if t.regionSplit() && s.splitting() {
			splitting = append(splitting, q.st)
			if unpackAddr(s.child[d]).Node() == node {
				halves[unpackAddr(s.child[d])] = halfOf{q.st, s.move, d}
			}
		}
		if t.regionSplit() && s.lock == lockParent && s.parent.Node() == node {
			// Only the directory reaches a half whose parent was lost (the parent's child
			// word went with it), so the split had published it: every region was moved and
			// released, and only the tail (the parent lock, the done mark) was left.
			orphans = append(orphans, q.st)
		}
		for l, cw := range s.child {
			if cw == 0 {
				continue
			}
			child := unpackAddr(cw)
			if child.Node() == node {
				refs = append(refs, childRef{q.st, uint(l), cw})
			}
			if !seen[child] {
				seen[child] = true
				queue = append(queue, todo{st: child, depth: uint(l) + 1, suffix: suffix&(1<<l-1) | 1<<l})
			}
		}
		for i, w := range s.words {
			if w.Empty() || w.Addr().Node() != node {
				continue
			}
			cleared, final, err := t.clearSlot(ctx, t.geo.slotAddr(q.st, uint64(i)), w, node)
			if err != nil {
				return rep, err
			}
			if !cleared {
				continue
			}
			switch {
			case final.Committed():
				rep.Entries = append(rep.Entries, LostEntry{Subtable: q.st, Index: i, Word: final, Depth: d, Suffix: suffix})
			case final.Tentative():
				rep.Retracted++
			}
		}
	}
	// Replace the lost subtables.
	repl := make(map[uint64]uint64) // packed lost address -> packed replacement
	for _, st := range lostOrder {
		ls := lost[st]
		na, err := t.a.Alloc(ctx, t.geo.size, Unit)
		if err != nil {
			return rep, fmt.Errorf("race: purge: replace subtable %v: %w", st, err)
		}
		img := subtableImage(&t.geo, headerWord(ls.Depth, ls.Suffix), 0, 0)
		if h, ok := halves[st]; ok {
			// The new half of a split in progress: a half as its split would have left it,
			// the regions it moved empty (their keys are lost with it), the others unborn,
			// so that the split goes on into the replacement.
			img = t.replacementHalf(img, h.parent, h.move, h.depth)
		}
		if err := t.m.Write(ctx, na, img); err != nil {
			return rep, fmt.Errorf("race: purge: write replacement of %v: %w", st, err)
		}
		op, err := packAddr(st)
		if err != nil {
			return rep, err
		}
		np, err := packAddr(na)
		if err != nil {
			return rep, err
		}
		repl[op] = np
		ls.Replacement = na
		rep.Subtables = append(rep.Subtables, *ls)
	}
	if len(repl) > 0 {
		if err := t.replaceInDirectory(ctx, repl); err != nil {
			return rep, err
		}
		for _, r := range refs {
			np, ok := repl[r.word&ptrMask]
			if !ok {
				continue
			}
			a := r.parent.Add(childOff(r.level))
			if _, err := t.m.CAS(ctx, a, r.word, np|r.word&childDone); err != nil {
				return rep, fmt.Errorf("race: purge: child word of %v: %w", r.parent, err)
			}
		}
		if err := t.refreshAll(ctx); err != nil {
			return rep, err
		}
	}
	for _, st := range orphans {
		if _, err := t.m.CAS(ctx, st.Add(stLockOff), lockParent, 0); err != nil {
			return rep, fmt.Errorf("race: purge: release subtable %v: %w", st, err)
		}
	}
	// No slot names lost memory any more, and every lost half was replaced: the splits in
	// progress can be finished (before, moving a region would read the heads of lost blocks).
	for _, st := range splitting {
		_, n, err := t.finishSplitOf(ctx, st)
		rep.Finished += n
		if err != nil {
			return rep, fmt.Errorf("race: purge: finish the split of %v: %w", st, err)
		}
	}
	return rep, nil
}

// replacementHalf turns img, a fresh subtable's image, into the replacement of the lost new
// half of parent's split at depth d, whose move word is move: locked by its parent, every slot
// of a region the split has not moved unborn.
func (t *Table) replacementHalf(img []byte, parent farmem.Addr, move uint64, d uint) []byte {
	pp, _ := packAddr(parent)
	le := binary.LittleEndian
	le.PutUint64(img[stLockOff:], lockParent)
	le.PutUint64(img[stParentOff:], pp)
	for r := range uint(t.geo.regions()) {
		if moveTag(move) == d && moveBits(move)>>r&1 == 1 {
			continue
		}
		lo, hi := t.geo.regionSlots(r)
		for i := lo; i < hi; i++ {
			le.PutUint64(img[stSlotsOff+8*i:], uint64(unbornSlot))
		}
	}
	return img
}

// clearSlot empties the slot at a, which was read as w naming a block on node: a CAS to 0 (to
// the frozen empty word if frozen). If the slot changed meanwhile and still names a block on
// node it tries again with the new word. It reports whether it cleared a word, and which.
func (t *Table) clearSlot(ctx context.Context, a farmem.Addr, w Slot, node farmem.NodeID) (bool, Slot, error) {
	for range maxAttempts {
		prev, err := t.m.CAS(ctx, a, uint64(w), uint64(w&SlotFrozen))
		if err != nil {
			return false, 0, fmt.Errorf("race: purge: clear slot %v: %w", a, err)
		}
		if Slot(prev) == w {
			return true, w, nil
		}
		w = Slot(prev)
		if w.Empty() || w.Addr().Node() != node {
			return false, 0, nil
		}
	}
	return false, 0, fmt.Errorf("race: purge: slot %v keeps changing: %w", a, ErrCorrupt)
}

// replaceInDirectory makes every directory entry that names a key of repl name its value
// instead (same depth), under the directory lock.
func (t *Table) replaceInDirectory(ctx context.Context, repl map[uint64]uint64) error {
	err := t.underDirLock(ctx, nil, func() error { return t.replaceLocked(ctx, repl) })
	if errors.Is(err, errLockAttempts) {
		return fmt.Errorf("race: purge: directory lock: %w", ErrCorrupt)
	}
	return err
}

func (t *Table) replaceLocked(ctx context.Context, repl map[uint64]uint64) error {
	if err := t.refreshAll(ctx); err != nil {
		return err
	}
	base := unpackAddr(t.dirWord)
	var b farmem.Batch
	for j, e := range t.dir {
		np, ok := repl[e&ptrMask]
		if !ok {
			continue
		}
		buf := make([]byte, 8)
		binary.LittleEndian.PutUint64(buf, entryWord(np, entryDepth(e)))
		b.Write(base.Add(8*uint64(j)), buf)
	}
	if len(b.Ops) == 0 {
		return nil
	}
	if err := doChunked(ctx, t.m, &b); err != nil {
		return fmt.Errorf("race: purge: update directory: %w", err)
	}
	return nil
}

// allocDirectory allocates a directory of size bytes on the root's node if it has room (and the
// handle's allocator places there), else wherever the allocator places it: a table whose root
// and directory share a node loses only that node's restart to an unrecoverable state (see
// Purge).
func (t *Table) allocDirectory(ctx context.Context, size uint64) (farmem.Addr, error) {
	if a, err := t.a.AllocOn(ctx, t.root.Node(), size, Unit); err == nil {
		return a, nil
	}
	return t.a.Alloc(ctx, size, Unit)
}

// checkAdoptions reloads the cached directory if the fabric adopted a restarted node since it
// was cached: the directory may name subtables that were lost and replaced, at addresses that
// now hold other data (farmem.Restarts.Adoptions). One atomic load when nothing changed.
func (t *Table) checkAdoptions(ctx context.Context) error {
	n := t.adoptionCount()
	if n == t.adoptions {
		return nil
	}
	if err := t.refreshAll(ctx); err != nil {
		return err
	}
	t.adoptions = n
	t.kids, t.pending = [len(t.kids)]kid{}, 0
	t.ac.clear()
	return nil
}

// adoptionCount is adoptionsOf(t.m), without the type assertion.
func (t *Table) adoptionCount() uint64 {
	if t.restarts == nil {
		return 0
	}
	return t.restarts.Adoptions()
}

// adoptionsOf is m's count of node adoptions (farmem.Restarts), 0 on transports without
// restarts: a handle reloads its cached directory when it changes.
func adoptionsOf(m farmem.Memory) uint64 {
	if r, ok := m.(farmem.Restarts); ok {
		return r.Adoptions()
	}
	return 0
}
