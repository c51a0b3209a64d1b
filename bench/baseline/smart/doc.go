// Package smart is a baseline for comparisons, not a store: an adaptive radix tree in the
// manner of SMART (Luo et al., OSDI'23) built only on farmem verbs, against which the Dolphin
// paper (ds/hybrid) is measured. Keys and values are 8-byte words (keys compare as unsigned
// integers, byte by byte from the most significant).
//
//	root, err := smart.Create(ctx, m, a)                           // once
//	cache := smart.NewCache(64 << 20)                              // per compute node
//	t, err := smart.Open(ctx, m, a, root, smart.Options{Cache: cache}) // per client
//	err = t.Insert(ctx, 7, 70) // ErrExists if present
//	v, err := t.Get(ctx, 7)    // ErrNotFound if absent
//	ps, err := t.Scan(ctx, 0, 200, 100)
//
// # What it keeps of SMART
//
//   - A leaf per key (32 bytes: a lock word, the key, the value, a dead flag), so a key's read
//     fetches 24 bytes, not a 1 KB leaf. Leaves and nodes go where the client's allocator
//     places them, spread over the memory nodes as SMART's are.
//   - Internal nodes whose slots are 8-byte child words carrying the child's partial key byte
//     and kind (leaf, or a node and its class), in SMART's node classes (4, 8, 16, 32, 64,
//     128 or 256 slots: the cache charges a copy its class's slots). A node is allocated
//     whole and grows in place; the insert that takes it into a larger class records the
//     class in the parent's child word with a CAS (SMART records the node type in the
//     parent's entry), so a reader fetches a node once, sized to its class (the whole node
//     only when a word lags, its last slot found filled). Path compression: a node's header
//     holds its depth and full prefix, and a key that leaves a child's prefix gets a new node
//     above the child (one CAS on the parent's slot), so nodes are never rewritten.
//   - The compute-side radix cache (Cache) of internal nodes down to the ones whose slots name
//     leaves: one 8-byte pointer per key, which is what SMART's cache pays and Dolphin's does
//     not; a warm Get costs one round trip. In the simulator each lookup pays one local
//     access plus the copy it returns, and each copy put its bytes (localcost.Price through
//     Runtime.Compute), the price ds/hybrid's cache pays for the same bytes.
//   - Updates and deletes under the leaf's lock word: the lock CAS, the leaf's read, then the
//     write with the release in one ordered batch: 3 round trips (UpdateRoundTrips).
//   - Scans read the range's nodes level by level (one batch per level) and then every leaf
//     in the range in one batch: a READ per key.
//
// # What it omits
//
//   - SMART's read delegation and write combining (a compute node's concurrent reads of one
//     key share one READ; its concurrent updates of one key are combined): every client
//     here pays its own verbs, so under skew this tree is slower than SMART.
//   - Node reclamation (a deleted key's leaf stays, dead, in its slot until the key is
//     inserted again; a node whose prefix split is never moved), lock leases and recovery.
//
// # Consistency
//
// Get, Insert, Update and Delete are linearizable (an update or delete at its write under the
// leaf's lock, after checking the leaf is live and holds its key; a leaf once dead is never
// revived, and a key has at most one live leaf). A cached node is never trusted for an absence
// or a dead leaf: the node is read again. Scan is not atomic: each key's report is what a Get
// at the instant its leaf was read would return.
//
// # Runtime
//
// Time comes only from the client's farmem.Runtime (the lock's backoff); the package starts no
// goroutine and holds a Go mutex only inside the cache, never across a verb, so it runs
// unchanged on the simulator. A handle belongs to one goroutine.
package smart
