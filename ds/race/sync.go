package race

import (
	"context"
	"errors"
	"fmt"

	"time"

	"github.com/farmem/farmem/ds/ptrsync"
	"github.com/farmem/farmem/farmem"
)

// change is one attempt at an Update or a Delete, the ptrsync.Target the table hands Commit. It
// lives in the handle's scratch space and is valid only during Commit.
type change struct {
	kind       ptrsync.Kind
	key, value []byte
	// subtable and index locate the slot; slot is its address.
	subtable farmem.Addr
	index    uint64
	slot     farmem.Addr
	// meta is the address of the slot's metadata entry (nil if the table keeps none), and
	// metaBytes its first LockSize bytes as prefetched with the key's KV block (or nil).
	meta      farmem.Addr
	metaBytes []byte
	// old is the slot word the table read and confirmed to hold key (not frozen, committed).
	old Slot
	// oldValid says that old's block was read without setting its valid word (changeCached):
	// Install sets it before a CAS that expects old.
	oldValid bool

	t   *Table
	op  *opState
	blk *newBlock
}

func (c *change) Kind() ptrsync.Kind    { return c.kind }
func (c *change) Pointer() farmem.Addr  { return c.slot }
func (c *change) Lock() farmem.Addr     { return c.meta }
func (c *change) LockBytes() []byte     { return c.metaBytes }
func (c *change) Old() uint64           { return uint64(c.old) }
func (c *change) Memory() farmem.Memory { return c.t.m }
func (c *change) Deadline() farmem.Time { return c.t.pinAt.Add(c.t.opts.PinBudget) }
func (c *change) String() string        { return fmt.Sprintf("%v of slot %v", c.kind, c.slot) }

// newWord returns the slot word the change installs: 0 for a delete; for an update the new KV
// block's word, writing the block first if it is not written yet (one round trip, the first
// time, when the plan deferred the write).
func (c *change) newWord(ctx context.Context) (Slot, error) {
	if c.kind == ptrsync.Delete {
		return c.t.deleteWord(), nil
	}
	if c.blk == nil {
		nb, err := c.t.makeBlock(ctx, c.op, c.value, 0)
		if err != nil {
			return 0, err
		}
		c.blk = nb
	}
	if !c.blk.written {
		var b farmem.Batch
		addBlockWrites(&b, c.blk)
		if err := c.t.m.Do(ctx, &b); err != nil {
			c.t.lost()
			return 0, fmt.Errorf("race: write KV block: %w", err)
		}
		c.blk.written = true
	}
	return c.blk.slot, nil
}

// Install implements ptrsync.Target: the block write (if deferred) and the slot's CAS.
func (c *change) Install(ctx context.Context, expected uint64) (uint64, uint64, error) {
	nw, err := c.newWord(ctx)
	if err != nil {
		return 0, 0, err
	}
	exp := Slot(expected)
	// A word whose block is not invalidated yet (changeCached's, a lost CAS's winner, a hint)
	// has its block invalidated before it is replaced (casSlot).
	inv := c.t.opts.Invalidate && exp.Committed() && (exp != c.old || c.oldValid)
	prev, err := c.t.casSlot(ctx, c.slot, exp, nw, inv, false)
	if err != nil {
		return 0, 0, err
	}
	if inv && exp == c.old {
		c.oldValid = false
	}
	return prev, uint64(nw), nil
}

// casSlot CASes the slot at slot from exp to nw and returns the word it found, counting a
// conflict if that is not exp. With inv it first sets the valid word of exp's block (it was
// confirmed while pinned, so it is not reused): on the slot's node the write and the CAS go in
// one batch, in that order; elsewhere the write's round trip comes first. read tells that the
// operation's previous batch read the slot's word and exp's block head (the valid word's line):
// the batch is then run without asking for those lines again (doHinted).
func (t *Table) casSlot(ctx context.Context, slot farmem.Addr, exp, nw Slot, inv, read bool) (uint64, error) {
	var prev uint64
	if !inv {
		var err error
		if prev, err = t.m.CAS(ctx, slot, uint64(exp), uint64(nw)); err != nil {
			return 0, fmt.Errorf("race: CAS slot %v: %w", slot, err)
		}
	} else if va := exp.Addr().Add(ValidOffset); va.Node() == slot.Node() {
		b := t.batch()
		b.Write(va, invalidBytes[:])
		k := b.CAS(slot, uint64(exp), uint64(nw))
		var err error
		if read {
			err = t.doHinted(ctx, b)
		} else {
			err = t.m.Do(ctx, b)
		}
		if _, werr := b.Result(0); werr != nil {
			return 0, fmt.Errorf("race: invalidate block: %w", werr)
		}
		if err != nil {
			return 0, fmt.Errorf("race: CAS slot %v: %w", slot, err)
		}
		prev, _ = b.Result(k)
	} else {
		if err := t.m.Write(ctx, va, invalidBytes[:]); err != nil {
			return 0, fmt.Errorf("race: invalidate block: %w", err)
		}
		var err error
		if prev, err = t.m.CAS(ctx, slot, uint64(exp), uint64(nw)); err != nil {
			return 0, fmt.Errorf("race: CAS slot %v: %w", slot, err)
		}
	}
	if prev != uint64(exp) {
		t.stats.Conflicts++
	}
	return prev, nil
}

// Same implements ptrsync.Target: whether slot word w holds a committed block of the key,
// reading the block if this operation has not read it yet.
func (c *change) Same(ctx context.Context, w uint64) (bool, error) {
	s := Slot(w)
	if s == c.old {
		return true, nil
	}
	if !s.Committed() || s.Frozen() || s.Fingerprint() != c.op.fp || c.t.rt.Now() > c.Deadline() {
		return false, nil
	}
	v := view{st: c.subtable, idx: []uint64{c.index}, words: []Slot{s}}
	j, err := c.t.findKey(ctx, c.op, &v, false)
	if errors.Is(err, errStale) {
		return false, nil
	}
	return j == 0, err
}

// deleteWord is the word a Delete installs: 0, or a tombstone under a delete lease.
func (t *Table) deleteWord() Slot {
	if t.opts.DeleteLease <= 0 {
		return 0
	}
	lease := t.opts.DeleteLease + time.Duration(float64(t.opts.DeleteLease)*DriftBound)
	return MakeTombstone(t.rt.Now().Add(lease + t.opts.ClockSkew))
}
