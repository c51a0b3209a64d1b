package alloc

// Round trips of the allocator's operations that reach far memory, asserted exactly with
// farmem.Stats deltas in the package's tests. Everything not listed costs no verb: Alloc from a
// free list, the current chunk, a spare or a rebuilt chunk; Free and FreeSymmetric; Pin and
// Unpin while the announcement is younger than Options.Refresh; Retire while it is live; and an
// Unpin that withdraws an old announcement (one unsignaled MaskedCAS, off the critical path).
const (
	// ChunkClaimRoundTrips is a chunk claimed from the bump word, or a run of chunks for a
	// block larger than half a chunk: one FAA. Small blocks pay it once per
	// ChunkSize/class allocations (1/1024 for 64-byte blocks in 64 KiB chunks).
	// AllocSymmetric's claims are the same FAA on the home node's symmetric bump word.
	ChunkClaimRoundTrips = 1
	// PinRoundTrips is a Pin whose announcement is older than Refresh: a MaskedCAS swap and a
	// Read of the global epoch in one batch, repeated only if the epoch moved meanwhile.
	PinRoundTrips = 1
	// RetireUnpinnedRoundTrips is a Retire without a live announcement: a Read of the epoch.
	RetireUnpinnedRoundTrips = 1
	// ScanRoundTrips is a scan of the epoch table (Reclaim, or an Alloc about to claim a chunk
	// while retired blocks are pending, at most every Options.ScanInterval): Reads of the
	// epoch and the table in one batch, then unsignaled CASes advancing the epoch and clearing
	// expired slots.
	ScanRoundTrips = 1
	// PoolEmptyRoundTrips is a claim on a node whose bump word is exhausted and whose pool of
	// free chunks is empty: a Read of the pool's head word.
	PoolEmptyRoundTrips = 1
	// PoolPopRoundTrips is a chunk taken from a node's pool: Read the head, Read the top
	// chunk's link, CAS the head (two more per lost CAS), then an unsignaled FAA of the count.
	PoolPopRoundTrips = 3
	// PoolPushRoundTrips is what Reclaim or Close adds per node with whole free chunks to give
	// back: Read the head, then one batch of a link Write per chunk and the CAS (one more per
	// lost CAS), and an unsignaled FAA of the count.
	PoolPushRoundTrips = 2
	// FormatRoundTrips is Format of an unformatted node: read, claim, one batch.
	FormatRoundTrips = 3
	// FormattedRoundTrips is Format of a node already formatted with the same options: one
	// batch of Reads, nothing written.
	FormattedRoundTrips = 1
	// NewRoundTrips is New with nothing to adopt: a Read of each node's header and of the
	// handover word in one batch (two round trips if home is not the lowest of Options.Nodes).
	NewRoundTrips = 1
	// NewAdoptRoundTrips is New adopting a record stored in one block: then the CAS taking the
	// handover word and the Read of the record's head, in one batch.
	NewAdoptRoundTrips = 2
	// NewAdoptSegmentsRoundTrips is New adopting a record of several segments: then the other
	// segments' Reads in one batch. Each chained record adds one or two.
	NewAdoptSegmentsRoundTrips = 3
	// CloseRoundTrips is Close holding nothing (the announcement's withdrawal) or handing over
	// (a Write per segment, the withdrawal and the CAS publishing the record, in one batch).
	CloseRoundTrips = 1
	// RecordClaimRoundTrips is what Close adds when no block it holds can store its record: the
	// FAA claiming a run of chunks for it.
	RecordClaimRoundTrips = 1
	// ChainRoundTrips is what Close adds per retry when its handover word was taken: a Read of
	// the word and the CAS, chaining its record to the one there.
	ChainRoundTrips = 2

	// With replicated metadata (Header.Replicas = r > 1), the operations on the metadata wait
	// for a majority of the r metadata nodes and keep the round trips above (a symmetric
	// chunk claim CASes the bump words from the values last seen: one round trip, one more per
	// claim of another client since, or when a word is not known yet), except these:
	//
	// NewReplicatedRoundTrips is New with nothing to adopt: the headers, then the handover
	// words of the metadata nodes.
	NewReplicatedRoundTrips = 2
	// NewReplicatedAdoptRoundTrips is New adopting a record stored in one block: then the
	// CASes taking the words on a majority, then the record's Read.
	NewReplicatedAdoptRoundTrips = 4
	// CloseReplicatedRoundTrips is Close handing over: the record's Writes, then the CASes
	// publishing it on a majority.
	CloseReplicatedRoundTrips = 2
)
