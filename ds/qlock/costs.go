package qlock

// Round trips of the lock's operations, asserted exactly with farmem.Stats deltas in the
// package's tests. Waiting costs the memory node nothing but one liveness Read of the entry per
// Options.Check.
const (
	// LockRoundTrips is an uncontended Lock (or Enqueue): one MaskedCAS on the lock word.
	LockRoundTrips = 1
	// LinkRoundTrips is what a queued acquisition adds: one Write of the link word into its
	// predecessor's lock node.
	LinkRoundTrips = 1
	// ReleaseRoundTrips is a Release with no successor linked: one CAS of the lock word back
	// to free.
	ReleaseRoundTrips = 1
	// HandOverRoundTrips is a Release to a linked successor: a Granted message (two Writes to
	// the successor's compute node) and the epoch's FAA, in one batch.
	HandOverRoundTrips = 1
)
