package hybrid

// Round trips of the tree's operations with a warm cache (the key's special node, or the
// ordinary node its leaf hangs from, cached), uncontended, 8-byte values, asserted exactly
// with farmem.Stats deltas in the package's tests. Unsignaled verbs (the release FAAs,
// reverse-pointer repairs) add none.
const (
	// GetRoundTrips: the leaf's head and keys, then its values, in one ordered batch.
	GetRoundTrips = 1
	// UpdateRoundTrips: the Spear FAA with the head and keys; the value's WRITE (the release
	// FAA unsignaled behind it).
	UpdateRoundTrips = 2
	// InsertRoundTrips: the Spear FAA with the head and keys; the tentative CAS with a re-read
	// of the keys; the value's WRITE with the committing CAS (the release unsignaled).
	InsertRoundTrips = 3
	// DeleteRoundTrips: the Spear FAA with the head and keys; the tombstone CAS (the release
	// unsignaled).
	DeleteRoundTrips = 2
	// AbsentRoundTrips: a Get, Update or Delete of a key absent from its leaf, or an Insert
	// of a present key: the first round trip alone.
	AbsentRoundTrips = 1
	// NewLeafRoundTrips: an Insert of a new 7-byte prefix under a cached ordinary node: the
	// node read again (a cached copy is never trusted for absence); the new leaf's WRITE with
	// the slot's CAS.
	NewLeafRoundTrips = 2
	// StaleSpecialRoundTrips: a Get through a cached special node that a split has since
	// changed: the old (dead) leaf; the special node again (backtracking, not a restart from
	// the root); the new leaf.
	StaleSpecialRoundTrips = 3
	// GetBytesRoundTrips: with Params.BlockValues, the leaf, then the block its value word
	// names (its size is in the word, so one read).
	GetBytesRoundTrips = 2
	// UpdateBytesRoundTrips: with Params.BlockValues, the new block's WRITE with the Spear FAA
	// and the leaf's head, keys and values (one batch, nodes in parallel); the value word's
	// CAS (the release unsignaled after it). Inserts and deletes of block values cost as
	// InsertRoundTrips and DeleteRoundTrips (an insert's block rides with its first round
	// trip; a delete CASes the value word to 0 beside the tombstone).
	UpdateBytesRoundTrips = 2
	// ScanRoundTrips: a scan whose range the cached special nodes cover (any number of them:
	// Scan(100) at 50% fill spans 2 to 4 leaves): every leaf in range, in one batch, its head
	// and keys then its values (ScanBytes adds one for the blocks). A leaf found dead or a
	// gap between the leaves' ranges (a copy older than a split) falls back to the walk: the
	// node read again, then its leaves.
	ScanRoundTrips = 1
	// ColdLevelRoundTrips is what each uncached level adds: one node read (two if its child
	// word names a smaller type than the node has grown to).
	ColdLevelRoundTrips = 1
)

// Bytes on the wire per operation (leaf of S slots, 8-byte values), as farmem.Stats counts
// them (8 bytes per atomic result in, 8 per atomic operand out), measured by the round-trip
// test:
//
//	Get      in 80+16S (1,104 at S = 64)
//	Update   in 80+8S  (592),   out 24 (the value; two FAA operands)
//	Insert   in 96+16S (1,120), out 56
//	Delete   in 88+8S  (600),   out 32
//
// With Params.BlockValues, a Get adds the block (8 bytes plus the value, padded to 8), and an
// Update reads the value array too (in 96+16S) and writes the block.
//
// Updates and inserts never read the value array (the paper's suggestion the artifact skipped).
//
// An SMO (split or compaction, run by the inserter that finds its leaf full) costs: the claim
// CAS; the exclusive FAA; the drain's Spear reads (at least one; each waits 1µs doubling to
// 64µs while IDUs are in flight, counted in Stats.DrainReads, for at most half the lease); the
// frozen leaf's read; the parent's read; the new block's writes (one batch); the plan CAS; the
// dead FAA; the publish (a slot CAS, plus, in a special parent, an empty slot's CAS with the
// type's MaskedCAS when it grows); the done CAS (unsignaled): about 10 round trips, after
// which the insert retries (3 more).
