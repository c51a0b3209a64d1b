package cider

import (
	"context"
	"fmt"

	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
)

// ForRACE returns s as a RACE synchronizer (race.Options.Sync), also a race.Planner. The table
// must keep at least s.LockSize() bytes of metadata per slot (race.Params.MetaSize): the lock
// entries are the table's parallel arrays. Keys are tracked for contention by KeyHash.
func ForRACE(s Synchronizer) race.Synchronizer { return &raceSync{s: s} }

type raceSync struct {
	s   Synchronizer
	key uint64 // the hash of the current operation's key
}

func (r *raceSync) Traits() race.Traits { return race.Traits{MetaSize: r.s.LockSize()} }

func (r *raceSync) Plan(kind race.ChangeKind, key []byte) race.Plan {
	r.key = KeyHash(key)
	return r.s.Plan(kindOf(kind), r.key)
}

func (r *raceSync) Commit(ctx context.Context, c *race.Change) (race.Outcome, error) {
	res, err := r.s.Commit(ctx, &raceTarget{c: c, key: r.key})
	if res.Outcome == race.Committed {
		c.Replaced = race.Slot(res.Replaced)
	}
	return res.Outcome, err
}

func kindOf(k race.ChangeKind) Kind {
	if k == race.DeleteChange {
		return Delete
	}
	return Update
}

// KeyHash is the contention-tracking identity of a byte-string key (64-bit FNV-1a).
func KeyHash(key []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, b := range key {
		h ^= uint64(b)
		h *= 1099511628211
	}
	return h
}

// raceTarget presents a race.Change as a Target: the slot is the data pointer, the slot's
// metadata entry its lock entry.
type raceTarget struct {
	c   *race.Change
	key uint64
}

func (t *raceTarget) Kind() Kind            { return kindOf(t.c.Kind) }
func (t *raceTarget) Key() uint64           { return t.key }
func (t *raceTarget) Pointer() farmem.Addr  { return t.c.Slot }
func (t *raceTarget) Lock() farmem.Addr     { return t.c.Meta }
func (t *raceTarget) Old() uint64           { return uint64(t.c.Old) }
func (t *raceTarget) Deadline() farmem.Time { return t.c.Deadline() }
func (t *raceTarget) Memory() farmem.Memory { return t.c.Memory() }
func (t *raceTarget) String() string        { return fmt.Sprintf("slot %v", t.c.Slot) }
func (t *raceTarget) newWord(ctx context.Context) (uint64, error) {
	nw, err := t.c.New(ctx)
	return uint64(nw), err
}

// Install writes the block (its own round trip: it may be on another node than the slot) and
// CASes the slot.
func (t *raceTarget) Install(ctx context.Context, expected uint64) (uint64, uint64, error) {
	nw, err := t.newWord(ctx)
	if err != nil {
		return 0, 0, err
	}
	prev, err := t.c.Memory().CAS(ctx, t.c.Slot, expected, nw)
	if err != nil {
		return 0, 0, fmt.Errorf("cider: CAS slot %v: %w", t.c.Slot, err)
	}
	return prev, nw, nil
}

// Same is the table's Confirm: the word's block holds the key (a read unless it is Old or a
// block this operation read already).
func (t *raceTarget) Same(ctx context.Context, w uint64) (bool, error) {
	if race.Slot(w) == t.c.Old {
		return true, nil
	}
	return t.c.Confirm(ctx, race.Slot(w))
}
