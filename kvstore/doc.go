// Package kvstore is farmem's key-value store: byte-string keys and values in far memory,
// reached by one-sided verbs only, over any farmem.Fabric (a cxl region, a tcp cluster of
// farmemd nodes, the simulator, the local transport). It assembles an index (ds/race by
// default), a pointer synchronizer for it (Options.Sync), replication (none by default) and the
// allocator's deferred free, behind one handle that many goroutines share.
//
// # Use
//
//	s, err := kvstore.Open(ctx, fabric, kvstore.Options{})  // formats and creates if need be
//	defer s.Close()
//	err = s.Insert(ctx, key, value)     // ErrExists if present
//	v, err := s.Get(ctx, key)           // ErrNotFound if absent
//	err = s.Update(ctx, key, value)     // ErrNotFound if absent
//	err = s.Put(ctx, key, value)        // insert or update
//	err = s.Delete(ctx, key)            // ErrNotFound if absent
//	ps, err := s.Scan(ctx, from, to, n) // ErrNoOrderedIndex with the default (hash) index
//
// A Store is safe for concurrent use. It keeps a pool of clients, each a farmem.Memory opened
// on one of the fabric's hosted compute nodes (in turn over Options.Nodes) with its own
// alloc.Allocator and index handle: an operation takes a free client, runs on it and gives it
// back; when none is free the pool opens another, up to Options.MaxClients or until the fabric
// refuses one (then operations wait, in turn, to be handed a client as one comes back). A
// goroutine that runs many operations takes a Session instead: it holds one client until its
// Close, skips the pool, and counts its own costs (Session.Stats). A goroutine holding Sessions
// that fill the pool and then calling Store methods waits until its context ends. SessionOn
// wraps a client the caller opened (sim.RunClosedLoop's, say).
//
// # Semantics
//
// Every operation is linearizable (checked with farmem/lincheck across many goroutines of one
// Store, across two Stores on one fabric, on the local transport with tearing, jitter and
// strict mode, on the simulator with paused and crashed clients, on cxl and on tcp).
// Insert, Update, Delete and Get are the index's operations. Put is an upsert built from them:
// it tries Update; if the key is absent, Insert; if that finds the key present (another client
// inserted it meanwhile), Update again, and so on. Each attempt that fails had no effect, so a
// Put takes effect exactly once, at the linearization point of the Update or Insert that
// succeeded, where the key was present (Update) or absent (Insert); the map then holds the
// value either way, which is what an upsert is. A Put racing a Delete of the same key is
// therefore ordered one way or the other: either the Put lands first and the Delete removes its
// value, or the Delete lands first and the Put's Insert (after its Update found nothing)
// creates the key, which exists when the Put returns unless a later operation removed it. Put is
// lock-free, not wait-free: it retries only when another client's Insert or Delete of the same
// key succeeded in between.
//
// An operation that fails with a transport error (farmem.ErrNodeDown, a context's error) may or
// may not have taken effect.
//
// # Limits
//
// Keys are 1 to Limits.MaxKey bytes; a key and its value together at most Limits.MaxKV bytes
// (Store.Limits). For the Race index both are race.MaxKV = 16296 bytes; values may be empty.
// An empty key is ErrEmptyKey, a longer one or a larger pair ErrTooLarge (both wrap
// farmem.ErrInvalid), refused before any verb.
//
// # Costs
//
// Round trips per operation with the Race index, uncontended, asserted with Stats deltas in
// TestRoundTrips for every synchronizer (through a Session and through the pool, which adds
// none once its clients are open):
//
//	                      Optimistic  CIDER  MCS, Spin
//	Get                        2        2       2     race Search: both buckets + header; the block
//	Get, key absent            1        1       1
//	Insert                     3        3       3     block write ∥ lookup; tentative CAS ∥ re-read; commit
//	Insert, key exists         2        2       2
//	Update                     3        3       5     block write ∥ lookup; the key's block (and lock
//	                                                  entry); CAS (CIDER: a cold key's update is optimistic)
//	Put, key present           3        3       5     an Update
//	Put, key absent            4        4       4     an Update that finds nothing, then an Insert
//	Delete                     3        5       5     a lock's acquisition and release add 2
//	Update/Delete, absent      1        1       1
//	Scan                       0        0       0     ErrNoOrderedIndex
//
// plus one when a slot of another key shares the key's fingerprint, and the allocator's pin
// (one round trip) after a client was idle for longer than alloc's Refresh. Store.Stats sums
// the farmem.Stats of every client the store has used (setup included), so a harness divides
// its deltas by the operations run for round trips, verbs, bytes and failed CASes per
// operation.
//
// # Finding the store
//
// A store is found from the fabric alone. Its root word is the 8-byte word at RootOffset (2048)
// of the allocator's home node (named in every memory node's alloc header; by default the
// lowest memory node): between the alloc header proper (512 bytes) and the epoch table (4096),
// bytes alloc neither writes nor hands out. The word is written only with CAS (see RootWord):
// 0 when there is no store; a claim (a client id and a lease deadline) while one is being
// created; or the address of the store's Descriptor once it exists. The descriptor
// (DescriptorSize bytes, allocated from the heap, written once before the root word names it)
// holds the magic "farmKVS1", the layout version, the names of the index kind, the replicator
// and the synchronizer, the roots of the index instances (one per replica), the creation time and creator, and a
// checksum of it all and of its own address (DecodeDescriptor):
//
//	0    magic            8    version           16   index kind name (16 bytes, 0-padded)
//	32   replicator name (16 bytes)              48   replicas (1..8)
//	56   created (fabric time)                   64   creator client id
//	72   synchronizer name (16 bytes)            88   reserved, 0
//	96   index roots, 8 words (unused ones 0)    184  checksum (FNV-1a 64 of [0,184) and the address)
//
// Beside the root word, from GenOffset, is the store's generation table: one atomic GenWord per
// memory node: its generation (0 while it has kept its memory since the store was created;
// Store.Adopt bumps it) and the incarnation it was recorded or adopted with (see "Restarted
// memory nodes"); 0 until a client records it.
//
// Open formats memory nodes that are not formatted (alloc.Format; a node another client is
// formatting is retried), reads the root word, and if it is empty claims it with a CAS, builds
// the index instances and the descriptor and publishes the descriptor with a CAS from its
// claim. Racing creators (goroutines, processes, hosts on one cxl region or tcp cluster) are
// resolved by that CAS: one claims, the others poll until the word names a descriptor. A
// claim whose lease (Options.Lease, plus ClockSkew) has run out is taken over with a CAS (a
// creator that died, or stalled past its lease: its publishing CAS then fails and it opens the
// winner's store; what it built is leaked). Inspect reads the root word and descriptor without
// opening anything, for tools.
//
// # Memory
//
// Every Update and Put writes a new KV block out of place; the index retires the block it
// replaced through the allocator's epochs (alloc.Allocator.Retire), and the retiring client
// reuses it once no client can still be reading it, that is after every live client has
// refreshed its epoch announcement twice, or its lease ran out (Options.Alloc: Refresh and
// Lease; an idle pooled client holds reuse back for at most its lease). Updates of a fixed key
// set therefore run in bounded memory: TestBoundedMemory updates 64 keys thousands of times and
// asserts that the memory nodes' bump pointers stop moving after a warm-up, and that they do
// not stop with reclamation turned off. One limit comes from alloc: a client reuses blocks it
// retired on a memory node other than its preferred one only once its preferred node is full
// (alloc.Allocator.Alloc claims a new chunk first), so on a fabric of several memory nodes,
// clients that replace each other's blocks fill their preferred nodes before reuse sets in
// (TestBoundedMemoryAcrossNodes, behind KVSTORE_CROSSNODE=1). Deleted keys' blocks are retired
// the same way; RACE's subtables are never freed.
//
// # Restarted memory nodes
//
// A memory node process that restarts comes back with a new incarnation and empty memory; the
// fabric fences it (farmem.ErrNodeLost, which wraps farmem.ErrNodeDown). A node that was only
// unreachable (paused, partitioned) keeps its incarnation and is usable again on its own. For
// this unreplicated store, until the loss is acknowledged:
//
//   - every operation on a key whose index entry (RACE slot or subtable) or value (KV block)
//     lived on the node fails with an error wrapping farmem.ErrNodeLost: never a wrong value,
//     never ErrNotFound;
//   - keys held elsewhere keep working (reads, updates, deletes; inserts unless their subtable
//     was lost);
//   - new KV blocks and subtables are placed on other nodes (alloc skips a lost node).
//
// Store.Adopt is the acknowledgement: it adopts the node on the fabric, formats it again,
// removes every index entry that pointed into the lost memory (replacing lost subtables with
// empty ones) and bumps the node's generation; afterwards the store is as if those keys had
// been deleted, and the node takes new data. Its AdoptReport says what can be known of what
// was lost: the count of lost entries and, per entry, its slot, fingerprint and hash suffix
// (not the key: the key's bytes were in the lost block), and each lost subtable with its hash
// suffix (its keys cannot be counted: its slots were lost with it; their KV blocks, on other
// nodes, are leaked, as nothing names them any more). Each process with a Store
// on the fabric calls Adopt once for its own fabric; the first reports the loss, the others find
// the generation already bumped (AdoptReport.Already). Store.Locate tells where a key's entry
// and value live; Store.Nodes reports each node's incarnation, state and generation.
//
// Limits: the home node (root word, descriptor, generation table and the allocator's shared
// tables) is a single point of failure: its restart loses the store, and Adopt refuses it.
// Adopt is meant for a quiet store: an operation in flight across it may fail. A process that
// first dials the fabric after a node restarted meets only the new incarnation; Open compares
// it with the incarnation the generation table records (Open records each node's incarnation
// the first time, in a word still 0) and, if they differ, has the fabric fence the node
// (farmem.Restarts.Fence), before it formats anything, so that process too sees ErrNodeLost
// until Adopt. A restart before any Open recorded the node's incarnation cannot be told from a
// fresh node that way. Replicated stores (repopulating a node from replicas) are not handled
// here.
//
// Running out of far memory is an ordinary outcome: an Insert, Update or Put for which the
// allocator finds no room (for the KV block, or for a split's new subtable or directory, which
// RACE allocates before it freezes anything) fails with an error wrapping ErrNoSpace, has no
// effect, and leaves the store as usable as before. Before giving up, the store gathers into
// that client's allocator what its idle clients' allocators hold (alloc.Allocator.Absorb, no
// verb), withdraws their epoch announcements and its own, reclaims what they all retired, and
// runs the operation once more. Freed memory serves every size class and every client: the
// allocator rebuilds whole chunks from free blocks and passes chunks between clients through
// each memory node's pool of free chunks (see alloc's "Free chunks"), so a store filled until
// ErrNoSpace, emptied and filled again holds about as many keys the second time (within 10%,
// asserted on local and cxl, with four goroutines through the pool, and with every split's
// allocation refused). Free blocks are not shared between processes: a process's clients
// rebuild chunks from what they freed themselves.
//
// # Closing
//
// Store.CloseContext (Close: with a bound of DefaultCloseWait) ends the store: new operations
// and sessions fail with farmem.ErrClosed and waiting ones are woken with it; free clients are
// released at once, and clients in use (sessions, operations in flight) as they come back,
// which Close waits for until its context ends. Releasing a client closes its index handles,
// its allocator (which hands what it holds over to the next allocator of its client id) and its
// Memory, each step even if an earlier one failed, none waiting past the fabric's down timeout.
// Close returns nil once everything is released, else a *CloseError wrapping
// ErrCloseIncomplete that lists the clients whose release failed (a node down: what their
// allocators held is lost, as when a client crashes) and the clients still in use. Close is
// idempotent; calling it again waits again for the clients still in use.
//
// # Plugging in other structures
//
// The index is an IndexKind (Options.Index): it creates an instance and opens per-client
// handles implementing Index, or OrderedIndex for structures that scan (Dolphin's hybrid tree,
// SELCC's B-link tree), mapping their answers to ErrNotFound and ErrExists. Race is the
// built-in kind. Replication is a Replicator (Options.Replication): the store creates
// Replicas() instances of the index and the replicator combines a client's handles on them into
// one Index (SWARM's write-to-a-replica-set, read-a-quorum); NoReplication is the default.
// The pointer synchronizer is a Sync (Options.Sync; SyncByName for command lines): CIDER
// (ds/cider, the default: contention-aware, optimistic on cold keys, the far MCS lock with
// global write combining on hot ones), Optimistic (ptrsync.Optimistic, lock-free CAS), MCS (the
// far MCS lock for every change) and Spin (a CAS spinlock). Kind, replicator and synchronizer
// are recorded by name in the descriptor, and a store opens only with the ones that created it
// (ErrMismatch; a nil Options.Sync takes the recorded one): synchronizers keep their lock
// entries in the index, and two kinds of lock would misread each other's. Race tables are
// created with DefaultMetaSize bytes of lock entry per slot, room for any of them.
//
// # Runtime
//
// Time, sleeps and randomness come only from the fabric's and clients' farmem.Runtime; the
// store starts no goroutine; its one Go lock guards the pool's lists and is never held across
// a verb or a wait. A goroutine waiting for a client (or Close waiting for clients to come
// back) sleeps in fabric time on a context that the goroutine giving a client back cancels, so
// it is woken by that event, not by polling, and runs on the simulator as an event too. So a
// store runs unchanged, and deterministically, on the simulator.
package kvstore
