// Package alloc is far allocation: node headers formatted through ordinary verbs, chunks
// claimed with one FAA (no memory-node CPU), per-client size classes and free lists, placement
// on a named node, symmetric allocation (one offset valid on every node, for replicas), and
// deferred free through epochs kept in far memory and shared by every compute node.
//
// # Node layout
//
// Every memory node is laid out the same way, from its header at offset 0 (see [Header]):
//
//	[0, 512)                         header: magic, claim, constants, bump, symmetric bump, epoch,
//	                                 free-chunk pool head and count
//	[512, 4096)                      reserved for the roots of what is built on the allocator
//	                                 (kvstore's root word is at 2048 of the home node); this
//	                                 package never writes it nor hands it out
//	[4096, T)                        handover table: one word per client id (HandoverOffset;
//	                                 T = 4096+8*(MaxClients+1) is Header.TableOff)
//	[T, T+8*(MaxClients+1))          epoch table: one announcement word per client id
//	[SymBase, SymBase+SymSize)       symmetric area (SymBase: the tables' end rounded to a chunk)
//	[HeapBase, HeapLimit)            the heap: chunks handed out by the bump word
//
// The constants are written with plain writes; the magic, claim, bump, symmetric-bump and epoch
// words, and the tables' words, only with atomics (as the contract requires of atomic words).
// The tables and the symmetric area are reserved on every node, so the symmetric area starts at
// the same offset everywhere whatever the node sizes; the global epoch, the tables in use and
// the symmetric bump word are those of one designated home node (by default the lowest memory
// node), which every header names. The handover table comes first so that its offset does not
// depend on the header. Layout version 3 added the free-chunk pool's two words to every header
// (see "Free chunks"); version 2 (no pool words) and version 1 (no handover table) are refused
// with [ErrVersion].
//
// [Format] writes a header through a client's verbs. It is idempotent and race-free: a
// formatter reads the header, refuses a node holding anything else, claims the node with a CAS
// of a hash of every constant (formatters with the same options share the claim; one with other
// options gets [ErrFormatConflict] having written nothing), writes the constants (identical
// bytes whoever writes them), initialises each atomic word with CAS from 0 (a late formatter
// cannot reset a bump word in use) and sets the magic word last, with a CAS, all in one batch
// applied in order. A formatter that dies after claiming leaves a node [Open] reports as
// [ErrHalfFormatted], which Format with the same options finishes. [Open] and [DecodeHeader]
// validate without writing: a zero header is [ErrNotFormatted]; wrong magic, checksum,
// reserved bytes, node id or inconsistent fields [ErrBadHeader]; another layout version
// [ErrVersion]; a header for another size [ErrSizeMismatch]. All of these wrap
// farmem.ErrInvalid. DecodeHeader is a pure function of the bytes, fuzzed by FuzzHeader.
//
// # Allocation
//
// An [Allocator] belongs to one client, like its farmem.Memory: one goroutine's. It keeps, per
// node, a current chunk that it carves and free lists by size class; nothing of it is shared
// but the bump words. Size classes are the multiples of 16 up to 256, then eight per doubling
// (at most 12.5% waste) up to half the chunk size; larger blocks are runs of whole chunks,
// claimed with one FAA of their length. A request of size bytes and alignment align (a power of
// two up to 64; every block is at least 16-aligned) takes a free block of its class whose
// address has that alignment, else carves the current chunk (padding goes to the free lists),
// else claims a new chunk (see "Free chunks" for where it comes from): a spare chunk, a chunk
// rebuilt from free blocks, else one FAA of ChunkSize on the node's bump word, whose result is
// the chunk. A chunk's unused tail goes to the free lists. When the bump word passes the heap's
// end, chunks that still fit are kept (nothing is lost) and later claims on that node look in
// the node's pool of free chunks instead (one Read when it is empty); a claim nothing satisfies
// fails with an error wrapping farmem.ErrNoSpace. Block contents are undefined: blocks never
// used before are zero, others hold old data, and the allocator calls a strict-mode transport's ForgetAtomic on
// reused memory (a recycled block, a rebuilt or pooled chunk) before handing it out.
// Options.Admit, if set, can refuse any request ([ErrRefused], wrapping farmem.ErrNoSpace):
// a caller's quota, or failures injected to test how a structure copes with running out. [Allocator.Free] and
// [Allocator.Retire] take the size the block was allocated with; freeing a block twice is not
// detected.
//
// Placement: [Allocator.AllocOn] allocates on the named node only. [Allocator.Alloc] prefers
// node Nodes[(clientID-1) % len(Nodes)], so clients spread over the nodes while each keeps its
// chunks together, and tries the other nodes in order when that one is exhausted; but it first
// reuses a free block of its own on any node (preferred first), so a client that frees blocks
// on other nodes (retiring what its peers wrote) does not make memory grow.
//
// Symmetric allocation: [Allocator.AllocSymmetric] returns a [SymOffset] from the symmetric
// area, the same block on every memory node ([SymOffset.On] gives its address on one). Its
// chunks come from one FAA on the home node's symmetric bump word and are carved like any
// others. The area is reserved on every node at format time and disjoint from every heap, so no
// regular allocation on any node ever returns an offset a symmetric one has. A symmetric block
// exists on every node, used or not, so size the area (FormatOptions.SymmetricSize, default an
// eighth of the smallest node) for the replicated data only.
//
// # Free chunks
//
// Memory freed in one size class serves every other, and every client, through whole chunks:
//
//   - Rebuilding. Each arena counts, per chunk, the bytes of that chunk in its free lists. A pass
//     (no verb; time linear in the free blocks held) takes every chunk whose bytes are all free
//     (in the lists, or in the lists and the uncarved rest of the current chunk) out of the
//     lists and makes it a spare chunk, which any class carves again. A pass runs when the arena
//     needs a chunk and has no spare, and in Reclaim, if at least a chunk's worth of bytes, and
//     half of what the lists hold, was freed since the last one (so passes cost O(1) amortized
//     per freed block); and always when the node is exhausted, which also breaks free runs of
//     chunks into single chunks.
//   - The pool. Each node's header holds a pool of free chunks, a stack linked through the
//     chunks' first words: the head word (offset 384) is a 24-bit tag and the index+1 of the top
//     chunk, each pooled chunk's first word the index+1 of the next one, and a count word
//     (offset 448) the number of chunks pooled. [Allocator.Reclaim] pushes the whole free chunks
//     it holds beyond one per node onto the pool after its scan and pass, and [Allocator.Close]
//     does the same (without a pass) before handing the rest over. A claim on a node whose bump
//     word is exhausted pops from that node's pool. Every push and pop moves the head word with
//     a CAS that increments the tag.
//
// Why the stack is safe. A pop reads the head h, then the top chunk's link, then CASes h to the
// link (with the tag incremented). If the CAS succeeds the head held h throughout, and since
// every push and every pop changes the tag, no push or pop happened in between: the chunk was
// on top all along and its link, written before the push that put it there and never written
// while pooled, was the one read. A stale pop (the chunk popped meanwhile and reused, its first
// word now data) reads garbage and fails its CAS. The tag wraps after 2^24 operations, so a
// client would have to stall between its read and its CAS while exactly a multiple of 16.7
// million pushes and pops happened, and then find the same chunk on top (the ABA the tag
// rules out otherwise). Pushes write all links and CAS the head in one batch on the node,
// applied in order, so the links land before the chunks are published.
//
// Coherence. A block reaches a free list only when it is free to reuse (Free, or Retire and
// the epoch horizon passing it), so a rebuilt chunk holds nothing any client can still reach,
// and deferred free is unchanged. A chunk is held by exactly one party: one allocator (lists,
// spare, current chunk, then its handover record) or the pool; a push takes the chunks out of
// the allocator before its CAS, and a push or pop whose CAS has an unknown outcome (the node
// failed under it) gives its chunks up: they leak rather than risk being held twice. The count
// word is moved with an unsignaled FAA after each successful CAS, so it is exact when no push
// or pop is in flight.
//
// # Deferred free
//
// A block that other clients may still be reading is retired ([Allocator.Retire]) and reused,
// by the retiring client, only once every client that could have reached it has moved on.
// Readers bracket operations that dereference shared blocks with [Allocator.Pin] and
// [Allocator.Unpin]. The state is in far memory, on the home node, shared by every compute node:
//
//   - the global epoch G, a word that only grows;
//   - the epoch table: client id's slot holds 0 (no announcement) or an announcement: an epoch
//     (low 32 bits) and the deadline of a lease in fabric time (32 bits of 2^20 ns units).
//
// A pin announces: it swaps the client's slot to (e, now+Lease), e being the last value of G it
// read, and reads G in the same batch; the announcement landed before the read (same batch,
// same node, in order). It repeats until the read returns e. G advances from g to g+1 (a CAS,
// by any client scanning the table) only when every live announcement is at least g, so once a
// client's announcement e is in place G cannot exceed e+1 while it stands. A block is retired
// with a tag t at least the value of G when it was unlinked: e+1 if the retiring client's
// announcement is live, else a fresh read of G. A client that can reach the block announced, before
// reaching it, an epoch at most G at the unlinking, so at most t, and its announcement stands
// while it can reach the block. A scan reads G and then the table (one batch) and makes reusable
// every block tagged below the oldest live announcement.
//
// Announcements are amortized: a pin writes one only when the client's last one is older than
// Options.Refresh; otherwise Pin and Unpin are local. An Unpin that finds the announcement older
// than Refresh withdraws it with one unsignaled atomic, so idle clients stop holding reuse back
// ([Allocator.Quiesce] withdraws it at once). Between, an announcement stays in place across
// pins, which only holds reuse back longer; a block retired now is reusable after about two
// epoch advances, each needing every live client to have refreshed, so after a few Refresh
// periods.
//
// Leases: a live announcement is one whose deadline has not passed. A stalled reader (paused but
// alive, pinned) holds reuse back for as long as its lease runs; [Allocator.Renew] extends it for
// long sections. A crashed reader's announcement expires with its lease; scans then ignore it
// and clear it with a CAS, and reuse resumes. A reader paused past its lease is treated as
// crashed: its Unpin returns [ErrPinExpired] and the operation must be retried, since what it
// read may have been reused. Leases assume fabric clocks within Options.ClockSkew of each
// other and a verb landing within ClockSkew of being posted: a client trusts its lease until
// ClockSkew before the deadline, scanners take it as expired only ClockSkew after it, and a
// scan judges expiry by a time taken before it read the table.
//
// If the home node is down, pins and scans fail with farmem.ErrNodeDown; allocation from the
// free lists and other nodes goes on.
//
// # Handover
//
// Client ids are dense and reused: a process that gets client id k is k's successor. So that
// nothing a cleanly closed allocator held is lost, [Allocator.Close] hands it over to the next
// allocator of its client id:
//
//   - It writes a handover record of what it holds: per arena (each node's heap, the symmetric
//     area) the current chunk's carve range, spare chunks, free runs of chunks and free blocks by
//     size class, consecutive blocks coalesced into runs; and its retired blocks with their epoch
//     tags. Blocks it relays for another allocator (below) are in it too. The body is uvarints,
//     offsets as deltas; a prefix carries a magic word, the client id, the body's length, a
//     checksum and up to 12 segment descriptors.
//   - The record is stored in blocks the allocator holds, which the record lists as free ranges
//     (so they are not lost, and are not also handed over as blocks): the smallest that holds it
//     in one read, else several (the head and up to 12 segments), else, when it holds no block
//     of at least 256 bytes (or the record would need more segments), a run of chunks claimed for
//     it with one FAA. If the heaps are exhausted, Close first makes room from what it holds: it
//     withdraws its announcement, scans the epoch table (retired blocks no other client holds
//     back become free), rebuilds whole chunks from its free blocks, and takes chunks from the
//     pools, one per segment at most. A record is never truncated: every block is in it, or Close fails. Of the
//     current chunk's tail only its end is used, so the successor goes on carving the rest.
//   - In the same batch as the record's Writes, it withdraws its announcement and publishes the
//     record with a CAS of its handover word (home node, HandoverOffset+8*id) from 0 to the
//     head's address, whose low 4 bits give the head's read length (256<<k bytes). If the word
//     is taken (another allocator of the same id closed and nobody adopted its record yet), the
//     record chains to it: Close writes the old word into its record's next field, then CASes.
//
// [New] reads the client's handover word in the batch that reads the headers (on the lowest of
// Options.Nodes, home by default). If it is set, New takes the record with a CAS of the word back
// to 0, in the batch that reads the head, so two allocators with the same id never both adopt:
// the one whose CAS fails adopts nothing. It then reads the other segments (one batch), checks
// the checksum and the client id, and validates every block against the headers it read: inside
// its arena's heap and below the bump word (nothing beyond was ever claimed), aligned as the
// arena hands such blocks out, of a known class, and overlapping no other block of the record
// or of an earlier one in the chain. Only then does it adopt: free blocks to the free lists,
// carve ranges as current chunks, the record's own blocks freed, and retired blocks to its
// retired list with their tags, so a retired block is still reused only once every client has
// left its epoch. Blocks on nodes outside Options.Nodes are kept unused and relayed in the next
// record. [Allocator.Adopted] reports what was adopted.
//
// A record that is corrupt (magic, lengths, checksum, client id, or a block that fails
// validation) or a word naming no memory does not fail New: New succeeds, adopts nothing of
// that record (nor of the records chained after it), reports the error, wrapping
// [ErrBadHandover], in Adopted().Err, and the word stays cleared; the record's blocks are lost.
// If a record cannot be read (its node is down), New puts the word back for a later New and
// reports the error. Decoders are pure functions of the bytes, fuzzed by FuzzHandover.
//
// Crash points. An adopter that crashes after its CAS took the word loses the record's blocks,
// as a client loses whatever it held when it crashes; one that crashes before leaves the word
// set for the next New. A closing allocator that crashes before its batch lands publishes
// nothing; the record's Writes and the CAS are on different nodes when the record is not on the
// home node, so a New of the same client id racing the Close (two live allocators of one id)
// may find it incomplete: the checksum catches it and it is reported as corrupt. A successor
// cannot race the Close: it gets the id only after the closing client closed its Memory.
//
// # Costs
//
// In verbs and round trips (rtt), as asserted by the tests with farmem.Stats deltas:
//
//	Alloc (small, from a free list or the current chunk)  0
//	Alloc (small, new chunk)              1 FAA, 1 rtt: amortized 1/(ChunkSize/class) per Alloc,
//	                                      e.g. 1/1024 FAA for 64-byte blocks in 64 KiB chunks
//	Alloc (larger than ChunkSize/2)       1 FAA, 1 rtt (0 when a freed run of that length exists)
//	AllocSymmetric                        as Alloc, the FAA on the home node
//	Free, FreeSymmetric                   0
//	Pin, Unpin (announcement younger than Refresh)  0
//	Pin (older)                           1 rtt: a MaskedCAS swap and a Read (2 verbs), rarely twice
//	Unpin (announcement older than Refresh)  1 unsignaled MaskedCAS, 0 rtt
//	Retire (announcement live)            0; otherwise 1 Read, 1 rtt
//	Reclaim (scan)                        1 rtt: 2 Reads (8 bytes + 8 per table slot), then
//	                                      unsignaled CASes (epoch advance, expired slots)
//	New, nothing to adopt                 1 rtt: a Read per node's header and the handover
//	                                      word (2 rtt if home is not the lowest of the nodes)
//	New, adopting a record in one block   2 rtt: then the CAS taking the word and the head's
//	                                      Read (nodes+3 verbs in all)
//	New, record in 1+s segments           3 rtt: then s Reads in one batch (nodes+3+s verbs);
//	                                      +1 or 2 rtt per chained record
//	Close, holding nothing                1 rtt: 1 MaskedCAS (withdraws the announcement)
//	Close, handing over                   1 rtt: 1 Write per segment (1 in the common case), the
//	                                      MaskedCAS and the CAS publishing the record, in one
//	                                      batch; +1 rtt (1 FAA) if no held block can store the
//	                                      record; +2 rtt per retry if the word was taken (chain)
//	Format                                3 rtt (read, claim, one batch); 1 Read if already done
//	Alloc, node exhausted, pool empty     1 rtt (a Read of the pool's head word)
//	Alloc, chunk from the pool            3 rtt: Read head, Read link, CAS (+2 per lost CAS),
//	                                      and an unsignaled FAA of the count; +1 (the FAA that
//	                                      found the heap's end) the first time
//	Reclaim, giving chunks back           +2 rtt per node with chunks to give: Read head, then
//	                                      one batch of a Write per chunk and the CAS (+1 per lost
//	                                      CAS); an unsignaled FAA of the count
//	Close, with whole free chunks         +2 rtt per node, as Reclaim's push
//
// A record costs about 2 bytes per isolated free block, a few per run of consecutive ones, and
// 5 to 8 per retired block: 3000 allocations, half freed and a quarter retired, make a 9.5 KB
// record, read in one 16 KiB Read; 4096 contiguous freed blocks make a record of a few bytes.
//
// An Alloc that would claim a chunk while retired blocks are pending first scans the table, at
// most every Options.ScanInterval (and always when the node is exhausted). These costs are
// asserted with Stats deltas, the pool's in its own tests.
//
// # Runtime
//
// The package uses only the client's Runtime for time (leases and intervals), starts no
// goroutine, holds no lock, and keeps no state shared between allocators, so it runs unchanged
// on the simulator.
//
// # Limits
//
// A crashed client (no Close) still leaks what its allocator held: its current chunks' tails,
// its free blocks and chunks, and its retired blocks stay unused until the nodes are formatted
// again; so does a client whose Close failed (home node down, or no room left for a record
// when it held no block of 256 bytes and no chunk could be claimed, rebuilt or taken from a
// pool), and an adopter that crashed
// after taking a record. Only its announcement is recovered (the lease expires). What a closed
// client held waits, handed over, until a client with its id opens an allocator; with dense,
// reused ids that is the next process on its slot. Free blocks are handed only to the same client
// id; whole free chunks go to every client through the pool. A chunk is rebuilt only when one
// allocator holds all of its blocks free: blocks of one chunk freed by different clients (a
// client retiring what a peer wrote) stay in those clients' free lists, serving their own
// classes, until one client holds them all; a process with several clients gathers them with
// [Allocator.Absorb] (no verb), and clients of different processes do not share free blocks. The symmetric area has no pool, and runs of
// several chunks come only from the bump word (freed runs serve their own length, or are
// broken into single chunks once the node is exhausted). A chunk never returns below the bump
// word: the pool is where freed chunks live.
package alloc
