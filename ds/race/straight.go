package race

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	"github.com/farmem/farmem/ds/ptrsync"
	"github.com/farmem/farmem/farmem"
)

// updateStraight is change's pinned section for the common Update: through the key's
// address-cache entry ce (taken, usable: change's cached), with a synchronizer that lets the
// table make the first step of a lock-free commit itself (ptrsync.Straight). It is
// changePinned's first attempt written out in one function, with its state in locals: when
// PlanStraight routes the operation lock-free with the block written early and no lock entry
// read, it asks for the lines of the entry's slot and of the old block's head, makes the new
// block, looks through the entry (changeCached's batch: the block's write, the slot's word,
// the old block's head), checks the deadline and CASes the slot (with
// the old block's valid word set in the CAS's batch, as Install does), and hands that step to
// CommitStraight, which counts it as Commit would. Verbs, round trips and bytes are
// changePinned's.
//
// Anything else goes back to the general loop in the state the loop's own first attempt would
// have left: a plan that is not straight before the block is made (changePlanned); a stale
// entry after the block was written, the look counted (changeLoop from attempt 0's lookup); a
// Retry (deadline passed, or the CAS lost and the synchronizer's continuation found no newer
// word of the key) after the change's slot fields and the block's head were recorded as the
// loop records them (changeRetried, then changeLoop from attempt 1). Retries, retirement and
// cache maintenance off this path are the loop's.
func (t *Table) updateStraight(ctx context.Context, key, value []byte, op *opState, ce, ae *acEntry) (retired bool, _ error) {
	plan, straight := t.straight.PlanStraight(ptrsync.Update, op.k.identity())
	if !straight || plan.DeferWrite || plan.Prefetch && t.lockSize > 0 {
		return t.changePlanned(ctx, t.changeOf(ptrsync.Update, key, value, op), nil, op, ce, ae, true, false, plan)
	}
	t.stats.Straight++
	// The look through the entry, as changeCached makes it (see there for why it is sound),
	// prepared first: its hints for the slot's line and the old block's head then overlap the
	// new block's allocation and encoding instead of the batch's set-up alone.
	slot, w, word, head := t.cachedLook(ce, len(op.key))
	nb, err := t.makeBlock(ctx, op, value, 0)
	if err != nil {
		return false, err
	}
	b := t.batch()
	b.Write(nb.addr, nb.bytes) // a table without copies (change's cached): one write
	b.Read(slot, word)
	b.Read(w.Addr(), head)
	if err := t.doHinted(ctx, b); err != nil {
		t.lost()
		t.dropBlock(ctx, nb)
		return false, fmt.Errorf("race: read cached slot %v: %w", slot, err)
	}
	nb.written = true
	le := binary.LittleEndian
	old := Slot(le.Uint64(word))
	hit := old.Committed() && !old.Frozen() && blockKey(old) == w
	if hit {
		// decodeHead's answer for a head of op's key, read without its call: the lengths
		// fit the slot word and the key is op's, with the entry's stamp.
		kl, _, fits := headLengths(w, head)
		hit = fits && kl == len(op.key) && le.Uint32(head[4:]) == ce.stamp &&
			bytes.Equal(head[blockHeader:blockHeader+kl], op.key)
		if !hit {
			// What changeCached's decodeHead counts (a bad block) is counted alike.
			_, _, _ = t.decodeHead(op, w, head)
		}
	}
	if !hit {
		t.stats.ChangeStale++
		t.ac.miss(op, ae, +1)
		t.prefetchLookup(op)
		if t.ac.size > 0 {
			t.ac.lookedUp(true)
		}
		t.stats.StraightHandovers++
		c := t.changeOf(ptrsync.Update, key, value, op)
		c.blk = nb
		return t.changeLoop(ctx, c, nil, op, ce, ae, true, plan, nil, 0, true)
	}
	t.stats.ChangeHits++
	t.ac.miss(op, ae, -1)
	if t.ac.size > 0 {
		t.ac.lookedUp(false)
	}
	// Execute's first step: the deadline check (the section's one clock reading), then the
	// CAS from old, its block's valid word set in the CAS's batch (Options.Invalidate).
	st, i := ce.st, uint64(ce.idx)
	step := ptrsync.Step{Old: uint64(old), Checked: t.rt.Now(), New: uint64(nb.slot)}
	if step.Checked > t.pinAt.Add(t.opts.PinBudget) {
		step.Late = true
	} else {
		step.Found, step.Err = t.casSlot(ctx, slot, old, nb.slot, t.opts.Invalidate, true)
	}
	c := &t.scr.change
	if step.Late || step.Err != nil || step.Found != step.Old {
		// The state the loop's first attempt leaves (and CommitStraight continues a lost CAS
		// through): the change's fields, with the old block's valid word set if the CAS was
		// made, and the old block's head as findOne would have recorded it.
		c = t.changeOf(ptrsync.Update, key, value, op)
		c.blk = nb
		c.subtable, c.index, c.slot, c.meta, c.metaBytes = st, i, slot, t.geo.metaAddr(st, i), op.metaOf(i)
		c.old, c.oldValid = old, t.opts.Invalidate && (step.Late || step.Err != nil)
		op.learnt(w, blockInfo{isKey: true, deadline: farmem.Time(le.Uint64(head[8:])), stamp: ce.stamp})
	}
	res, err := t.straight.CommitStraight(ctx, c, step)
	if err != nil {
		// Unknown outcome: the new block may be in place; it is leaked rather than freed.
		return false, err
	}
	switch res.Outcome {
	case ptrsync.Committed:
		nb.visible = true
		// The key's committed value, in its entry (addrCache.keepAt: the entry take emptied,
		// still the key's, takes the new block with its history).
		if ae.holds(op) && ae.word == 0 {
			ae.word, ae.st, ae.idx, ae.stamp = blockKey(nb.slot), st, uint32(i), blockStamp(nb.bytes)
		} else {
			t.ac.keepAt(op, ae, blockKey(nb.slot), st, i, blockStamp(nb.bytes))
		}
		return t.retireAt(ctx, Slot(res.Replaced), res.CheckedAt), nil
	case ptrsync.Combined:
		t.dropBlock(ctx, nb)
		return false, nil
	}
	t.stats.StraightHandovers++
	pre, err := t.changeRetried(ctx, op, c)
	if err != nil {
		return false, err
	}
	return t.changeLoop(ctx, c, nil, op, ce, ae, true, plan, pre, 1, true)
}
