// Package hybrid is Dolphin's hybrid index (An et al., MSST'24) over far memory: ART internal
// nodes above B+-style leaves of about 1 KB, a compute-side radix cache of the internal nodes,
// in-place 8-byte updates, and Marlin's Spear counting lock excluding structural changes
// (SMOs) from inserts, updates and deletes (IDUs). Keys are exactly 8 bytes, big-endian (so
// byte order is numeric order), nonzero and below 2^63; values are 8-byte words (byte strings
// in blocks with Params.BlockValues).
//
//	root, err := hybrid.Create(ctx, m, a, hybrid.Params{})            // once
//	caches, err := hybrid.OpenCaches(ctx, fabric, fabric.Hosted(), 64<<20) // once per process
//	cache, _ := caches.Get(m.Info().Node)
//	t, err := hybrid.Open(ctx, m, a, root, hybrid.Options{Cache: cache}) // per client
//	err = t.Insert(ctx, hybrid.Key(7), 70) // ErrExists if present
//	v, err := t.Get(ctx, hybrid.Key(7))    // ErrNotFound if absent
//	err = t.Update(ctx, hybrid.Key(7), 71) // ErrNotFound if absent
//	err = t.Delete(ctx, hybrid.Key(7))     // ErrNotFound if absent
//
// A key that is not exactly 8 bytes is refused (padding would break byte order), as are 0 and
// keys with the top bit set (the leaf's tentative bit): errors wrap ErrKey. A handle belongs
// to one client (one goroutine with its own farmem.Memory and alloc.Allocator); handles share
// far memory and their compute node's Cache. Every operation is linearizable (checked with
// farmem/lincheck on local with tearing, jitter and strict mode, and on sim with a paused
// client and clients crashed inside SMOs). Tree.Audit checks a quiescent tree's invariants.
//
// # Layout
//
// Child words (8 bytes, written only by CAS once published) name a child: bits 0-44 its
// offset / 8, bits 45-52 its memory node, bits 53-55 its kind (0 empty, 1 leaf, 2-5 an ART
// node of type 4, 16, 48 or 256: the reader knows how much to read), bits 56-63 its partial
// byte. The root block (64 bytes): 0 magic, 8 leaf slots S, 16 the root node's address, 24 a
// child word naming the root node (a type hint), 32 flags (block values), 40 the lock
// directory's address (Params.LockEntries; 0 for none), the rest zero.
//
// An ART node is allocated at 2,072 bytes (room for 256 slots, so it grows in place) and read
// as 24 + 8n bytes, n the capacity of the type its child word names:
//
//	0   rev     address of the parent slot that names it (a hint; CAS)
//	8   meta    bits 0-7 type (MaskedCAS only), bit 8 special, bits 16-23 depth d
//	16  prefix  the key's first d bytes (high bytes first), immutable
//	24  slots   n child words, unsorted, partial bytes unique
//
// The four types differ only in capacity: every type is an unsorted array of child words
// searched linearly for the partial byte (as in the artifact), not ART's indexed Node48 and
// direct Node256, because growth in place must keep every child in its slot. A node at depth
// d routes by key byte d. Because its header holds its full prefix, not only
// the compressed part, path compression never rewrites a node: a prefix split puts a new node
// above it. The special node sits at depth 7 (the key's length minus one); its slots name
// leaves, routed by range: the entry with the largest partial at most the key's last byte.
// Ordinary nodes name leaves too (a leaf per 7-byte prefix until it first splits).
//
// A leaf of S slots (Params.LeafSlots, default 64: 1,104 bytes; 8 slots: 208 bytes) covers
// [min, max) within one 7-byte prefix:
//
//	0       rev     parent slot address (a hint; CAS)
//	8       Spear   the counting lock (FAA only): bits 0-31 IDUs in flight, 40-47 SMO hold, 48-55 dead
//	16      SMO     holder client id and lease deadline, or done (CAS only)
//	24      plan    the SMO's recorded replacement (CAS only)
//	32      16 bytes reserved
//	48      front   version (the leaf's generation)
//	56, 64  min, max
//	72      keys    S key words (CAS only): 0 empty, k committed, k|1<<63 tentative, 1<<63 tombstone
//	72+8S   values  S words (plain writes)
//	72+16S  rear    version, equal to front
//
// Leaves are never rewritten in place: an SMO writes new leaves (copy-on-write), so no WRITE
// ever covers a word others CAS or FAA, Spear included (strict mode checks this in every
// test), and front and rear differ only in a block that is not a leaf.
//
// # Operations
//
// A lookup probes the Cache from depth 7 up and starts at the deepest cached node of the key's
// path, else at the root; each node below costs a read. A node read through a child word
// whose type is stale (the node grew) is read again in full and the word repaired by an
// unsignaled CAS. A child node is checked by depth and full prefix; a cached copy is never
// trusted for an absence (it is re-read), and a leaf is checked by its dead bit and key range.
//
// Scan (and ScanBytes) first tries the paper's one round: when the cached special nodes (or a
// cached node's leaf child) cover the whole range, every leaf they name in it is read in one
// batch, and the answer stands if every leaf read is live and their ranges tile the range (a
// live leaf is the home of its range when read). Otherwise it starts at the deepest cached
// node on its first key's path, read again, walks its subtree in key order with fresh reads
// (sibling leaves in one batch) and goes on past its range; a leaf found dead sends it back to
// the leaf's parent, read again, for that leaf's range, and so does the part of a special
// node's slot range that a live leaf does not cover (a node's read is not one snapshot: a copy
// whose type word was read before a split grew the node past the upper leaf's slot, and whose
// slots after the swap, gives the lower leaf the upper leaf's range too). It is not atomic:
// each key's report is what a Get at some instant within the scan would return. A warm
// Scan(100) at 50% fill costs 1 round trip of 2 to 4 leaves (ScanRoundTrips).
//
// Get reads the leaf's head and keys, then its values, in one ordered batch: a committed key
// was read before its value, which was written before the key was committed. Update and
// Delete batch the Spear FAA (+1) with the head and keys (the value array is not read); an
// Update WRITEs the value and a Delete CASes the key word to a tombstone, each with the release
// FAA (-1) unsignaled behind it. Insert claims an empty slot with a CAS to the key with the
// tentative bit, batched with a re-read of the keys, then writes the value and commits with a
// CAS clearing the bit. Round trips are in costs.go's constants: warm Get 1, Update 2, Insert
// 3, Delete 2.
//
// # Values larger than 8 bytes
//
// A tree created with Params.BlockValues holds byte strings (GetBytes, InsertBytes,
// UpdateBytes; Delete): the leaf's value word points to an immutable block (an 8-byte length
// and the bytes) and carries the block's size, so a reader fetches it in one read. An update
// writes a new block with its first round trip and CASes the value word from the pointer it
// read (a CAS lost to another update is retried from the word found); a delete CASes the
// value word to 0 beside the tombstone. The value word is then an atomic target: an insert
// sets it by CAS with its commit, and SMOs copy it into new leaves, never rewriting it. The
// block swapped out is retired through the allocator's epochs, and every operation runs
// pinned. Costs: Get 2 round trips, Update 2, Insert 3, Delete 2 (GetBytesRoundTrips,
// UpdateBytesRoundTrips), plus an epoch announcement once per allocator Refresh period.
//
// # Value words under a synchronizer
//
// With Options.Sync, UpdateBytes makes its value-word swap through a ds/ptrsync synchronizer:
// ds/cider's CIDER (global write combining, contention-aware routing), MCS or spinlock, as the
// CIDER paper applies CIDER to SMART's leaf pointers. A leaf has no room for a lock entry per
// slot and an SMO copies slots into new leaves, so a tree created with Params.LockEntries keeps
// a lock table on each memory node, hashed by the key (locks.go); keys may share an entry, and
// the tree's targets say so (ptrsync.SharedLock): a CIDER member takes a batch's outcome only
// if its executor changed the member's own value word. The update's first round trip is the
// tree's own (Spear FAA, leaf read; the block written with it unless CIDER defers it), it holds
// the Spear count through the synchronizer's commit, queueing included, so no SMO moves the
// value word meanwhile, and every nonzero word the value word holds names a block of the key (a
// slot keeps its key until an SMO; a delete tombstones it and clears the value word). CIDER's
// deferred block is allocated on the value word's memory node and written in the CAS's batch.
// Inserts, deletes and SMOs keep the tree's protocol and never take the lock; no lock holder
// waits on a Spear count. Readers are never shown a freed block: every operation is pinned, a
// committed swap retires the replaced block through the allocator's epochs, an update past
// Options.PinBudget makes no CAS and looks again, and a combined member's block is never
// written. Uncontended round trips: optimistic 2, CIDER on a hot key 4 (enqueue; block WRITE
// with the CAS; release), MCS 4, spin 4; a combined batch writes one block and CASes once.
//
// # Decisions where the paper or its code is wrong
//
//   - An update returns only once its WRITE has completed (the artifact posts it unsignaled
//     and returns at once: a later reader may see the old value, which is not linearizable).
//   - A split sorts the committed pairs by key, moving each value with its key (the artifact
//     sorts the key array alone), and splits at the median, the upper half (the larger, for
//     an odd count) to the new leaf (the artifact keeps three quarters). A leaf whose
//     committed pairs fill at most half of it is compacted into one new leaf instead.
//   - A search reads every slot: it does not stop at the first empty one, which a delete or
//     an abandoned insert leaves anywhere (a false not-found in the artifact's code).
//   - An insert's key never shows before its value: the tentative bit keeps readers, updates
//     and deletes away until the committing CAS, still 3 round trips. Competing inserts of one
//     key resolve on the re-read: a claimant that sees the key tentative in a lower slot gives
//     up (and waits for that slot's outcome); one that sees it in a higher slot waits for that
//     slot's outcome (its claimant either saw the lower slot and gives up, or read before it
//     was claimed and commits); a slot left tentative past the lease is made a tombstone, so
//     at most one slot of a leaf ever commits a key.
//   - A delete CASes its key word to a tombstone, and a slot is reused only when an SMO copies
//     the leaf under an exclusive Spear: an update that read the leaf before a delete and a
//     re-insert lands on a dead slot, never on another key's value (no ABA).
//   - An SMO never rewrites a leaf: it writes new leaves and swaps child words, so no plain
//     write covers a word others CAS, with or without an exclusive Spear.
//   - The special node grows through the node types with a MaskedCAS like any node; the
//     artifact asserts at 16 entries.
//
// # Structural changes
//
// A new 7-byte prefix gets a new leaf in an empty slot of the deepest node (the leaf's WRITE
// and the slot's CAS in one ordered batch on the node's memory node; a slot beyond the type's
// capacity takes a MaskedCAS of the type in the same batch). A key whose prefix leaves a
// node's (or a leaf's) gets a new node above it, written with a leaf for the key and CASed
// into the parent's slot. Slots fill in order, and a claimant whose CAS fails looks at the
// winner's partial, so a node's partials stay unique.
//
// An inserter finding its leaf full runs an SMO: it claims the leaf's SMO word (its client id
// and a lease deadline, Options.Lease), turns its Spear count into the exclusive hold with one
// FAA, and waits for in-flight IDUs to drain by re-reading the Spear word (1µs doubling to
// 64µs, counted in Stats.DrainReads; an IDU that finds the hold undoes its FAA and re-reads
// the leaf's Spear and SMO words with the same backoff). It then reads the frozen leaf, writes
// the replacement in one new block (one leaf for a compaction; two for a split, plus a new
// special node when the parent is an ordinary node) on its own preferred memory node (the
// allocator's placement, so the leaves of a loaded tree spread over the memory nodes, where a
// new prefix's first leaf sits on its parent's node), records the block in the plan word by
// CAS, marks the leaf dead with an FAA, and publishes: a split's upper leaf into an empty
// slot of the special parent, then the old slot swapped to the replacement. Readers of a dead
// leaf go back to its parent (one node read, not a restart from the root) and, if the parent
// still names it, wait. Every publishing step is a CAS from a known word, so any number of
// executors may run it: once the holder's lease has expired, a waiter takes the claim over
// and finishes the SMO (publishes the recorded plan, or drains, plans and publishes itself).
// The holder it took over from may still be running, and either may come late: an executor
// that finds the dead leaf's key path ending at another leaf, naming neither the leaf nor its
// plan's leaves, takes the swap as made (a dead leaf with a recorded plan leaves its slot only
// through that plan's swap, and no slot names it again; the replacement may have been
// replaced since), one more read of the leaf's head confirming plan and death when it read
// the leaf before the plan was recorded. An SMO that cannot drain within half its lease undoes
// its hold (its claim given back by CAS, then the hold by FAA) and the insert fails with
// ErrBusy. A waiter that finds a hold with no claim past a lease takes it for a holder that
// died undoing, claims the leaf and adds an exclusive hold of its own (holds are counted in the
// Spear word) before it runs the SMO: the holder may be alive with its FAA still to land, which
// must not make the leaf writable under the waiter's copy.
//
// # Cache
//
// The radix cache (Cache, one per compute node through farmem/nodestate) holds copies of
// nodes down to the special nodes, with a byte budget and FIFO eviction; see Cache. A leaf
// whose reverse pointer does not name the slot it was reached by drops the cached parent; a
// reader that came through a fresh parent repairs the hint. A stale special node costs two
// extra round trips (the dead leaf, the special node), never a wrong answer.
//
// The copies live in Go memory, so on a fabric that prices its clients' CPU accesses instead
// of running them in real time (the simulator: localcost.Pricer), each lookup pays one
// local access plus the bytes of the copy it returns, and each copy put pays one access plus
// its bytes (localcost.Price, charged with Runtime.Compute): what a cache in the compute
// node's own region would pay in verbs, and the rule the Sherman-like and SMART-like
// baselines (bench/baseline) follow, so the comparisons charge every cache alike.
//
// # Runtime
//
// Time and sleeps come only from the client's farmem.Runtime; the package starts no goroutine
// and holds a Go mutex only around the cache's map, never across a verb, so it runs unchanged
// on the simulator.
//
// # Limits
//
// Leaves and nodes are never merged or freed: an SMO's old leaf stays allocated (stale readers
// may hold it; there is no deferred free yet). Efficiency assumes dense keys: with sparse keys
// nearly every key has a leaf of its own. A client that dies while holding an IDU's Spear count
// (between its first and last round trip) blocks SMOs of that leaf: inserts into it, once
// full, fail with ErrBusy. Leases assume clocks within Options.Lease of each other. At most
// 255 memory nodes and 256 TiB per node (ErrPointerRange); block values at most MaxValue bytes.
// A scan the cache does not cover reads internal nodes one per round trip (the paper batches a
// whole level's reads per memory node); nodes never shrink.
package hybrid
