package kvstore

import "github.com/farmem/farmem/ds/ptrsync"

// # The hybrid kind's synchronizers
//
// Dolphin's tree swaps a large value's pointer word (a leaf's value word) by CAS. With
// Options.Sync optimistic the tree keeps its own loop: CAS from the word read, retried from the
// word found. With CIDER, MCS or Spin (ds/cider, unchanged: the same synchronizers RACE uses)
// the swap goes through the synchronizer, under the key's entry of the tree's lock table: leaves
// have no room for an entry per slot and SMOs copy slots into new leaves, so the entries are a
// table hashed by the key on each memory node, as the CIDER paper does for SMART's leaf
// pointers. Several keys may share an entry. The tree's target says so (ptrsync.SharedLock):
// the synchronizers then pass a pointer word from one client to another only tagged with the
// pointer it was read at, and CIDER's global write combining takes the executor's outcome as a
// member's own only if the executor changed that member's pointer (each member targets one
// pointer and the executor's Done names it): two keys sharing an entry are never combined, a
// member of another key retries.
//
// How it composes with the tree. An update first does the tree's own first round trip: the
// leaf's Spear FAA (+1) with its head, keys and values. It holds that count through the
// synchronizer's commit, queueing on the lock included, and posts the release after it. While
// the count is held no SMO can copy the leaf (an SMO's exclusive hold waits for the count to
// drain; IDUs that arrive later back off before they queue), so the value word's address stays
// the key's, and a slot keeps its key until an SMO (a delete leaves a tombstone and clears the
// value word by CAS): every nonzero word the value word holds names a block of the key. The
// lock only orders the value-word CASes of updates; inserts, deletes, splits and compactions
// never take it, and the node versions and Spear words readers check are untouched. A delete
// that clears the value word makes a queued update's CAS find 0: it looks again and reports the
// key absent. No lock holder waits on a Spear count or an SMO, so the lock adds no cycle.
//
// Why no reader sees a freed block. Every operation runs pinned by the allocator's epochs; an
// update's CAS retires the block it replaced, which is reused only after every client pinned
// at the time has unpinned (or outlived its lease, which the update's pin budget stays under:
// past it, a CAS is not made and the update looks again). A combined member's block is never
// written (CIDER defers it to the executor), and a written block that was never published is
// freed at once, having been seen by nobody.
//
// Costs, warm cache, uncontended (round trips; CIDER's cold keys cost what optimistic does):
//
//	Update, optimistic               2   [Spear FAA, leaf read, block WRITE]; [CAS, release]
//	Update, CIDER hot key, alone     4   [FAA, leaf]; MaskedCAS enqueue; [block WRITE, CAS]; CAS release
//	Update, MCS                      4   [FAA, leaf, block WRITE]; enqueue; CAS; release
//	Update, spin                     4   [FAA, leaf, block WRITE]; [lock CAS, read]; CAS; unlock CAS
//
// CIDER writes the block on the value word's memory node, so its WRITE rides in the CAS's
// batch. A combined batch of n updates writes one block and CASes once.

// hybridSync returns the synchronizer a hybrid handle is opened with: none for Optimistic (the
// tree's own loop, the same protocol), else the store's.
func hybridSync(s ptrsync.Synchronizer) ptrsync.Synchronizer {
	if _, ok := s.(*ptrsync.Optimistic); ok || s == nil {
		return nil
	}
	return s
}
