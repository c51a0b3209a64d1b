// Package alloc is far allocation: node headers formatted through ordinary verbs, chunks
// claimed with one FAA (no memory-node CPU), per-client size classes and free lists, placement
// on a named node, symmetric allocation (one offset valid on every node, for replicas), and
// deferred free through epochs kept in far memory and shared by every compute node.
//
// # Node layout
//
// Every memory node has the same layout, from its [Header] at offset 0:
//
//	[0, 512)                    header: constants, claim, bump, symmetric bump, epoch, pool words
//	[512, 4096)                 reserved for the roots of what is built on the allocator
//	[4096, TableOff)            handover table: one word per client id (HandoverOffset)
//	[TableOff, ...)             epoch table: one announcement word per client id
//	[SymBase, SymBase+SymSize)  symmetric area, at the same offset on every node
//	[HeapBase, HeapLimit)       the heap: chunks handed out by the bump word
//
// Constants are written with plain writes, every other word only with atomics. The global
// epoch, the tables in use and the symmetric bump word are those of one home node (by default
// the lowest memory node), named in every header; with replicated metadata, those of the r
// metadata nodes from the home node on (see "Replicated metadata").
//
// [Format] is idempotent and race-free: a CAS of a hash of its options claims the node (other
// options get [ErrFormatConflict], nothing written), each atomic word is initialised by CAS
// from 0, and the magic is set last, in one ordered batch; a node whose formatter died is
// [ErrHalfFormatted] until Format finishes it. [Open] and [DecodeHeader] validate without
// writing; their errors wrap farmem.ErrInvalid.
//
// # Allocation
//
// An [Allocator] belongs to one client (one goroutine). Per node it carves a current chunk and
// keeps free lists by size class (at most 12.5% waste up to half a chunk; larger blocks are
// runs of chunks). A request takes a free block, else carves, else claims a chunk: a spare, a
// rebuilt one, one from the bump word, then from the node's pool. When nothing is left while
// blocks the client retired are still pending, it waits for them on the fabric's clock
// (backing off, scanning the epoch table at each retry, at most [Allocator.MaxReclaimWait]:
// about one Lease plus two Refresh periods); when nothing is left otherwise, or still after
// that wait, it fails wrapping farmem.ErrNoSpace. Reused blocks' contents are undefined. Options.Admit can
// refuse requests ([ErrRefused]). Free and Retire take the allocated size; a double free is not
// detected.
//
// [Allocator.AllocOn] allocates on one node. [Allocator.Alloc] reuses a free block of its own
// on any node first, then prefers node Nodes[(clientID-1) % len(Nodes)].
// [Allocator.AllocSymmetric] returns a [SymOffset], the same block on every node, from an area
// reserved at format time (FormatOptions.SymmetricSize); size it for replicated data only.
//
// # Free chunks
//
// Memory freed in one size class serves every other, and every client, through whole chunks:
// a pass (no verb, O(1) amortized per freed block) turns chunks whose bytes are all free into
// spares any class carves again, and Reclaim and Close push whole free chunks beyond one per
// node onto the node's pool, a stack linked through the chunks' first words whose head word
// carries a 24-bit tag that every push and pop's CAS increments, so a stale pop fails its CAS
// (barring a wrap during one stalled pop). A chunk is held by one allocator or by the pool; a
// push or pop whose CAS outcome is unknown leaks its chunks rather than risk holding them twice.
//
// # Deferred free
//
// A block other clients may still read is retired ([Allocator.Retire]) and reused by the
// retiring client only once every client that could have reached it has moved on. Readers
// bracket dereferences with [Allocator.Pin] and [Allocator.Unpin]. On the home node live a
// global epoch G, which only grows, and the epoch table, holding per client 0 or an
// announcement: an epoch and a lease deadline in fabric time.
//
// A pin announces (e, now+Lease), e the last G it read, and reads G in the same ordered batch
// until it reads e; G advances only when every live announcement is at least G. A block is
// retired with a tag at least G at its unlinking, and a scan reuses blocks tagged below the
// oldest live announcement, so a reader that could reach a block holds it back. A pin writes
// an announcement only when the last is older than Options.Refresh, and an Unpin finding it
// older withdraws it ([Allocator.Quiesce] at once), so a retired block becomes reusable after a
// few Refresh periods. Sooner when the retiring client's announcement is all that holds it:
// that announcement protects only the client's current section, so a scan also reuses the
// blocks the client retired outside it that are tagged below every other client's live
// announcement (for a lone writer, all of them). Allocation scans when Options.ScanInterval
// has passed, or when it needs a new chunk once 256 blocks were retired since the last scan
// (a scan per chunk at most): a lone writer then reuses a block a few hundred allocations
// after retiring it, its lines still in the CPU's caches. The blocks a scan makes reusable go
// to a magazine per size class, which allocation takes from first: free blocks, but left out of
// the per-chunk accounting of free bytes until something needs it (rebuilding chunks, a
// handover record, Absorb), so a block's way back to its retirer costs an append and a pop. A stalled reader holds reuse back for its lease ([Allocator.Renew] extends it); a crashed reader's lease
// expires and scans clear it. A reader paused past its lease gets [ErrPinExpired] from Unpin
// and must retry. Leases assume clocks and verb delivery within Options.ClockSkew. If the home
// node is down (with replicated metadata: a majority of the metadata nodes), pins and scans
// fail with farmem.ErrNodeDown; allocation goes on.
//
// # Handover
//
// Client ids are dense and reused, so [Allocator.Close] hands what it holds (chunks, free
// blocks, retired blocks with their tags) to the next allocator of its client id, as a compact
// record in blocks it holds, published with a CAS of the client's handover word (a taken word
// is chained). A record is never truncated: Close makes room or fails. [New] takes the record
// with a CAS back to 0, so two allocators of one id never both adopt, and validates its
// checksum and every block against the headers before adopting anything. A corrupt record is
// reported in Adopted().Err wrapping [ErrBadHandover] and its blocks are lost; an unreadable
// one is put back for a later New.
//
// A record need not wait for its own id: an allocation that finds no room takes over the
// records other client ids published before it waits for its own retired blocks (orphans.go:
// the CAS that clears a handover word makes each taker exclusive, and retired blocks keep
// their tags), so a process whose clients have other ids than one that closed (`farmem bench
// --process 1/2` after `0/2`, say) draws on what that one held. Not with replicated metadata:
// there a record waits for its own id.
//
// Close gives back to the nodes' pools only the chunks already whole; free blocks go into the
// record as they are (rebuilding chunks at Close would change its cost and its record). Whoever
// adopts the record, New or an allocation taking another id's, then gives back what a Reclaim
// would: it rebuilds whole chunks from the free blocks it holds and pushes those beyond one per
// node onto the pools (a round trip per such node), so a record holding much of a heap does not
// leave an allocator of another id out of room. Limit: only whole chunks are given back. Free
// blocks in chunks that still hold live blocks stay with the adopter, so after churn that left
// the heap fragmented (updates that replaced blocks all over it) a record can hold most of the
// free space in such chunks, and an allocator of another id that starts beside its adopter can
// run out while the adopter holds room (seen in about 1 of 25 runs of cmd/farmem's re-run
// scenario with 16 MiB nodes after a workload A run, before that test moved to workload C).
//
// # Replicated metadata
//
// FormatOptions.Replicas = r = 2f+1 (recorded in every header, [MetaNodes] naming the nodes)
// keeps the shared words on r memory nodes, at the offsets the home node alone uses when r =
// 1, and every operation on them reaches a majority of f+1, so allocation, epochs, handover,
// New and Format work with any f of the r nodes down, the home node included:
//
//   - symmetric allocation chooses its offset M as the smallest value a majority of the
//     nodes' symmetric bump words are at or below: it CASes those nodes from the value it
//     last saw to M+n, and owns [M, M+n) once a majority of the CASes succeeded (words only
//     grow and are CASed only from at most M, so two claims that both reached a majority met
//     on a node, where the later found the earlier's end and took an M past it). A word
//     ahead of M was raised by a claim that reached only a minority: it owns nothing and is
//     left behind rather than skipped to, so lost claims waste no space unless they split a
//     majority's votes among them. Under contention a claim retries at once from what a lost
//     round read, and pauses at random only after a split. A node's own bump word stays on
//     that node: its chunks are lost with it anyway.
//   - the global epoch is a max register of per-node copies that only grow: a pin succeeds
//     when a majority read back the epoch it announced, all of them the same; a scan advances
//     from g only when a majority read g and no live announcement older; retires and scans
//     read the largest copy of a majority, and write the largest back on nodes behind. The
//     single-node argument then holds on the node that any two majorities share.
//   - announcements go to every node's epoch table; a scan honours the oldest it reads on any
//     node of its majority.
//   - a handover word is published with CASes on every node (done once a majority
//     succeeded) and taken with CASes to 0 that must succeed on a majority, so two allocators
//     never both adopt a record.
//
// A metadata node that restarts is skipped while fenced and while its epoch word is 0;
// [Reformat] restores it from a majority of its peers (largest bump word and epoch, oldest
// live announcement per slot, handover words all peers agree on) and writes its epoch word
// last, after which it counts again. A record published on a majority some of whose nodes
// restart before a New takes it may become untakable: its blocks leak. r = 1 keeps the bytes,
// verbs and round trips of the unreplicated layout.
//
// # Costs
//
// Round trips are the constants ChunkClaimRoundTrips, PinRoundTrips, ScanRoundTrips,
// PoolPopRoundTrips, PoolPushRoundTrips, NewRoundTrips, CloseRoundTrips and those beside them;
// everything else costs no verb.
//
// # Runtime
//
// Only the client's Runtime gives time; the package starts no goroutine, holds no lock and
// shares no state between allocators, so it runs unchanged on the simulator.
//
// # Limits
//
// A crashed client, one whose Close failed, or an adopter that crashed after taking a record
// leaks what its allocator held until the nodes are formatted again. Without replicated
// metadata the home node is a single point of failure. Free blocks go only to the
// same client id (within a process, also through [Allocator.Absorb]); whole chunks go to every
// client through the pool, and a chunk is rebuilt only when one allocator holds all its blocks
// free. The symmetric area has no pool, and the bump word never moves back.
package alloc
