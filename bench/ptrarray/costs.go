package ptrarray

// Round trips of an Array's operations, uncontended, while the client's epoch announcement is
// live, asserted exactly with farmem.Stats deltas in the package's tests.
const (
	// SearchRoundTrips: the record's pointer, then the block it names.
	SearchRoundTrips = 2
	// InsertRoundTrips: the block's write and the CAS of the empty pointer, in one batch
	// (inserts never take a lock).
	InsertRoundTrips = 1
	// UpdateRoundTrips is an Update with ptrsync.Optimistic, whatever its plan: the pointer's
	// read (with the block's write unless the plan defers it, and the lock entry if it
	// prefetches), then Install's batch (the deferred write, if any, and the CAS).
	UpdateRoundTrips = 2
)
