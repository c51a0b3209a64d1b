// Package selcc is SELCC (shared-exclusive latch cache coherence, after Wang, Wang and Aref): a
// coherent compute-side cache of far memory that never uses a memory node's CPU. Far memory is
// cut into global cache lines (GCLs); each has a 64-bit latch word that is also its sharer
// directory, so one atomic both takes the latch and updates the directory, and a failed
// attempt's returned word names whom to invalidate. A compute node keeps the global latch of a
// line it cached after its clients are done with it (lazy release): a held latch means a valid
// cached copy, in state S (shared) or M (modified). Peers that want the line send it one-way
// invalidation messages (PeerRd, PeerWr) that the holder's handler serves.
//
//	c, err := selcc.Open(ctx, fabric, selcc.Options{})   // once per fabric: every hosted node's cache
//	cl, err := c.Client(ctx, m)                          // one per client (farmem.Memory)
//	g, err := cl.Alloc(ctx, allocator)                   // a zeroed GCL through package alloc
//	gd, err := cl.Lock(ctx, g)                           // or RLock for a shared guard
//	err = gd.WriteUint64(ctx, 0, v)                      // Read/Write bytes of the line
//	err = gd.Unlock(ctx)                                 // local release only
//	err = c.Close()                                      // writes every dirty line back
//
// # Layout
//
// A GCL is LineSize+8 bytes of far memory: the latch word, then the body. The latch word's
// encoding is a [Codec], chosen by cluster size ([CodecFor]): up to 58 compute nodes the
// paper's, [Bitmap] (holder id in the top 6 bits, so a negative delta on it cannot borrow from
// the bitmap; node n's shared bit is bit n-1); up to 255 nodes [Groups] (8-bit holder, eight
// 7-bit counters, node n counting in group (n-1) mod 8; an invalidation for a group goes to
// every member, and members that hold nothing drop it). A cache frame lives in its compute
// node's shared area (alloc/nodearea): a 64-byte header whose first word is the frame's local
// shared-exclusive latch ([nodearea.Latch], awaited with Memory.Wait), then the body. Each
// client's reply flags (8 bytes per compute node the codec encodes), then its grant word (see
// Fairness), are at Options.SliceOffset of its slice.
//
// # Transitions (one atomic each)
//
//	I→M       CAS 0 → Exclusive(me), in one batch with the body's READ
//	I→S       FAA +Shared(me), with the READ; if the returned word has a holder: FAA −Shared(me)
//	S→M       CAS Shared(me) → Exclusive(me); after UpgradeTries failures, release S, then I→M
//	release   FAA −Exclusive(me) (after the dirty range's WRITE, in one ordered batch) or −Shared(me)
//	hand-over FAA Exclusive(to) − Exclusive(me)                    (PeerWr to an M holder)
//	downgrade FAA Shared(me) + Shared(to) − Exclusive(me), after the dirty WRITE (PeerRd to M)
//
// Releases are FAAs, never CASes: concurrent shared attempts leave transient counts beside an
// exclusive holder, and a CAS release expecting exactly Exclusive(me) would fail and could
// livelock. All deltas add modulo 2^64 and commute, and the engine keeps each node at most one
// share per line, so no field carries into another. The holder field is always exact: a
// hand-over's FAA completes before the line is forwarded, so the new holder cannot release
// before it lands (Options.EagerForward, the paper's order, forwards with the FAA in flight
// instead: one round trip less for the writer, a word that can lag, no Repair).
//
// # Access path (Cached)
//
// Look the line up in the node's table; take the frame's local latch (shared to read,
// exclusive to write); if the memo allows the access, use the frame: a hit costs no round
// trip. Otherwise run the acquisition under the frame's exclusive latch: one round trip if no
// peer holds a conflicting copy. On a conflict the acquirer sends one message to each holder
// the word names and waits, with Memory.Wait on its own reply flags, for every answer; the
// holder's handler try-locks the frame (local clients win: it never waits) and
//
//   - PeerWr, held M (case 1): hands over with one FAA, then writes the line into the
//     requester's frame and its reply flag in one batch (no write-back: the line is marked
//     dirty at the new holder);
//   - PeerRd, held M (case 2): writes the dirty range back and downgrades both to S in one
//     ordered batch, then forwards the line (group codec: downgrades only itself and
//     acknowledges; the reader retries at once, see Recovery);
//   - PeerWr, held S (case 3): releases its own share and acknowledges in one batch (the
//     release FAA to the memory node and the acknowledgement to the writer go out together;
//     the frame stays latched until the FAA completes); a writer all of whose targets
//     acknowledged retries at once (a retry that reaches the word before a release fails and
//     goes round again);
//   - PeerRd, held S (the line was already downgraded for another reader): answers
//     "acknowledged", and the reader retries at once (its shared FAA now succeeds);
//   - anything else, or the latch busy: answers "dropped"; the requester backs off and retries
//     (resend interval Backoff/k at its k-th retry: priority aging).
//
// Every message gets exactly one answer, and the requester waits for every answer to what it
// sent, even past its context's end (bounded by ReplyTimeout), so no requester acts on a stale
// answer and no hand-over reaches a node that stopped waiting. A holder that is down fails the
// acquisition with farmem.ErrNodeDown (see Recovery); one that does not answer within
// ReplyTimeout also does; the frame a late forward could still land in is quarantined, and the
// client's reply flags and grant word, where the late answer lands, are never reused (see
// Recovery: a late hand-over's line is written back, not dropped).
//
// # Pitfalls, decided
//
//   - A failed shared attempt's undo FAA completes (synchronously) before its PeerRd goes out:
//     the holder's downgrade adds the reader's share, which must not meet the reader's own.
//   - A frame being released (eviction, lease, a handler) stays latched exclusively and mapped
//     until its release FAA has completed; a client of the node that wants the line again waits
//     on the frame's latch and then misses, so no re-acquisition overtakes its own release.
//   - No global acquisition runs under a shared local latch: a reader that misses fetches under
//     the frame's exclusive latch, releases it and looks again (two local readers would add the
//     node's share twice).
//   - Only a node whose memo holds the line changes its latch word. Under the group codec a
//     member that holds nothing, or whose frame is latched (being released), drops the message
//     and never decrements a count it did not add.
//   - A handler never waits: it try-locks, so it cannot block behind local critical sections,
//     and the memo it checks is the one its latch protects.
//
// # Eviction
//
// Eviction releases up to EvictBatch least-recently-used frames it can latch at once (frames
// held by guards are pinned) in one batch, whatever memory nodes they live on: one round trip
// for the batch, each dirty range written back before its release FAA. As in the paper
// (§5.2), a background evictor keeps the free list filled: when a client takes a frame and
// leaves fewer than L = min(2·EvictBatch, Frames/8) free, the node starts its evictor (at most
// one at a time, on the node's own client, in a goroutine from Runtime.Go), which evicts
// batches until L frames are free and ends (a cache of fewer than 8 frames has none); a miss then finds a free frame and pays nothing for
// eviction. A miss that finds no free frame (the evictor fell behind, or with EvictBatch 1,
// the ablation's "no batching") evicts a batch itself, on its critical path. Dirty bounds are kept per
// frame (the union of the ranges written since the line was fetched); only that range is
// written back.
//
// # Fairness
//
// When a handler drops an invalidation because local clients hold the frame, the frame's lease
// counters start: each local acquisition that has to wait for the frame's latch adds 1 for a
// reader and Threads for a writer (R_c/P + W_c in units of 1/P). Past Gamma·Threads the
// releasing client gives the line up and keeps its node's clients off it for 2·Backoff. An
// acquisition without waiting turns the counters off.
//
// Priority aging: a message's priority is its sender's retry count, and a sender's k-th retry
// waits Backoff/k. A holder remembers the highest-priority writer whose PeerWr it dropped; when
// its lease runs out it hands the line to that writer (the decentralized arbiter of §5.3.2)
// instead of releasing it. That writer already had its "dropped" answer, so the hand-over goes
// through the writer's grant word, open only while the writer's acquisition runs: the holder
// claims it with a CAS (which fails if the writer has finished), hands over with one FAA and
// forwards the line with the word's final state in one batch; a writer whose acquisition ends
// closes the word with a CAS and, if it finds it claimed, waits for the line. So a hand-over
// never reaches a writer that stopped waiting.
//
// Writers starved by readers: a writer starves once its retry count reaches StarvationTries
// (default 20: the paper's artifact, storage/rdma.cc, raises a writer's starvation level
// above 0 only from 20 retries, and the paper applies both remedies to "high-priority"
// messages of starved writers only). A reader node that drops a
// starving writer's PeerWr (priority p) because its readers hold the frame gives its share up
// at the next local shared release, and a node that gives a share to such a writer keeps its
// own readers off the line for p·WriterHoldoff (spin waiting; p capped at 64). Priority
// matching: a writer that starved, needing k retries to get a line M, drops PeerRds of
// priority below k, so it is not robbed at once. A writer that merely found sharers and
// retried once or twice gets neither: treating every contended write as starving made each
// write to a hot line refuse the readers after it (measured under zipf 0.99 with 5% writes:
// four of five PeerRds dropped, each costing the reader a message round and a backoff).
//
// Measured on sim (ConnectX6 model, 4 nodes × 4 clients, one hot line, seed 1, after
// StarvationTries became 20; the figures before it, over seeds 1-5, were of the same order):
// writers only, 4 ms, γ = 256 gives a Jain index of 0.995 over the nodes' throughputs and
// γ = ∞ 0.25 (one node keeps the line) with about 9% more operations; one writing node among
// three reading nodes, 1 ms, completes 307 operations (a reading node about 2,800-3,000) with
// spin waiting and priority matching, 4 without; a single writing client completes 636 with
// priority matching, 122 without.
//
// # Durability
//
// This is a write-back cache. In WriteBack mode (the default, the paper's) a dirty line
// reaches far memory only when it is evicted, downgraded for a reader, given up by the lease,
// or when the Cluster closes; an exclusive hand-over forwards it without writing it back, so
// the newest copy can live on one compute node only, and dies with it (a requester that gave up
// on a late holder still gets that copy, and writes it back: see Recovery). WriteBackOnRelease also
// writes the dirty range back when an exclusive guard is released (one more round trip per
// writing guard), so far memory holds every released write. The B-link tree over SELCC and
// the store (kvstore's SELCC index kind) take WriteBackOnRelease: far memory is their only
// copy, and a store's acknowledged write must survive the compute node that made it (its
// replication copies far memory, not caches). WriteBack is for data that can be rebuilt (a
// cache of something kept elsewhere) or for experiments reproducing the paper.
//
// # Recovery
//
// A compute node that dies holding latches keeps them until a repair scan: [Client.Repair]
// removes the dead node's exclusive hold and (bitmap codec) shared bit from each listed line,
// one FAA each, while the cluster runs (the FAAs commute with everyone's transitions). Under
// the group codec a count does not say who holds it: for a line whose count in the dead node's
// group is not zero, Repair first fences the line on the group's live members (a census: each
// gives its own share up under its frame's latch and adds none while the fence stands, at most
// ReplyTimeout), so the count it then reads is the dead node's alone, and removes that. Both
// are exact: never below the real sharers, and a node that holds nothing never decrements.
// [Cluster.Recount] remains the check of a quiesced cluster hosted in one process. Only a
// node that is really gone may be repaired; its dirty lines are lost (see Durability). Until
// then a survivor's acquisition that meets the dead node's hold fails with farmem.ErrNodeDown
// (at once if the fabric knows the node is down, after ReplyTimeout if it is silent); after
// the repair it succeeds.
//
// Online, one line at a time: an acquisition that finds in the word a holder the fabric
// reports down (its invalidation cannot be sent: Memory.Send fails at once with
// farmem.ErrNodeDown) fails with a [HolderDownError] naming the holder and the line; so does a
// requester whose holder took the message and then died (while it waits for an answer it asks,
// every down timeout, whether the fabric now reports the holder down: one message of no
// effect). The caller may then remove the dead node's holds from that line with
// [Client.RepairLine] (one READ and one CAS; survivors repairing one line at once remove each
// hold once, since a CAS removes a hold only while the word still shows it) and retry; package
// ds/blink does, after the fabric's down timeout since it first saw the node down (every verb
// the dead node posted has then landed or never will). RepairLine needs the bitmap codec and
// no EagerForward. It trusts the caller's judgement that the node is gone for good: a node
// that is only slow or cut off is never reported this way, its invalidations time out after
// ReplyTimeout, and a node reported down that came back would find its holds removed under it.
//
// A client that loses its access while its compute node lives (the fabric cut that client
// alone off: the simulator's CrashClient, a queue pair in error) fails with
// farmem.ErrNodeDown on its own region; it then hands what it held to its node through a client
// it opens there (the frames whose latch word names it as exclusive holder, settled from their
// lines' words as an eviction would and forgotten, quarantined if a peer's forward may still
// land in them; its shared latches, which it counts; the line whose access failed, settled as
// an orphan at once), and every later access of it fails with [ErrClientDown] (it never serves
// from the cache again). A client that is only paused keeps its latches: its node's clients
// wait for them and peers' invalidations are dropped and resent, as for any local holder,
// until it runs again.
//
// A crash also leaves holds on the survivors' side, which Repair cannot see; the engine
// settles them itself:
//
//   - A survivor's acquisition that fails keeps nothing it got: an upgrade that failed on a
//     dead sharer releases the share its frame still had (rather than forgetting it with the
//     frame), and a fetch whose local copy failed releases the latch it took.
//   - A survivor whose message went unanswered (the peer died, or stayed silent past
//     ReplyTimeout) may still have been given the line: the dead holder's hand-over FAA (or
//     downgrade, or claimed grant) may have landed before its forward was lost. The word then
//     names a node that has no frame for the line, and every invalidation to it would be
//     dropped forever. The survivor records such an orphan, and its node settles it under the
//     frame's exclusive latch before its next attempt on the line: released with one FAA if it
//     landed (the holder field, and the bitmap's bit, say exactly whether it did), kept while its
//     source still holds the line or, alive, has not answered (it may still land), forgotten
//     otherwise. A shared attempt waits for a shared orphan's answer while its source holds
//     the line (the node's bit would be added twice), and fails with farmem.ErrNodeDown if it
//     does not come within ReplyTimeout.
//   - A peer that was only late (alive, answering after ReplyTimeout) still hands its line
//     over into the quarantined frame, dirty under WriteBack and possibly the only copy of
//     acknowledged writes; it is not dropped. The requester retires the reply flags and grant
//     word it stopped waiting on (it takes a fresh block from its node's shared area), so the
//     late answer's status stays readable there, and the orphan records it with the frame. A
//     landed exclusive orphan whose answer carries the line is released in one ordered batch
//     that first writes the line back (if it came dirty); one whose line has not come yet
//     (the holder forwards after its FAA) is waited for, ReplyTimeout at most per attempt, and
//     released without it only if its source is reported down (a grant names its claimer in
//     the grant word; one that could not be read counts as down 8 ReplyTimeouts after the
//     hold was found landed): a live source's line comes however late. A quarantined frame is
//     used again once every answer that could write into it has come and its line was
//     settled; Cluster.Close settles the orphans left. Costs fall on the timeout path only: a
//     READ of each recorded answer word and of the line's word per attempt on an orphaned
//     line, one message to ask whether a silent source is down, the write-back with the
//     release.
//   - A node's handler asked about a line it has no frame for settles its orphans on the line
//     there and then, without waiting (in a free frame it maps for the purpose, or a
//     quarantined one it can reclaim, if one is unlatched), so peers do not wait for a client
//     of the node to want the line. Under the group codec a holder answers a PeerRd by
//     downgrading only itself (the reader then adds its own count, one more round trip than
//     the bitmap's case 2), so no share is ever granted that the reader could not account for.
//
// # SEL mode
//
// Options.Mode = SEL is the paper's baseline on the same latch words: each access takes the
// global latch and reads the line in one round trip and releases it (writing the dirty range
// back) in another: 2 round trips per access. As in the paper's SEL (and its artifact), every
// client takes the global latch itself, with no local latch: a reader adds one to a count in
// the word's low bits (not its node's bitmap bit), a writer swaps 0 for its exclusive field,
// and a failed attempt (a reader's undone with one more FAA) is retried at once, with no
// backoff and no message. Under a hot line's readers a writer can therefore wait long (the
// count seldom drops to 0), as the paper's SEL writer does. Cached and SEL clusters must not
// share lines.
//
// # Costs (round trips on the caller's critical path)
//
//	hit (memo allows the access)                   0
//	miss, no conflicting holder                    1 (latch atomic + body READ in one batch)
//	miss, cache full, evictor behind               +1 for the eviction batch
//	upgrade S→M, no other sharer                   1
//	case 1 (writer vs M)                           requester 1 and a message; holder 2 (FAA,
//	                                               then the forward): 3 in all, as an RPC directory;
//	                                               EagerForward: holder 1 (both at once)
//	case 2 (reader vs M)                           requester 2 (attempt, undo) and a message;
//	                                               holder 2 (write-back+downgrade, forward): 4;
//	                                               group codec: holder 1, requester +1 (retry)
//	case 3 (writer vs S)                           requester 1, messages, each sharer's FAA
//	                                               with its acknowledgement (one batch), then
//	                                               the retried CAS+READ at once
//	release                                        0 (WriteBackOnRelease: +1 if dirty)
//	SEL access                                     2
//	RepairLine (a dead node's holds on one line)   2 (READ, CAS; more if the word moves)
//	settling a hand-over answered late             2 (READ of the word; the line's write-back
//	                                               and the release FAA in one batch), at the
//	                                               node's next attempt on the line; a message
//	                                               per attempt to ask whether an orphan's
//	                                               silent source is down
//
// Local verbs (latches, frame bodies, reply flags) are to the caller's own region: no round
// trip, priced by sim at DRAM cost.
//
// # Limits
//
// Lines are not freed (a freed line's latch word would be plain-written by the allocator's
// free list). At most 255 compute nodes. A peer that stays silent past ReplyTimeout costs the
// requester's node a frame (quarantined until every late answer into it has come) and a reply
// block (8 bytes per compute node the codec encodes, plus 8, of its shared area, never freed);
// a hold it handed over late is settled as an orphan (see Recovery) with its forwarded line
// written back. A late line is still dropped (under WriteBack, a write only that peer had is
// lost as if it had died) when its sender is reported down before it comes, when the
// requester's node has no room left in its shared area for a fresh reply block, and when the
// requester was a client that lost its access (its frames are settled without knowing where a
// late answer lands). A requester waits for a live sender's line however long it takes: its
// acquisitions of that line fail with farmem.ErrNodeDown meanwhile, and each that sent an
// invalidation and gave up costs a quarantined frame (a long stall can exhaust the cache:
// farmem.ErrNoSpace until the late answers come). Consistency is sequential for data-race-free
// use: every access inside a guard.
//
// # Runtime
//
// Time, randomness and sleeps come from the clients' farmem.Runtime; the package starts no
// goroutine and holds no Go lock across a verb or a Wait (a node's table is behind a mutex for
// map operations only), so it runs unchanged on the simulator.
package selcc
