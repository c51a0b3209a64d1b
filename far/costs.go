package far

// Round trips of a Ptr's operations by Mode, uncontended, while the client's epoch
// announcement is live (otherwise the allocator's pin adds one), asserted exactly with
// farmem.Stats deltas in the package's tests.
const (
	// Word: Load is one 8-byte Read, Store one MaskedCAS swap, CompareAndSwap one CAS; Update
	// is a Load then a CAS, plus one per lost CAS.
	WordLoadRoundTrips, WordStoreRoundTrips, WordUpdateRoundTrips = 1, 1, 2

	// SingleWriter: Load reads the pointer's record (version, value, version) in one batch,
	// plus one per torn read: one Read where the Memory reads in address order
	// (transport.OrderedReader), three elsewhere; Store is three Writes in one batch (the owner
	// only); Update a Load then a Store.
	SingleWriterLoadRoundTrips, SingleWriterStoreRoundTrips, SingleWriterUpdateRoundTrips = 1, 1, 2

	// OutOfPlace: Load reads the cell, then the block; Store writes the new block and CASes
	// the cell in one batch when the cell holds the block this client last saw there
	// (StaleStoreRoundTrips more otherwise); Update reads the cell, the block, then writes and
	// CASes, plus two per lost CAS.
	OutOfPlaceLoadRoundTrips, OutOfPlaceStoreRoundTrips, OutOfPlaceUpdateRoundTrips = 2, 1, 3

	// Locked: Load as OutOfPlace, taking no lock; Store takes the far lock, reads the cell,
	// writes and CASes, releases; Update also reads the old block.
	LockedLoadRoundTrips, LockedStoreRoundTrips, LockedUpdateRoundTrips = 2, 4, 5

	// StaleStoreRoundTrips is what an OutOfPlace Store adds when another client stored since
	// this one last saw the cell: its CAS fails, names the current block, and the CAS alone
	// is tried again.
	StaleStoreRoundTrips = 1

	// LoadManyRoundTrips is LoadMany over Word and SingleWriter pointers, on any nodes, per
	// farmem.MaxBatchOps/3 pointers: each pointer's reads (one, or three for a single-writer
	// record where the Memory does not read in address order), all in one batch.
	LoadManyRoundTrips = 1
	// LoadManyIndirectRoundTrips is LoadMany when any pointer is OutOfPlace or Locked: every
	// cell, then every block.
	LoadManyIndirectRoundTrips = 2
)
