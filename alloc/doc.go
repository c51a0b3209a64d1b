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
// the lowest memory node), named in every header. Other layout versions are refused with
// [ErrVersion].
//
// [Format] is idempotent and race-free: it claims the node with a CAS of a hash of its options
// (a formatter with other options gets [ErrFormatConflict] having written nothing), writes the
// constants, initialises each atomic word by CAS from 0 (a late formatter cannot reset a bump
// word in use) and sets the magic last, in one ordered batch. A node whose formatter died is
// [ErrHalfFormatted] until Format finishes it. [Open] and [DecodeHeader] validate without
// writing ([ErrNotFormatted], [ErrBadHeader], [ErrVersion], [ErrSizeMismatch], all wrapping
// farmem.ErrInvalid); decoders are pure functions of the bytes and are fuzzed.
//
// # Allocation
//
// An [Allocator] belongs to one client (one goroutine). Per node it carves a current chunk and
// keeps free lists by size class: multiples of 16 up to 256, then eight per doubling (at most
// 12.5% waste) up to half a chunk; larger blocks are runs of whole chunks. A request takes a
// free block of its class, else carves the current chunk, else claims a chunk: a spare, one
// rebuilt from free blocks, one from the node's bump word, and once the heap is exhausted one
// from the node's pool; when nothing is left it fails wrapping farmem.ErrNoSpace. Contents of
// reused blocks are undefined (ForgetAtomic is called on them for strict-mode transports).
// Options.Admit can refuse requests ([ErrRefused]). Free and Retire take the allocated size;
// a double free is not detected.
//
// [Allocator.AllocOn] allocates on the named node only. [Allocator.Alloc] first reuses a free
// block of its own on any node, then prefers node Nodes[(clientID-1) % len(Nodes)] and tries
// the others in order. [Allocator.AllocSymmetric] returns a [SymOffset], the same block on
// every node, from an area reserved at format time (FormatOptions.SymmetricSize), disjoint from
// every heap; size it for replicated data only.
//
// # Free chunks
//
// Memory freed in one size class serves every other, and every client, through whole chunks.
// An arena counts each chunk's free bytes; a pass (no verb, O(1) amortized per freed block)
// turns chunks whose bytes are all free into spares any class carves again. Each node's header
// holds a pool of free chunks: a stack linked through the chunks' first words, its head word a
// 24-bit tag and the top chunk's index, moved only by CAS that increments the tag. Reclaim and
// Close push whole free chunks beyond one per node; claims on an exhausted node pop.
//
// A pop that wins its CAS saw no push or pop in between (each changes the tag), so the link it
// read was the top chunk's; a stale pop reads garbage and fails its CAS, barring a tag wrap
// (2^24 operations) during one stalled pop. Pushes write the links and CAS the head in one
// ordered batch. A chunk is held by exactly one allocator or by the pool; a push or pop whose
// CAS outcome is unknown leaks its chunks rather than risk holding them twice.
//
// # Deferred free
//
// A block other clients may still read is retired ([Allocator.Retire]) and reused by the
// retiring client only once every client that could have reached it has moved on. Readers
// bracket dereferences with [Allocator.Pin] and [Allocator.Unpin]. On the home node live a
// global epoch G, which only grows, and the epoch table, holding per client 0 or an
// announcement: an epoch and a lease deadline in fabric time.
//
// A pin swaps its announcement to (e, now+Lease), e the last G it read, and reads G in the same
// ordered batch, until the read returns e. G advances (a CAS by any scanner) only when every
// live announcement is at least G, so while e stands G is at most e+1. A block is retired with a
// tag at least G at its unlinking, and a scan reuses blocks tagged below the oldest live
// announcement, so a reader that could reach a block holds it back.
//
// Announcements are amortized: a pin writes one only when the last is older than
// Options.Refresh, and an Unpin finding it older withdraws it unsignaled ([Allocator.Quiesce]
// at once), so a retired block becomes reusable after a few Refresh periods. A stalled reader
// holds reuse back for its lease ([Allocator.Renew] extends it); a crashed reader's lease
// expires and scans clear it. A reader paused past its lease gets [ErrPinExpired] from Unpin
// and must retry. Leases assume clocks and verb delivery within Options.ClockSkew. If the home
// node is down, pins and scans fail with farmem.ErrNodeDown; allocation goes on.
//
// # Handover
//
// Client ids are dense and reused, so [Allocator.Close] hands what it holds to the next
// allocator of its client id: current chunks' ranges, spare chunks, free runs and blocks, and
// retired blocks with their epoch tags, encoded compactly (about 2 bytes per isolated free
// block, 5 to 8 per retired block) into blocks it holds, or a chunk run claimed for it. One
// batch writes the record, withdraws the announcement and publishes it with a CAS of the
// client's handover word; a taken word is chained. A record is never truncated: Close makes
// room (scan, rebuild, pool) or fails.
//
// [New] takes the record with a CAS of the word back to 0, so two allocators of one id never
// both adopt, then checks its checksum and validates every block against the headers (inside
// the heap, below the bump word, aligned, of a known class, overlapping nothing) before
// adopting anything; retired blocks keep their tags. A corrupt record is reported in
// Adopted().Err wrapping [ErrBadHandover] and its blocks are lost; an unreadable one is put
// back for a later New. [Allocator.Adopted] reports what was adopted.
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
// leaks what its allocator held until the nodes are formatted again; only its announcement is
// recovered. A closed client's holdings wait for the next allocator of its id. Free blocks go
// only to the same client id (or, within a process, through [Allocator.Absorb]); whole chunks
// go to every client through the pool, and a chunk is rebuilt only when one allocator holds all
// its blocks free. The symmetric area has no pool; runs of several chunks come only from the
// bump word, which never moves back.
package alloc
