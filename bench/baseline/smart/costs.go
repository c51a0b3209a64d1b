package smart

// Round trips with a warm cache (the node naming the key's leaf cached), uncontended, asserted
// exactly with farmem.Stats deltas in the package's tests.
const (
	// GetRoundTrips: the leaf's read.
	GetRoundTrips = 1
	// UpdateRoundTrips and DeleteRoundTrips: the lock CAS; the leaf's read; the write with
	// the release CAS in one ordered batch.
	UpdateRoundTrips = 3
	DeleteRoundTrips = 3
	// InsertRoundTrips: a key whose last node is cached and has a free slot: the node read
	// again (a copy is not trusted for absence); the leaf's write with the slot's CAS, in one
	// batch when the allocator places the leaf on the node's memory node (one more round trip,
	// the write before the CAS, when it does not).
	InsertRoundTrips = 2
	// InsertGrowRoundTrips: such an insert that takes the node into a larger class (SMART's
	// node type), one more: the CAS recording the class in the parent's slot.
	InsertGrowRoundTrips = 3
	// ScanRoundTrips: a scan whose range lies under one cached node whose slots name leaves:
	// the node read again; its leaves in the range in one batch (one READ each).
	ScanRoundTrips = 2
)
