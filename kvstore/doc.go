// Package kvstore is farmem's key-value store: byte-string keys and values in far memory,
// reached by one-sided verbs only, over any farmem.Fabric. It assembles an index (ds/race by
// default), a pointer synchronizer (Options.Sync), replication (none by default) and the
// allocator's deferred free behind one handle that many goroutines share.
//
//	s, err := kvstore.Open(ctx, fabric, kvstore.Options{}) // formats and creates if need be
//	defer s.Close()
//	err = s.Insert(ctx, key, value)     // ErrExists if present
//	v, err := s.Get(ctx, key)           // ErrNotFound if absent
//	buf, err = s.AppendGet(ctx, buf[:0], key) // the same into a reused buffer: no allocation
//	err = s.Update(ctx, key, value)     // ErrNotFound if absent
//	err = s.Put(ctx, key, value)        // insert or update
//	err = s.Delete(ctx, key)            // ErrNotFound if absent
//	ps, err := s.Scan(ctx, from, to, n) // ErrNoOrderedIndex with the default (hash) index
//
// # Clients
//
// A Store keeps a pool of clients, each a farmem.Memory on one of the fabric's compute nodes
// with its own allocator and index handle. An operation takes a free client and gives it back;
// when none is free the pool opens another, up to Options.MaxClients or until the fabric
// refuses, and then operations wait to be handed one as it comes back. A Session holds one
// client until its Close and counts its own costs; a goroutine whose Sessions fill the pool and
// that then calls Store methods waits until its context ends. SessionOn wraps a client the
// caller opened.
//
// # Semantics
//
// Every operation is linearizable (checked with farmem/lincheck on every transport, with
// tearing, jitter, paused and crashed clients). Put is Update, else Insert, retried; failed
// attempts have no effect, so a Put takes effect once. Put is lock-free, not wait-free. An operation that fails
// with a transport error (farmem.ErrNodeDown, a context's error) may or may not have taken
// effect.
//
// # Limits
//
// Keys are 1 to Limits.MaxKey bytes, key and value together at most Limits.MaxKV bytes (both
// race.MaxKV for the Race index); values may be empty. ErrEmptyKey and ErrTooLarge (wrapping
// farmem.ErrInvalid) are returned before any verb.
//
// # Costs
//
// The round trips per operation are the constants GetRoundTrips, InsertRoundTrips,
// UpdateRoundTrips and the others beside them, with LockRoundTrips added when the synchronizer
// takes a lock. Store.Stats sums the farmem.Stats of every client the store has used, so a
// harness divides its deltas by the operations it ran.
//
// # Finding the store
//
// A store is found from the fabric alone: its root word, at RootOffset of the allocator's home
// node, is written only with CAS (RootWord) and holds 0, a creator's leased claim, or the
// address of the store's Descriptor (DecodeDescriptor). Racing creators are resolved by that
// CAS; a claim whose lease ran out is taken over. One GenWord per memory node, from GenOffset,
// records its generation and incarnation. Inspect reads all this without opening anything.
//
// # Replicated metadata
//
// Options.Replicas = r = 2f+1 (chosen at creation, recorded in the allocator's headers and in
// the descriptor; 0 takes the record, another value fails with ErrMismatch) keeps the root
// word, the descriptor and the generation table at the same offsets on each of the
// allocator's r metadata nodes (alloc.MetaNodes), with the allocator's own shared words (alloc,
// "Replicated metadata"). The root word is decided by majority: a creator claims it with CASes
// that must succeed on a majority, publishes with CASes from its claim on a majority and
// writes the ready word back on the others; a ready word is never claimed over, so at most one
// is ever on a majority, and readers take the word a majority holds. The descriptor is one
// block of the symmetric area, a copy per node checksummed for its own address. A generation
// word is the largest a majority holds, raised by CASes on a majority. Open (finding the home
// header on the first memory node that answers), operations and Adopt then work with any f of
// the r nodes down, the first included. Cost over r = 1: Open's root and generation reads
// wait for a majority in the same round trips; creation adds a round trip for the descriptor's
// copies; allocation costs are the allocator's. r = 1 keeps today's layout and round trips.
//
// The same factor replicates the RACE index (Race.Replicas 0 takes Options.Replicas; another
// value above 1 fails Open with farmem.ErrInvalid; 1 keeps the index unreplicated) on the same
// r metadata nodes (race.IndexReplicaNodes), so one knob makes every word of the store survive
// any f of those nodes: no node is special. The index then needs the Optimistic synchronizer
// (recorded at creation when Options.Sync is nil; a lock-based one fails Open), and a store
// that formats the fabric gives the symmetric area, where such an index keeps all its words,
// three quarters of the smallest node (Format.SymmetricSize 0); so it does for FlexKV and its
// Aceso-like baseline, whose copies of each KV block (FlexKV's Replicas) live there too.
// Round trips per operation, uncontended, every node up, r = 1 against r = 3 (race's
// Replicated constants, asserted): Get 2/2, absent Get 1/1, Insert 3/5, Update and Put of a present key 3/4, Put of an absent
// key 4/6, Delete 3/4; verbs some 10 times and bytes some 33 times those of r = 1, over three
// nodes. While a node is down, each client waits for it once per replmem suspicion period and
// then leaves it out; no operation fails.
//
// # Memory
//
// Every Update and Put writes a new KV block out of place and retires the one it replaced
// through the allocator's epochs; the block is reused once every live client has refreshed its
// epoch announcement twice or its lease ran out (Options.Alloc), so updates of a fixed key set
// run in bounded memory, also on several memory nodes. Deleted keys' blocks are retired the
// same way; RACE's subtables are never freed.
//
// Running out of far memory is an ordinary outcome: an Insert, Update or Put that finds no room
// fails with an error wrapping ErrNoSpace, has no effect and leaves the store usable. Before
// giving up, the store gathers its idle clients' allocators, reclaims what they retired and
// retries once. Freed memory serves every size class and client, so a store filled to
// ErrNoSpace, emptied and refilled holds about as many keys again; free blocks are not shared
// between processes.
//
// # Restarted memory nodes
//
// A restarted memory node comes back empty with a new incarnation and is fenced
// (farmem.ErrNodeLost): operations on keys whose entry or value lived there fail with
// ErrNodeLost, never a wrong value or ErrNotFound, and other keys keep working. Store.Adopt,
// called once per process, adopts and formats the node, removes the entries pointing into it
// and bumps its generation; its AdoptReport counts the lost entries. Open fences a node whose
// incarnation differs from the recorded one. Locate and Nodes say where keys live.
//
// With replicated metadata any node can be adopted, the home node included, while the store
// runs: a metadata node first gets the store's and the allocator's words from a majority of
// its peers (it counts in quorums only once restored; meanwhile clients use the others), then
// an index that implements Repopulator copies its slots and values onto the node (a replicated
// RACE index: every subtable, directory and KV block from the other replicas); an index that
// does not, or whose Repopulate answers farmem.ErrInvalid (an unreplicated RACE index), loses
// the keys there, purged and reported as without replication. Clients keep running
// throughout: until the node is restored its words count in no quorum, and they see no error.
// See Store.Adopt.
//
// Limits: without replicated metadata the home node is a single point of failure (Adopt
// refuses it); Adopt is meant for a quiet store unless the index repopulates; a restart before
// any Open recorded the node's incarnation looks like a fresh node; stores over several index
// instances (Options.Replication) are not repopulated. With a replicated index: a word a writer
// held through all of Repopulate's retries, or a KV block whose write to the adopted node
// failed while the node answered other batches, stays off that node until rewritten or
// repaired by a read (with another replica down, that key fails with ErrNoQuorum, never a
// wrong value); an operation that retries past a pin budget writes its block again, so one
// begun before the adoption and published after it reaches the node. With replicated metadata: an allocator handover record published on a majority of
// which some nodes restart before it is taken may be lost (its blocks leak), and a creator that
// stalls past Options.Lease while creating the store loses its claim and leaks what it built.
//
// # Closing
//
// CloseContext (Close: bounded by DefaultCloseWait) fails new operations with farmem.ErrClosed,
// releases free clients at once and clients in use as they come back, each step even if an
// earlier one failed. It returns nil once all are released, else a *CloseError wrapping
// ErrCloseIncomplete naming the clients whose release failed or that are still in use. Close is
// idempotent.
//
// # Plugging in other structures
//
// The index is an IndexKind (Options.Index) opening per-client Index handles, or OrderedIndex
// for structures that scan. A Replicator (Options.Replication) combines a client's handles on
// Replicas() instances into one Index. The synchronizer is a Sync (SyncByName for command
// lines): CIDER (the default: optimistic on cold keys, the far MCS lock with write combining on
// hot ones), Optimistic, MCS or Spin. Kind, replicator and synchronizer are recorded in the
// descriptor and a store opens only with them (ErrMismatch), since synchronizers keep lock
// entries in the index.
//
// # The options matrix
//
// Not every kind takes every option: Matrix is the one table of which index kind takes which
// synchronizer, replication factor, proxying and KV cache, and which compute-side cache it
// keeps (the package README renders it with its refusals). Open refuses any other combination
// before writing anything, with a RefusalError wrapping farmem.ErrInvalid that says why; Check
// answers the same without a fabric. A nil Options.Sync takes the kind's default (DefaultSyncOf:
// CIDER for RACE and FlexKV, optimistic for Dolphin's tree, whose large-value pointer words it
// CASes itself, None for SELCC's B-link tree, which changes no far pointer by CAS). Describe
// and Store.Configuration read a store's configuration back from its descriptor.
//
// Swarm is SWARM-KV: a RACE index replicated on the store's 2f+1 metadata nodes maps keys to
// Safe-Guess objects (ds/swarm over ds/maxreg) at one offset of the symmetric area on the same
// nodes, so a warm Get and a warm Update take one round trip each and never touch the index;
// deletes write tombstones that no update can overtake and that clients with stale location
// caches see. Because updates bypass the index, Open refuses (farmem.ErrInvalid, decided in
// Swarm.Refuse) fewer than 3 replicas or a store factor other than the kind's, a synchronizer
// other than Optimistic, an Options.Replication over several instances, and objects with no
// room for a value; no value cache can sit beside it (FlexKV's KV cache is a kind of its own).
// Adopt takes a restarted node holding its replicas back while the store runs: the register
// handles of every Swarm store in the process on the fabric leave the node out of their
// quorums from before the fabric adopts it (once no register verb that looked before is in
// flight, so that none reaches the new, zeroed memory and takes it for the replica's state)
// until every object's replica is copied onto it, which starts the fabric's down timeout plus the objects' Lease and twice their Skew after the
// adoption began. An operation paused across the whole adoption stays linearizable: it pairs
// an answer of the lost replica only with answers to batches posted within the Lease of it
// (TRYLOCK attempts start over past it; the max register counts a replica toward a majority
// only beside answers within the Lease), and those ops have applied before the copy reads the
// others, so the copy carries them. A cut-off replica that missed updates and comes back never
// serves a stale value (a read takes the largest tag of a majority and writes it back). Insert
// takes 15 round trips (17 when the object needs a new symmetric chunk) and Delete 10 (uncontended, three replicas). See Swarm.
//
// FlexKV (a NodeKind) is RACE with FlexKV's index proxying and coherent compute-side caches;
// with NoProxy it is the Aceso-like baseline (see its doc). Store.HandOver moves its
// partitions between proxies and the memory nodes while operations go on; Store.RunManager
// runs FlexKV's manager (Algorithms 1 and 2: which partitions each compute node proxies, and
// how each node's memory is split between its local index and its cache).
//
// An index kind with state of its own on each compute node (a cache shared by the node's
// clients, a proxy, a directory serving peers' Calls and messages) implements NodeKind: Open
// opens that state once per compute node the fabric hosts, through package farmem/nodestate,
// before any handle; each handle finds its node's state in IndexEnv.Node; the kind's handlers
// live in its own block of method ids; Close closes the state once no client is in use, and an
// OpenNode that fails makes Open fail with what was opened closed.
//
// # Runtime
//
// Time, sleeps and randomness come from the fabric's farmem.Runtime; the store starts no
// goroutine (a NodeKind's state follows the same rules), holds no Go lock across a verb or wait, and a waiter for a client is woken by the
// client's return, not by polling, so the store runs deterministically on the simulator.
package kvstore
