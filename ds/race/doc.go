// Package race is RACE hashing (Zuo et al., ATC'21) over far memory: a lock-free extendible
// hash table that clients reach with one-sided verbs only. It is the index under kvstore and
// ds/cider: keys and values are byte strings, and the final pointer change of Update and Delete
// is delegated to a ptrsync.Synchronizer, so that locks can sit behind the same table.
//
//	root, err := race.Create(ctx, m, a, race.Params{}) // once
//	t, err := race.Open(ctx, m, a, root, race.Options{}) // per client
//	err = t.Insert(ctx, key, value)   // ErrExists if present
//	v, err := t.Search(ctx, key)      // ErrNotFound if absent
//	err = t.Update(ctx, key, value)   // ErrNotFound if absent
//	err = t.Delete(ctx, key)          // ErrNotFound if absent
//
// A handle belongs to one client (one goroutine with its own farmem.Memory and
// alloc.Allocator); handles share nothing but far memory. Every operation is linearizable
// (checked with farmem/lincheck under tearing, jitter, paused and crashed clients, forced
// collisions, splits and directory doublings during the run, and a client dying mid-split).
// Table.Audit checks a quiescent table's invariants. An operation that fails with a transport
// error may or may not have taken effect.
//
// # Layout
//
// Far pointers are packed into 46 bits (ErrPointerRange if one does not fit). The root
// (RootSize bytes) holds the parameters, the directory word and lock, and counters; the
// directory maps a key's hash suffix to a subtable and is only a hint. A subtable holds a
// header word (local depth and suffix), a split lock, parent, move (the split in progress,
// by regions: Resizing) and child words, bucket groups
// (main, overflow, main) of Slot words, and Params.MetaSize bytes of lock entry per slot. A KV
// block (DecodeBlock) is written once, out of place, with a checksum covering its address:
// XXH3-based since layout version 3 (about three times faster than version 2's); a
// version 2 table, made by an older binary, is still read and written in its own format.
//
// # Operations
//
// A key's hashes choose its subtable, two combined buckets and a fingerprint; a key keeps its
// slot index across splits. A lookup reads both buckets and the subtable's header in one batch,
// uses them only if the subtable owns the key (its header covers the key, and its move word
// does not say that a split in progress moved the key's regions: see Resizing), then reads the
// blocks of fingerprint matches; a
// block failing its checksum restarts it. An Update or Delete whose buckets hold one
// fingerprint match reads only that block's head, its header and the key (a committed block
// never changes while the operation is pinned): a head that does not match its slot word
// restarts it the same way. Over a Memory that offers a prefetch hint (cxl's
// clients), a handle asks for lines as soon as it knows their addresses (the buckets once the
// key is hashed, a fingerprint match's block as the buckets are decoded, a new block once
// allocated), so that the cache misses overlap the work before the batch that touches them; a
// batch whose lines were hinted so runs without asking for them again. No verb depends on the
// hint.
//
// Search reads only: it ignores tentative slots and reads frozen ones, so a split never blocks
// it. On a table without block copies and an unreplicated index, a Search the address cache
// did not answer takes a straight path (searchStraight, counted in Stats.SearchStraight): the
// lookup and the read of its fingerprint matches' blocks written out in one function, for a
// subtable that owns the key with no split under way; a view not owned outright, a block that
// fails validation, or a pending adoption goes on in the general path from where it stands
// (Stats.SearchHandovers), the view read not read again; verbs, round trips and bytes are the
// same either way. Insert writes its block with the lookup, CASes an empty slot to a tentative word,
// re-reads, resolves competing inserts of the key (lowest slot index wins; an expired
// competitor is removed) and commits with a second CAS, so at most one committed slot ever
// holds a key. Update and Delete let the synchronizer change the key's slot word, the pointer
// (the key's identity is its second hash under the table's seed, the same in every client of
// the table: no second pass over the key); a frozen word is never replaced, and the replaced
// block is retired. Slot CASes that find another word count in Stats.Conflicts.
//
// # ABA and lock entries
//
// Slots carry no version: blocks are freed only through the allocator's deferred free while
// every operation runs pinned, so a word a pinned client read cannot reappear, and an operation
// pinned longer than Options.PinBudget re-pins and looks again. Lock entries live in a parallel
// array in each subtable, found from the slot's address and prefetched with the blocks when the
// synchronizer's Plan asks, so a synchronizer finds a slot's entry with no round trip of its
// own. Open refuses a synchronizer whose LockSize exceeds Params.MetaSize. A split does not move
// lock entries: the new slot's starts zero.
//
// # Clock readings
//
// A Search pins with no clock reading (alloc.Allocator.PinCoarse) and reads the clock once, at
// Unpin, which confirms the lease held throughout. An Update or Delete pins the same way, so
// its section's start (the budget's origin) is the allocator's latest reading, a lower bound;
// the synchronizer reads the clock before each CAS to check the budget (ptrsync.Target's
// Deadline), and a committed change's retire of the replaced block takes that reading
// (ptrsync.Result's CheckedAt, alloc.Allocator.RetireAt), which then serves the Unpin
// (alloc.Allocator.UnpinSeen): one reading per uncontended change instead of five. Using the
// reading from before the CAS for the retire rests on the bound the CAS itself rests on: the
// CAS comes within the lease's margin over PinBudget of that check (alloc's lease of 1 s
// against a budget of 250 ms by default), so the lease held at the unlink. A synchronizer that
// does not report the reading (CheckedAt 0) leaves the retire to read the clock after the CAS,
// as before. The lower bound only makes the budget end early: a change that
// starts after the client sat idle longer than PinBudget finds its deadline passed at its
// first CAS and re-pins and looks again once (3 more round trips), which bounds the cost of the
// coarse start to operations that follow an idle time far longer than themselves.
//
// An Insert pins the same way; its new block's lease counts from that lower bound (shorter,
// never longer, than measured from the start). It reads the clock before its tentative CAS, to
// check the budget, and hands that reading to the allocator (alloc.Allocator.NoteClock) for
// its UnpinSeen. Its commit checks the budget again only when it read something since but the
// re-read in the tentative CAS's batch (a competitor's block, a wait) or the table is
// replicated (Repopulate counts from a block's write to its commit): the uncontended commit
// follows the check by one round trip, on the margin every CAS rests on. One reading per
// uncontended insert instead of four. An Insert that finds the key reads the clock at its
// Unpin instead, as a Search does, and looks again if the lease ran out while it read the
// key's block.
//
// # Resizing
//
// A table of layout version 4, what Create writes unless Params.WholeSplit asks for version 3,
// splits a subtable over many inserts, region by region (splitstep.go; SPLIT-DESIGN.md gives the argument): a region is a bucket
// group (with more than 56 groups, 56 regions of adjacent groups), the smallest set of slots
// closed under "the buckets some key may use", and a word of the subtable's header area, the
// move word, holds the depth of the split in progress and a bit per region moved. An insert
// that finds its better bucket nearly full (at most 2 empty slots) begins a split: it takes
// the subtable's split lock (a leased CAS), allocates the new half, writes it with every slot
// unborn (frozen and tentative with no block: readers skip it, writers wait), records it in
// the child word and sets the move word's depth, and releases the lock. From then on every
// insert of a handle that knows of the split (it began it, or met it) moves one region before
// returning, under the lock again: it freezes the region's slots, reads the heads of their
// committed blocks to learn which keys leave, CASes each leaving word into the new half's
// slot from unborn, sets the region's bit, then releases both halves' region (in the old
// one leaving, tentative and empty slots become 0, in the new one unborn slots become 0 and
// copies lose their frozen bit). Once every bit is set an insert ends the split as the whole
// split did: publishes the half in the directory, moves the old header to the new depth and
// clears the half's parent lock. Lookups read the move word with the header (same read) and
// apply the owner rule: a key whose regions both moved is read in the new half through the
// child word (a second lookup; the handle caches the child word), a key with one region
// moved (mixed) is read by Search in both halves (the unmoved region's slots from the first
// read, the moved one's from the second) and moved whole by a writer before it writes, so
// that writers only ever work in one half and the insert protocol needs no change. An insert
// whose buckets are full moves its key's regions, or, if they moved already, finishes the
// split; a half that fills before its parent's split ends finishes it. A split whose clients
// stop inserting stays half done, correct but unfinished (Table.FinishSplits ends every split
// in progress, FinishPartitionSplits those of one partition, which ReadPartition needs: it
// refuses a partition holding one, and kvstore's FlexKV finishes them before a hand-over;
// Purge ends those it finds once a lost node's memory is gone). Leases and recovery are as below:
// a waiter that finds the lock expired, or free twice while slots stay frozen, takes it and
// redoes or finishes, from far memory, what the dead holder left (a region frozen but whose
// bit is unset is moved again, one whose bit is set only released; a late copy of a lapsed
// holder fails, since a released slot never holds the unborn word again). A step costs 5
// round trips uncontended (the lock with a read of the header area, the freeze, the heads, the
// copies with the bit, the release with the unlock; 6 when the halves are on two memory nodes)
// and about 110 verbs with the default geometry (some 9µs on cxl: BenchmarkLoadTail, 1
// client, Intel Xeon at load 5: step p50 9.1-9.4µs, p99 27-40µs); about 7% of a growing
// table's inserts carry one, so its p99 insert is a step and its p999 about 65µs where the
// whole split's is 260-280µs (with 4 clients 130-147µs against 277-313µs); on the same CPU at
// load 1.5, 22-28µs (19-23 times the p50) against 224-259µs, and with 4 clients 47-121µs
// against 234-288µs (SPLIT-DESIGN.md, second session). In all, a split's
// 56 steps issue some 6,200 verbs (the whole split 5,150) and take about 1.8 times its time
// (some 500µs against 280µs), since each step has its own round trips and batches. Until
// a split ends, a key whose region moved costs a lookup more (one more once per handle and
// split, for the child word).
//
// Tables of layout versions 2 and 3 (made by older binaries, or by Create with
// Params.WholeSplit, and shareable with those binaries) keep the whole split:
// one insert, the one that found both candidate buckets full, does all of it. The splitter
// takes the split lock and allocates the new half (and a doubled directory) before
// freezing anything, so running out of memory fails the insert with farmem.ErrNoSpace and
// leaves the table as usable as before. To learn which keys move it reads the head (first
// Unit: header and key) of every committed slot's block, checked against the slot word's
// length and fingerprint, not the whole block: a Unit per slot whatever the values' size.
// It does so before freezing, within its pinned section, and keeps what it learnt only if the
// section is still within Options.PinBudget once the slots are frozen (no block it read can
// have been reused by then); then it freezes every slot, reads the heads of blocks committed
// in between, writes the new half, publishes it, moves the old header to the new depth and
// unfreezes both. The new half holds frozen copies of the moved slots and is otherwise empty
// but for one frozen slot in each bucket group whose overflow bucket holds no moved one: every
// combined bucket includes its group's overflow bucket, so an insert into the half before its
// release meets a frozen slot and waits, as it would were every slot frozen, and releasing the
// half takes a CAS per moved key and per such group, not per slot. The header moves before
// any old slot is cleared, so readers stay correct,
// and a stale directory cache is refreshed and walked through child words: a late directory
// update costs round trips, never correctness. Writers meeting frozen slots poll with
// backoff, pauses doubling from Options.Backoff to at most 64µs, so they resume within that
// (and a read) of the split's end; once the holder's lease (Options.Lease plus ClockSkew)
// expires, a waiter finishes the split, every step being idempotent. Leases assume clocks and
// verb delivery within ClockSkew. With the default geometry (1,536 slots) a split costs about
// 25 round trips and some 5,150 verbs (a freeze, a head read and a release per slot, and a
// release per moved key),
// about a quarter of a millisecond of a core on cxl (three fifths of it inside the verbs; the
// split reuses its buffers, kept process-wide, so it allocates next to nothing), all paid by
// the insert that found its buckets full. Splits are rare, about one insert in 800 while a
// table grows, but that is more than one in a thousand: a growing table's p999 insert latency
// is a split's duration, which the region split spreads over some 58 inserts.
//
// # Restarted memory nodes
//
// Until a restarted node is adopted, an operation on a key whose subtable or block was there
// fails with an error wrapping farmem.ErrNodeLost, never a wrong value or ErrNotFound. After
// adoption, Table.Purge empties every slot naming lost memory and replaces lost subtables with
// empty ones, reporting each lost entry by slot, fingerprint and suffix, then ends the
// splits in progress it found (a lost new half is replaced by one its split goes on into; a
// lost old half takes the keys already moved into its new half with it, covered by its
// report). The root and directory
// (kept on one node when it has room) are a single point of failure: Purge then fails. A stale pointer into
// re-used memory is never followed to a value: blocks fail their checksum, and handles reload
// their directory after any adoption. An operation in flight across an adoption is not
// defended against. Table.Locate tells where a key's slot and block live.
//
// # Proxying and address caches
//
// Layout version 2 (older roots are refused with ErrBadRoot, naming the version) gives every KV
// block a random 32-bit stamp, covered by its checksum, and a valid word outside it. A writer
// under Options.Invalidate sets the valid word of the block it replaces or deletes before its
// CAS, in the round trip that reads the block (so uncontended costs do not change; a block of
// another key sharing the fingerprint is invalidated too, costing its cached readers a miss,
// and a write that then fails leaves a committed block invalid, with the same cost). An
// address cache keeps an Entry (the committed word, the block's stamp, the slot's address)
// from SearchEntry, and SearchCached reads the slot's word and the block, one round trip,
// accepting the block only if the slot still holds its word and it validates and holds the key
// and the stamp. On one memory node the slot's word is read first, in order: the block it
// named was committed then, and a block that validates with its stamp is that block, unchanged
// (a block is reused only after it was replaced, and then carries another stamp; a read that
// meets the reuse's writes fails the checksum or shows it). On two nodes nothing orders the
// two reads, and the block's valid word is read too, first on the block's node, and must be
// clear: the block was then the committed value when its valid word was read, since writers
// invalidate before they commit. The valid word is outside the checksum, and a reuse writes a
// block in ascending order, so a clear valid word read before the block means either that the
// block had not been replaced, or that the reuse's new stamp is what the block read shows;
// read within the block, it could come from a reuse whose first words landed between the
// reader's (the old block's checksum and stamp with the new block's clear valid word). Plain
// Search ignores the valid word.
//
// A handle's own address cache (Options.AddressCache, which needs Invalidate) keeps such an
// entry per key, in sets of two chosen by the key's second hash (32 bytes an entry, a set
// one cache line): each
// Search that reads a key through its slot, and each Insert or Update that commits it, keeps
// its entry, and the next Search of the key reads the slot's word and the block
// (CachedSearchRoundTrips: one round trip, no pin, no clock reading), accepting it as
// SearchCached does; a stale entry's block is forgotten and the Search reads the slot as
// usual, one round trip later. The handle's own Update keeps the entry of the block its CAS published (a
// combined update, ptrsync.Combined, whose block is never published, leaves none); its Delete
// drops the key's entry. Update and Delete set
// the valid word in the batch that reads the replaced block (its head, for findOne), so
// invalidating adds one 8-byte write and no round trip; a writer whose invalidation of the
// key's block failed does not CAS. An Update or Delete of a key whose entry the handle holds,
// its slot and block on one memory node, skips the lookup: its first batch writes the new
// block, then reads the slot's word and the old block's head, in that order on that node, and
// its CAS's batch sets the old block's valid word first (CachedUpdateRoundTrips and
// CachedDeleteRoundTrips: two round trips instead of three; a stale entry costs one more
// before the lookup). Why the head read after the slot's, pinned, tells what the lookup would:
// changeCached. Such an Update, when the synchronizer offers ptrsync.Straight (Optimistic and
// ds/cider's CIDER do) and routes it lock-free with its block written early, takes a straight
// path (updateStraight, counted in Stats.Straight): the same batches written out in one
// function, its state in locals, making the commit's first step itself (the deadline check, the
// section's one clock reading, then the CAS with the old block's invalidation in its batch, with
// concrete calls) and handing it to CommitStraight, which counts it as Commit would
// (ptrsync.ExecuteStep: a lost CAS is continued there, as Execute would). Anything else (a
// plan that is not straight, a stale entry, a Retry) goes on in the general loop from the
// state its own first attempt would have left (Stats.StraightHandovers), so retries,
// retirement and cache maintenance off that path are the loop's; verbs, round trips and bytes
// are the same either way. On cxl it costs about 5,470 instructions per cached kvstore Put
// (callgrind, most of them the allocator, the block's encoding and checksum and the two
// batches), against 5,920 through the loop. Each entry counts its misses (a saturating count, 0 to 3): a look through it
// that found the key's block replaced adds one, one that found it unchanged takes one back.
// From two misses the entry is volatile and not used (CacheSkips): the Search, Update or
// Delete takes the lookup, which costs what the stale entry's look would have led to anyway,
// less its round trip and block read, and counts against the entry what it found, so a key
// other clients keep updating stops costing a wasted read per operation, and one that went
// quiet is cached again after two lookups that found its block unchanged. The handle also
// keeps a stale rate over all its looks and those lookups (a moving average, 1/64 per
// observation): while more than half find the block replaced, no entry is used at all. Under
// a steady workload every entry goes stale with about the same probability, 1-e^(-(n-1)w)
// for n equally busy clients updating a share w of their operations (78% on YCSB A with 4
// clients, 14% on B, 96% on B with 64), so the rate learns in some 44 looks what the miss
// counts would learn only key by key (addrCache.observe). A handle whose entries have mostly
// failed of late (more than a quarter of its recent operations took the lookup: a cache far
// smaller than the key set) asks for the key's buckets before it reads the key's entry, so
// that the entry's line and the buckets' come together (addrCache.early; a hint, no verb).
// A stamp is 32 bits: a block reused at the same address for
// the same key with the same stamp, not yet committed or never to be, would be taken for the
// cached one, one chance in 2^32 per such reuse. Replicated tables keep no cache.
//
// For an index proxy: partitions are the subtables at the fixed directory depth
// Params.InitialDepth (Layout.PartitionOf: the low bits of the key's first hash) and all their
// descendants; ReadPartition reads one whole, refusing (ErrBusy) while a split holds it;
// Layout.Place names a key's candidate slots in whichever subtable holds it; Resolve is the
// slot-resolved lookup (the slot's address and its expected word, the new block written in
// the same round trip); SearchWords reads the blocks of words a proxy returned, pinned.
//
// Delete lease: with Options.DeleteLease a Delete leaves a tombstone (MakeTombstone) holding
// the time from which an Insert may reuse the slot, DeleteLease·(1+DriftBound) plus ClockSkew
// after the delete; a split keeps tombstones in the old half. A slot address cached less than
// DeleteLease ago (by the clock of the client that cached it) therefore names the key's slot or
// its tombstone, never another key's, provided clocks drift by at most DriftBound and differ by
// at most ClockSkew. Every client honours a tombstone, whatever its own options.
//
// # Replication
//
// With Params.Replicas (recorded in the root, so every client agrees) each KV block is
// allocated at one offset of the allocator's symmetric area and written to its primary memory
// node (chosen by the key's second hash, so load spreads) and to the next Replicas-1 memory
// nodes in id order, each copy checksummed for its own address, all in the batch that writes
// the block; a slot names the primary. Readers read the primary; when its memory node is down
// (farmem.ErrNodeDown, not ErrNodeLost) a lookup that found the slot reads the backups in turn
// (one round trip each, counted in Stats.BackupReads) and takes the first copy that validates
// for its own address. Copies of a block that a committed slot names never disagree in their
// checksummed bytes: a block is written whole to every copy before the CAS that publishes it,
// and never changed after, so any valid copy is the block and a copy that fails validation is
// skipped (the next is tried; with none left the read fails as without replication). Only the
// valid word differs: writers invalidate the primary's, the one address caches read
// (SearchCached reads the primary only); a backup's valid word means nothing. So writers do
// not fall back: an update or delete whose old block's primary is down fails with
// ErrNodeDown. Copies of a block no slot ever named (a writer that died between its write and
// its CAS) may disagree or be partial; no reader follows them. Rebuilding a lost
// primary from its backups is not built: a restarted primary's keys fail with ErrNodeLost as
// without replication. Blocks are freed and retired through the symmetric area, so a
// replicated table's KV data is bounded by alloc.FormatOptions.SymmetricSize.
//
// # Replicated index
//
// With Params.IndexReplicas = 2f+1 (3, 5 or 7) the whole table lives on 2f+1 memory nodes
// (IndexReplicaNodes): the allocator's metadata nodes when the fabric was formatted with as
// many (alloc.FormatOptions.Replicas, as a kvstore store with Options.Replicas does), else the
// highest 2f+1 memory nodes (so that, given more, the lowest one, which then holds the
// allocator's unreplicated shared words, is not among them). It survives any f of them
// crashed, the first one included: every operation
// completes, no value is lost or stale. Its root address names the virtual node
// VirtualNodeBase+r, so every client knows from the root alone; Create records the count in the
// root too. Open wraps the client's Memory in a farmem/replmem view of those nodes, and the
// table's code runs unchanged on it: root, directory, subtables, splits, directory doublings
// and KV blocks are all replicated, since every word the table reads, writes or CASes is a
// replicated word. The protocol and the argument that it is linearizable are replmem's (its
// package doc): plain reads take f+1 replicas agreeing on every word of the batch (so a
// lookup's slots and header keep their order), plain writes reach f+1 replicas, and each
// atomic locks its word on a majority of replicas, takes the largest version among them and
// writes the result with a new version before releasing, with leases against dead clients. The
// table's own protocol (tentative inserts, frozen slots, leased split locks) is linearizable
// over linearizable words, so the replicated table is linearizable. Memory is allocated in
// the allocator's symmetric area, replmem.Stride times the logical size on each replica (so a
// replicated table's size is bounded by alloc.FormatOptions.SymmetricSize/Stride); it excludes
// Params.Replicas (KV block copies), and it needs the Optimistic synchronizer (Open refuses
// the others, whose lock state lives outside the table's memory). Purge does not apply to it:
// a replica that restarted empty is brought back by Repopulate, and meanwhile its words, at
// version 0, count in no majority.
//
// Round trips, uncontended (ReplicatedSearchRoundTrips and those beside it, asserted beside
// the unreplicated ones): Search 2 (1 absent), Insert 5, Update 4, Delete 4, against 2 (1), 3,
// 3 and 3 unreplicated; each slot CAS costs a lock round and a write round (reads batched
// after it ride the write round). Bytes grow more:
// a read brings three copies of each word's group from every replica (36 times the bytes
// with three replicas), a write Stride times the bytes to each. During a crash, a hang or a
// partition, a client waits for the lost replica's down timeout, then leaves it out; handles
// given one Options.Health (a store gives one to all its handles on a compute node) leave it
// out together and try it again one at a time (replmem.Health), so the node pays one down
// timeout per probe period, not one per handle; no operation fails.
//
// # Costs
//
// Round trips are the constants SearchRoundTrips, InsertRoundTrips, UpdateRoundTrips,
// DeleteRoundTrips, OpenRoundTrips and those beside them. A stale directory entry costs one
// more round trip (two after a doubling, plus one per hop); a lost CAS a re-read and another
// CAS; a split about fifteen, with batches as large as the subtable.
//
// # Runtime
//
// Time, sleeps and randomness come only from the client's farmem.Runtime; the package starts
// no goroutine and takes no Go lock, so it runs unchanged on the simulator. Waiting for a split
// or a competing inserter polls far memory with backoff.
//
// # Limits
//
// At most 255 memory nodes and 16 TiB per node; a key and value together at most MaxKV bytes,
// a key at most MaxKey; global depth at most MaxDepthLimit, and a full subtable at
// Params.MaxDepth gives ErrFull. Subtables are never freed or merged. A client that dies leaks
// the blocks it allocated and had not published, and a split's half written but not recorded.
package race
