package race

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/farmem/farmem/ds/ptrsync"
	"github.com/farmem/farmem/farmem"
)

// ErrChanged is DeleteIf's answer when the table holds the key with another value than the
// one the removal was conditioned on: nothing was removed.
var ErrChanged = errors.New("race: the key holds another value")

// Round trips of DeleteIf, uncontended, with ptrsync.Optimistic: a Delete's (the value check
// reads nothing more: the key's block, which the lookup reads anyway, holds it). Asserted
// exactly in the package's tests (unreplicated) and in kvstore's SWARM-KV delete (replicated).
const (
	// DeleteIfRoundTrips: the lookup; the key's block; the CAS.
	DeleteIfRoundTrips = DeleteRoundTrips
	// DeleteIfAbsentRoundTrips: the lookup, no slot with the key's fingerprint.
	DeleteIfAbsentRoundTrips = AbsentRoundTrips
	// ReplicatedDeleteIfRoundTrips: the lookup; the key's block; the slot's replicated CAS.
	ReplicatedDeleteIfRoundTrips = ReplicatedDeleteRoundTrips
)

// DeleteIf removes key's entry if, and only if, it holds value (byte for byte): a
// compare-and-delete. It returns nil once it removed that entry, ErrNotFound if the table
// does not hold key, and ErrChanged if it holds key with another value; in both refusals
// nothing changed.
//
// How: the lookup of Delete, reading the key's block (which holds the value); if the value is
// the one asked for, the slot's CAS from the very word whose block was read to the delete
// word (0, or a tombstone under Options.DeleteLease). The CAS succeeds only if the slot still
// holds that word, and a word this pinned client read names the same block until it unpins
// (blocks are freed through the allocator's deferred free: see "ABA and lock entries" in the
// package doc), a block that is never rewritten; so it removes exactly the entry that was
// read, holding value, at the moment of the CAS. A CAS that finds another word retries over
// it only if that word's block also holds key and value (the optimistic synchronizer's retry,
// its Same check extended to the value), and otherwise looks again, which then answers by
// what the table holds. Linearization: a removal at its CAS; ErrNotFound or ErrChanged at
// the read of the slot whose word it judged by (a committed slot holding the key, or none of
// the key's candidate slots holding it, as for Delete's ErrNotFound).
//
// DeleteIf goes through no synchronizer's lock and is never combined into another client's
// change: it needs a table opened with ptrsync.Optimistic (the only synchronizer a
// replicated index takes), and fails with an error wrapping farmem.ErrNotSupported on a
// handle with another one, whose writers would not expect a slot to change under their lock.
//
// Cost: DeleteIfRoundTrips uncontended (ReplicatedDeleteIfRoundTrips on a replicated index),
// DeleteIfAbsentRoundTrips when no slot has the key's fingerprint, and a refusal with
// ErrChanged costs the lookup and the block (2); the removed block is retired with no verb.
// Every value it compares is copied once from the block read. Under Options.Invalidate it
// invalidates the blocks it reads, as Delete does, even when it then refuses (costing their
// address-cache readers a miss, never a wrong value).
func (t *Table) DeleteIf(ctx context.Context, key, value []byte) error {
	if err := t.usable(); err != nil {
		return err
	}
	if _, ok := t.sync.(*ptrsync.Optimistic); !ok {
		return fmt.Errorf("race: DeleteIf needs the optimistic synchronizer, the handle has %T: %w", t.sync, farmem.ErrNotSupported)
	}
	t.stats.Deletes++
	return t.change(ctx, ptrsync.Delete, key, nil, &value)
}

// condDelete is DeleteIf's ptrsync.Target: a Delete's change whose Same also requires the
// word's block to hold the value the removal is conditioned on.
type condDelete struct {
	*change
	want []byte
}

// Same implements ptrsync.Target: w's block holds the key (change.Same, which reads it if the
// operation has not yet, keeping its value) and the wanted value.
func (c condDelete) Same(ctx context.Context, w uint64) (bool, error) {
	ok, err := c.change.Same(ctx, w)
	if err != nil || !ok {
		return false, err
	}
	info, _ := c.op.info(blockKey(Slot(w)))
	return bytes.Equal(info.value, c.want), nil
}
