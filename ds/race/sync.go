package race

import (
	"context"
	"errors"
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// Synchronizer makes the final pointer change of Update and Delete: it turns a slot holding the
// key's current KV block into one holding the new block (Update) or into an empty slot
// (Delete). Search and Insert do not use it. The table locates the slot, confirms it holds the
// key, and calls Commit; Optimistic is a CAS with retries, and package ds/cider adds a CAS
// spinlock, an MCS lock and CIDER behind the same interface.
//
// A synchronizer belongs to one client's Table, like the table handle itself (state shared by
// the clients of a compute node is its own business). Its rules:
//
//   - A slot is changed only by a CAS whose expected value is the whole slot word read (with the
//     Change's pin protecting the word from ABA, see the package doc). A word with SlotFrozen set
//     must not be replaced: a split owns it; return Retry and the table waits for the split.
//   - Commit may retry its CAS with a newer word only once it has confirmed, with
//     Change.Confirm, that the word's block holds the same key (and no later than
//     Change.Deadline).
//   - Per-slot metadata (a lock entry) lives at Change.Meta, Traits.MetaSize bytes, zero in a
//     fresh subtable. When a split moves a slot to a new subtable its metadata is not moved:
//     the new slot's entry starts zero, and the old entry is left to drain (every CAS on the
//     old slot fails, since the split froze and then cleared it).
type Synchronizer interface {
	// Traits says what the synchronizer needs from the table.
	Traits() Traits
	// Commit attempts the change. It returns Committed (c.Replaced set to the word its CAS
	// replaced, whose block the table retires), Combined (the change took effect as part of
	// another client's commit; this change's own block was never published) or Retry (nothing
	// took effect: the table looks the key up again, waiting for a split if the slot is frozen,
	// and calls Commit with a fresh Change, or reports the key missing). An error means the
	// outcome is unknown (a node went down, the context ended).
	Commit(ctx context.Context, c *Change) (Outcome, error)
}

// Traits are what a synchronizer needs from the table.
type Traits struct {
	// MetaSize is the bytes of per-slot metadata the synchronizer uses (its lock entry): 0, or a
	// multiple of 8 at most the table's Params.MetaSize. The table reads the entries of the
	// key's candidate slots in the same round trip as their KV blocks, so Commit finds the
	// entry in Change.MetaBytes without a round trip of its own.
	MetaSize int
	// DeferWrite asks the table not to write an Update's new KV block before Commit: Commit
	// writes it with Change.New if and when it publishes it (a combining synchronizer writes
	// only the last writer's block). Otherwise the table writes it in its first round trip, in
	// parallel with the bucket reads.
	DeferWrite bool
}

// Planner is an optional interface of a Synchronizer whose needs differ per operation: ds/cider's
// contention-aware CIDER decides for each update whether it takes the optimistic path (the
// block written early, in parallel with the lookup) or queues on the slot's lock (the block
// written only if this client ends up the last writer of a combined batch). The table asks it
// once per Update or Delete, before the operation's first round trip; the answer replaces
// Traits.DeferWrite and the prefetch of the lock entry for that operation (every attempt).
type Planner interface {
	Plan(kind ChangeKind, key []byte) Plan
}

// Plan is what a Planner wants for one operation.
type Plan struct {
	// DeferWrite is Traits.DeferWrite for this operation.
	DeferWrite bool
	// Prefetch reads the slot's lock entry (Traits.MetaSize bytes, if any) with the key's KV
	// block into Change.MetaBytes; without it MetaBytes is nil (Change.Meta is still set), and
	// the lookup reads one word less per candidate.
	Prefetch bool
}

// Outcome is what a Commit did.
type Outcome uint8

// The outcomes of Commit.
const (
	// Retry: nothing took effect; look again.
	Retry Outcome = iota
	// Committed: the slot changed from c.Replaced to the change's new word.
	Committed
	// Combined: the change took effect within another client's commit (it was linearized just
	// before that commit, and overwritten by it).
	Combined
)

func (o Outcome) String() string {
	switch o {
	case Retry:
		return "retry"
	case Committed:
		return "committed"
	case Combined:
		return "combined"
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// ChangeKind is the operation a Change belongs to.
type ChangeKind uint8

// The kinds of change.
const (
	// UpdateChange replaces the key's block with a new one holding Value.
	UpdateChange ChangeKind = iota + 1
	// DeleteChange empties the key's slot.
	DeleteChange
)

func (k ChangeKind) String() string {
	switch k {
	case UpdateChange:
		return "update"
	case DeleteChange:
		return "delete"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Change is one attempt at an Update or a Delete, handed to Synchronizer.Commit. It is valid
// only during Commit: the table reuses it for its next operation.
type Change struct {
	// Kind, Key and Value (for an update) describe the operation.
	Kind       ChangeKind
	Key, Value []byte
	// Subtable and Index locate the slot; Slot is its address.
	Subtable farmem.Addr
	Index    uint64
	Slot     farmem.Addr
	// Meta is the address of the slot's metadata entry (nil if the table keeps none), and
	// MetaBytes its first Traits.MetaSize bytes as read with the key's KV block.
	Meta      farmem.Addr
	MetaBytes []byte
	// Old is the slot word the table read and confirmed to hold Key (not frozen, committed).
	Old Slot
	// Replaced is set by Commit, on Committed, to the word its CAS replaced.
	Replaced Slot

	t   *Table
	op  *opState
	blk *newBlock
}

// Memory returns the client's Memory, for the synchronizer's verbs.
func (c *Change) Memory() farmem.Memory { return c.t.m }

// Deadline is the fabric time after which Commit must not CAS the slot with a word read
// during this attempt (the table's pin budget runs out): return Retry instead.
func (c *Change) Deadline() farmem.Time { return c.t.pinAt.Add(c.t.opts.PinBudget) }

// New returns the slot word Commit installs: 0 for a delete; for an update the new KV block's
// word, writing the block first if it is not written yet (one round trip, the first time, when
// Traits.DeferWrite is set).
func (c *Change) New(ctx context.Context) (Slot, error) {
	if c.Kind == DeleteChange {
		return 0, nil
	}
	if c.blk == nil {
		nb, err := c.t.makeBlock(ctx, c.op, c.Value, 0)
		if err != nil {
			return 0, err
		}
		c.blk = nb
	}
	if !c.blk.written {
		if err := c.t.m.Write(ctx, c.blk.addr, c.blk.bytes); err != nil {
			c.t.lost()
			return 0, fmt.Errorf("race: write KV block: %w", err)
		}
		c.blk.written = true
	}
	return c.blk.slot, nil
}

// Confirm reports whether slot word s (a word Commit found in the slot) holds a committed block
// of Key, reading the block if this operation has not read it yet (one round trip). It reports
// false for frozen, tentative or empty words, for blocks that fail validation, and once
// Deadline has passed.
func (c *Change) Confirm(ctx context.Context, s Slot) (bool, error) {
	if !s.Committed() || s.Frozen() || s.Fingerprint() != c.op.fp || c.t.rt.Now() > c.Deadline() {
		return false, nil
	}
	v := view{st: c.Subtable, idx: []uint64{c.Index}, words: []Slot{s}}
	j, err := c.t.findKey(ctx, c.op, &v, false)
	if errors.Is(err, errStale) {
		return false, nil
	}
	return j == 0, err
}

// Optimistic is the lock-free synchronizer of RACE: CAS the slot from the word read to the new
// word; if another client changed it to a newer block of the same key, confirm that (one
// round trip) and CAS again; otherwise look again. Uncontended, an Update costs 3 round trips
// and a Delete 3 (see the package doc).
type Optimistic struct{}

// Traits implements Synchronizer: no metadata, the block written early.
func (Optimistic) Traits() Traits { return Traits{} }

// Commit implements Synchronizer.
func (Optimistic) Commit(ctx context.Context, c *Change) (Outcome, error) {
	nw, err := c.New(ctx)
	if err != nil {
		return Retry, err
	}
	old := c.Old
	for {
		prev, err := c.Memory().CAS(ctx, c.Slot, uint64(old), uint64(nw))
		if err != nil {
			return Retry, fmt.Errorf("race: CAS slot %v: %w", c.Slot, err)
		}
		if Slot(prev) == old {
			c.Replaced = old
			return Committed, nil
		}
		c.t.stats.Conflicts++
		ok, err := c.Confirm(ctx, Slot(prev))
		if err != nil || !ok {
			return Retry, err
		}
		old = Slot(prev)
	}
}
