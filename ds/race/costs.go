package race

// Round trips of the table's operations, uncontended, with ptrsync.Optimistic, asserted exactly
// with farmem.Stats deltas in the package's tests. The allocator's pins and retires add none
// within its Refresh period. Insert CASes twice, Update and Delete once, Search never.
const (
	// SearchRoundTrips: both combined buckets and the header in one batch; the KV block.
	SearchRoundTrips = 2
	// CachedSearchRoundTrips: a Search its address cache answers (Options.AddressCache): the
	// slot's word, the block's valid word (when the slot and the block are on different memory
	// nodes) and the KV block, in one batch. A stale entry costs this before the Search reads
	// the slot.
	CachedSearchRoundTrips = 1
	// SearchAbsentRoundTrips: both combined buckets and the header, no slot with the key's
	// fingerprint.
	SearchAbsentRoundTrips = 1
	// FingerprintMatchRoundTrips is what a slot of another key with the key's fingerprint adds
	// to an absent key's Search, Update or Delete, and to an Insert: that slot's block is read.
	FingerprintMatchRoundTrips = 1
	// InsertRoundTrips: the block's write with the lookup; the tentative CAS with the re-read;
	// the commit CAS.
	InsertRoundTrips = 3
	// InsertExistingRoundTrips: the block's write with the lookup; the existing key's block.
	InsertExistingRoundTrips = 2
	// UpdateRoundTrips: the block's write with the lookup; the key's block; the CAS.
	UpdateRoundTrips = 3
	// DeferredWriteRoundTrips is what an Update adds when the synchronizer's plan defers the
	// block's write (Plan.DeferWrite): Install writes it in a round trip of its own.
	DeferredWriteRoundTrips = 1
	// CachedUpdateRoundTrips: an Update of a key the handle's address cache holds, its slot and
	// block on one memory node: the block's write with the slot's word and the old block's
	// head; the old block's invalidation with the CAS. A stale entry costs the first before
	// the Update looks the key up as usual (UpdateRoundTrips, the block written already).
	CachedUpdateRoundTrips = 2
	// DeleteRoundTrips: the lookup; the key's block; the CAS.
	DeleteRoundTrips = 3
	// CachedDeleteRoundTrips is CachedUpdateRoundTrips for a Delete: the slot's word and the
	// block's head; the invalidation with the CAS.
	CachedDeleteRoundTrips = 2
	// AbsentRoundTrips is an Update or Delete of an absent key: the lookup.
	AbsentRoundTrips = 1
	// OpenRoundTrips: the root, then the directory.
	OpenRoundTrips = 2
)
