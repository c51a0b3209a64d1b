package kvstore

// Round trips per Store operation with the Race index, uncontended, when no other key's slot
// shares the key's fingerprint (each such slot adds one) and the client's epoch announcement is
// fresh (a client idle for longer than alloc's Refresh adds one to pin it). They hold through a
// Session and through the pool, which adds none once its clients are open, and they are
// asserted exactly with Stats deltas for every synchronizer.
//
// A pointer change either runs lock-free (Optimistic always; CIDER for an update of a key
// without contention) or takes the synchronizer's lock (MCS and Spin always; CIDER for a
// delete), which adds LockRoundTrips.
const (
	// GetRoundTrips: both buckets and the header in one round trip, then the key's KV block.
	GetRoundTrips = 2
	// CachedGetRoundTrips: a Get its handle's address cache answers (DefaultAddressCache): a
	// key the handle read, inserted or updated before, its block not replaced since and its entry not evicted; the
	// key's slot word, the block's valid word (slot and block on two memory nodes) and the
	// block, in one batch. A stale entry (another client replaced or deleted the block) costs
	// this before GetRoundTrips. The handle's own Update (or Put of a present key) keeps its
	// entry current, its Delete drops it.
	CachedGetRoundTrips = 1
	// GetAbsentRoundTrips: both buckets, holding no slot for the key.
	GetAbsentRoundTrips = 1
	// InsertRoundTrips: the KV block's write with the lookup; the tentative CAS with a re-read
	// of both buckets; the commit CAS.
	InsertRoundTrips = 3
	// InsertExistingRoundTrips: the block's write with the lookup, then the existing key's
	// block; the insert fails with ErrExists.
	InsertExistingRoundTrips = 2
	// AbsentRoundTrips is an Update or Delete of an absent key: the lookup finds no slot.
	AbsentRoundTrips = 1
	// LockRoundTrips is what a lock's acquisition and release add to a pointer change.
	LockRoundTrips = 2
	// UpdateRoundTrips is a lock-free Update: the new block's write with the lookup; the key's
	// current block; the CAS. A Put of a present key is an Update and costs the same.
	UpdateRoundTrips = 3
	// LockedUpdateRoundTrips is an Update (or Put of a present key) that takes the lock.
	LockedUpdateRoundTrips = UpdateRoundTrips + LockRoundTrips
	// CachedUpdateRoundTrips is a lock-free Update (or Put of a present key) of a key whose
	// entry the handle's address cache holds (a key it read, inserted or updated before), its
	// slot and block on one memory node: the new block's write with the slot's word and the
	// key's block's head; the CAS, with the old block's invalidation. A stale entry costs one
	// round trip before UpdateRoundTrips.
	CachedUpdateRoundTrips = 2
	// LockedCachedUpdateRoundTrips is a CachedUpdateRoundTrips update that takes the lock.
	LockedCachedUpdateRoundTrips = CachedUpdateRoundTrips + LockRoundTrips
	// PutAbsentRoundTrips is a Put of an absent key: an Update that finds nothing, then an
	// Insert, with every synchronizer.
	PutAbsentRoundTrips = AbsentRoundTrips + InsertRoundTrips
	// DeleteRoundTrips is a lock-free Delete: the lookup; the key's block; the CAS.
	DeleteRoundTrips = 3
	// LockedDeleteRoundTrips is a Delete that takes the lock.
	LockedDeleteRoundTrips = DeleteRoundTrips + LockRoundTrips
	// CachedDeleteRoundTrips is CachedUpdateRoundTrips for a lock-free Delete: the slot's word
	// and the key's block's head; the CAS.
	CachedDeleteRoundTrips = 2
	// LockedCachedDeleteRoundTrips is a CachedDeleteRoundTrips delete that takes the lock.
	LockedCachedDeleteRoundTrips = CachedDeleteRoundTrips + LockRoundTrips
	// ScanRoundTrips: the Race index is unordered, and Scan fails with ErrNoOrderedIndex
	// before any verb.
	ScanRoundTrips = 0
)
