package maxreg

// Round trips of the register's operations, asserted exactly with farmem.Stats deltas in the
// package's tests. The in-place refresh after a write or a chasing read costs none on the
// caller's path: it is an unsignaled write, or a Refresher's.
const (
	// WriteRoundTrips: the out-of-place record's write and the metadata word's CAS, in one
	// ordered batch, when the CAS finds the word the handle last saw (always, with one word per
	// writer: Params.Words >= the writers' largest client id).
	WriteRoundTrips = 1
	// CASRetryRoundTrips is what each lost metadata CAS adds to a Write or Verify (another
	// writer of the same word moved it to a smaller tag meanwhile).
	CASRetryRoundTrips = 1
	// WriteAbsorbedRoundTrips is a Write the handle already knows to be absorbed: its word held
	// a larger tag when last seen.
	WriteAbsorbedRoundTrips = 0
	// VerifyRoundTrips: the metadata word's CAS.
	VerifyRoundTrips = 1
	// ReadRoundTrips: the metadata words and the in-place copy in one Read, the copy valid. An
	// empty register costs the same.
	ReadRoundTrips = 1
	// ReadChaseRoundTrips: the in-place copy torn or stale, the out-of-place buffer read next.
	// Each restart (the buffer already reused) adds another ReadChaseRoundTrips at most.
	ReadChaseRoundTrips = 2
	// OpenRoundTrips: the header, then the metadata words with the client's buffers' identity
	// words.
	OpenRoundTrips = 2
	// FormatRoundTrips: one batch (the header, zeroed records, zeroed words and the magic) for
	// a register under 16 MiB with fewer than 4,000 words; more batches past that.
	FormatRoundTrips = 1
)

// Round trips of a Replicated register's operations (the common case), asserted in the
// package's tests.
const (
	// ReplicatedWriteRoundTrips: the record's write and the word's masked CAS to every replica
	// in one batch, returning once a majority answered.
	ReplicatedWriteRoundTrips = 1
	// ReplicatedReadRoundTrips: every replica's words and in-place copy in one batch, a
	// majority answering with the same largest tag and a valid copy (no write-back needed).
	// A read that must chase the buffer adds one, one that must write back adds one.
	ReplicatedReadRoundTrips = 1
	// OpenReplicatedRoundTrips: the headers, then the words and the lane's identity words.
	OpenReplicatedRoundTrips = 2
)
