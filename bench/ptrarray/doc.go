// Package ptrarray is the pointer array, the micro-benchmark structure of the CIDER paper (Du et
// al., PVLDB 19(8), 2026) on which the synchronizers of ds/ptrsync and ds/cider are measured: key
// k (0 <= k < Params.Keys) has one 8-byte data pointer naming an out-of-place KV block, changed
// by a CAS through a ptrsync.Synchronizer. It is a benchmark vehicle, not a library structure:
// keys are dense integers fixed at creation and there is no resizing.
//
// # Use
//
//	root, err := ptrarray.Create(ctx, m, a, ptrarray.Params{Keys: n})
//	arr, err := ptrarray.Open(ctx, m, a, root, ptrarray.Options{Sync: s}) // s: any synchronizer
//	err = arr.Load(ctx, 0, n, value)                                      // bulk fill, before use
//	err = arr.Update(ctx, k, v)
//
// # Layout
//
// Key k has a record on node Nodes[k % len(Nodes)], at index k/len(Nodes) of that node's run of
// records. Words are little-endian.
//
//	record (RecordSize = 24 bytes): lock entry (qlock.EntrySize = 16: lock word, epoch) | data pointer
//	data pointer (Pointer): 0, or block size in 16-byte units << 48 | node << 40 | offset/16
//	KV block (on the record's node): key (8) | value length (8) | value, padded to 8
//	root (on Nodes[0]): magic | version | shard count << 8 | keys | checksum | shard bases
//
// The lock entry is the synchronizer's (ptrsync's lock entries: zero until a lock-based
// synchronizer uses it); with Plan.Prefetch the pointer's read covers the whole record.
//
// # Operations and costs
//
// A block is written once before the CAS that publishes it and never changed; a replaced block
// is retired through the allocator's epochs (so a pinned reader never sees it reused, and a
// pointer word never recurs while an operation that read it is pinned: no ABA). Search reads the
// pointer and then the block (SearchRoundTrips). Insert writes the block and CASes the empty
// pointer in one batch (InsertRoundTrips; inserts never take a lock). Update and Delete read the
// pointer (an update's block write in the same batch unless the plan defers it) and hand the
// synchronizer a Target whose Install writes the block, if not yet, and CASes the pointer in one
// batch (the block is on the pointer's node, so the CAS lands after the write) and whose Same
// is always true (every block a key's pointer names is that key's). So an uncontended update
// with ptrsync.Optimistic costs UpdateRoundTrips. Load bulk-fills a fresh array with plain writes.
//
// Operations return the transport's errors wrapped (farmem.ErrNodeDown, a context's error);
// such an operation may or may not have taken effect. An Array belongs to one goroutine, like
// the client's farmem.Memory and alloc.Allocator; time comes from the client's farmem.Runtime.
package ptrarray
