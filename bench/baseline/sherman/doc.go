// Package sherman is a baseline for comparisons, not a store: a B+ tree in the manner of
// Sherman (Wang, Lu and Shu, SIGMOD'22) built only on farmem verbs, as the Dolphin paper
// (ds/hybrid) and SELCC's B-link tree (ds/blink) are measured against. It is parameterized by
// a key codec: Fixed8 (8-byte keys, Dolphin's evaluation) or Bytes (variable-length byte keys,
// SELCC's).
//
//	root, err := sherman.Create(ctx, m, a, sherman.Params{Codec: sherman.Fixed8()}) // once
//	cache := sherman.NewCache(64 << 20)                                            // per compute node
//	locks := sherman.NewLockTable()                                                // per compute node
//	t, err := sherman.Open(ctx, m, a, root, sherman.Options{Cache: cache, Locks: locks}) // per client
//	err = t.Insert(ctx, k, 70) // ErrExists if present
//	v, err := t.Get(ctx, k)    // ErrNotFound if absent
//	ps, err := t.Scan(ctx, from, to, 100)
//
// # What it keeps of Sherman
//
//   - Nodes of 1 KB (Params.NodeSize) with both fence keys and a right-sibling pointer (a
//     B-link tree: a walk that finds a key at or past a node's high fence goes right, so a
//     stale cached copy costs reads, never a wrong answer).
//   - Full-key separators in internal nodes, and a compute-side cache (Cache, a byte budget)
//     of internal nodes indexed by key range: a warm cache names a key's leaf
//     with no round trip. Its bytes are what the cache itself holds, charged per copy: full
//     keys of the codec's width per separator, plus the pointer. In the simulator each
//     lookup pays one local access plus the page it returns, and each copy put its page
//     (localcost.Price through Runtime.Compute), the price ds/hybrid's cache pays and a
//     ds/selcc frame read of the same bytes costs. NewShermanCache files the copies as
//     Sherman's own cache does (by fence range, keeping a node's copy from before its split
//     beside its halves' until a lookup through it fails; only pages walks read; past the
//     budget, the less hit of two random copies evicted), where NewCache keeps one copy per
//     node, also files the pages the tree writes, and evicts oldest first.
//     NewShermanParentCache keeps only what Sherman's code caches: the leaves' parents and
//     the root's address, so a walk whose parent is not cached reads every level from the
//     root (SELCC's Fig. 17 gives the tree this cache at Sherman's default size).
//   - Writes under an exclusive lock word per node taken by CAS: lock, read, then the write
//     and the release in one ordered batch: 3 round trips per update, insert or delete. An
//     update writes only the value and the node's checksum (Sherman writes back only the
//     changed entry).
//   - Range scans read every leaf the cached parents name in the range in one batch.
//   - Sherman's hierarchical lock (Options.Locks, a LockTable per compute node): a compute
//     node's writers of one node queue locally, and the holder hands the remote lock to the
//     next (at most MaxHandovers times in a row), who skips the lock CAS.
//
// # What it omits
//
//   - Lock words in the NIC's on-chip memory: here they are host memory, so a lock CAS costs
//     what any atomic costs in the transport's model.
//   - Per-entry versions: a node carries a CRC-64 of its contents (word 8) instead, and a
//     reader whose checksum fails (a torn read) reads again. Params.EntryVersions reserves
//     their room, so a 1 KB leaf of 8-byte keys holds Sherman's 54 entries, not 61. Leaves are sorted, so an insert
//     or delete writes the whole node (Sherman writes one unsorted entry).
//   - Merges, node reclamation, lock leases and crash recovery: a client that dies holding a
//     lock blocks that node for good.
//
// # Layout
//
// A node of S bytes: 0 the lock word (CAS only: 0 free, else the holder's compute node id + 1, so a lock
// handed over locally is released by its last holder); 8
// the CRC-64 (ECMA) of bytes 16 to S; 16 meta (level, fence flags, entry count); 24 the right
// sibling; 32 the low fence, then the high fence (Width bytes each); then the entries: a
// leaf's (key, value) pairs sorted by key, an internal node's first child, then (separator,
// child) pairs: child i covers [separator i-1, separator i). No plain write covers the lock
// word. The root block holds the geometry and, at 40, the root node's address (CAS only): a
// root split writes a new root above it and swings the word.
//
// # Runtime
//
// Time comes only from the client's farmem.Runtime (the lock's backoff); the package starts
// no goroutine and holds a Go mutex only inside the cache, never across a verb, so it runs
// unchanged on the simulator. A handle belongs to one goroutine.
//
// # Consistency
//
// Get, Insert, Update and Delete are linearizable: writes linearize at their write under the
// leaf's lock, reads at their (checksum-verified) leaf read. Scan is not atomic: each key's
// report is what a Get at the instant its leaf was read would return.
package sherman
