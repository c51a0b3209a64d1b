package sherman

// Round trips with a warm cache (the key's leaf parent cached), uncontended, asserted exactly
// with farmem.Stats deltas in the package's tests.
const (
	// GetRoundTrips: the leaf's read.
	GetRoundTrips = 1
	// UpdateRoundTrips: the lock CAS; the leaf's read; the value and checksum writes with the
	// release CAS in one ordered batch.
	UpdateRoundTrips = 3
	// HandedRoundTrips: an update, insert or delete handed the lock by a local holder
	// (Options.Locks): the read; the write.
	HandedRoundTrips = 2
	// InsertRoundTrips and DeleteRoundTrips: as an update, the write being the leaf's body.
	InsertRoundTrips = 3
	DeleteRoundTrips = 3
	// AbsentRoundTrips: an Update or Delete of an absent key, or an Insert of a present one:
	// the lock CAS and the read (the release is unsignaled).
	AbsentRoundTrips = 2
	// ScanRoundTrips: a scan whose leaves the cached parents name: one batch of leaf reads.
	ScanRoundTrips = 1
)
