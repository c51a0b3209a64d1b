// Package swarm is Safe-Guess (§3 and Appendices B and C of "SWARM: Replicating Shared
// Disaggregated-Memory Data in No Time"): a wait-free, linearizable multi-writer register
// replicated on 2f+1 memory nodes, whose reads and writes take one round trip in the common
// case (no failure, no contention, clocks roughly in sync), with one-sided verbs only. It runs
// over ds/maxreg's Replicated, the reliable max register over In-n-Out registers (SWARM).
// Wait-freedom holds as the paper's does, plus the synchrony the buffer recycling assumes
// (maxreg's "Buffers and their recycling"): a client that stalls past Params.Lease in the
// middle of a read starts that read over, so without that synchrony reads are lock-free;
// safety never depends on it.
//
//	addrs, err := swarm.Create(ctx, m, a, nodes, maxreg.Params{}) // once: 2f+1 memory nodes
//	r, err := swarm.Open(ctx, m, addrs, swarm.Options{})         // per client
//	err = r.Write(ctx, value)
//	value, err := r.Read(ctx) // nil if never written
//
// # Objects
//
// The max register M holds tuples (timestamp, writer, flag, value), ordered by maxreg.Tag:
// timestamp, then writer id, then the flag (GUESSED below VERIFIED). Each writer w has a
// timestamp lock TSL[w]: one 8-byte CAS word per replica (layout in tslock.go: the timestamp
// shifted left by one, the mode in bit 0), placed after the In-n-Out register in each
// replica's block (Size). Timestamps are the tag's 47-bit field, in ticks of Params.Tick of
// the client's own clock (farmem.Runtime.Now), so clients whose clocks disagree guess
// timestamps that others have overtaken.
//
// # Write (the paper's lines 1-11)
//
// guess = the clock in ticks plus the handle's correction; w = (guess or above, me, GUESSED,
// v) is written to M while M is read, in one round trip (maxreg.Replicated.WriteRead). If the
// read returns w, no write that completed before this one began is above w (write-read
// monotonicity of M), so w's timestamp was fresh: done, and a background CAS marks w VERIFIED
// (maxreg.Replicated.Mark). Otherwise the larger tuple m read is written back to a majority,
// before the lock or, with an own metadata word, in the lock's first batch ahead of its CASes
// (see Round trips for why that keeps the proof), so that M's read is complete before the
// lock takes effect: Lemma C.5's case (ii) uses the
// read-read monotonicity of this read, so the weak read the authors' code uses here (and the
// paper's Appendix A admits its proof does not cover) is not used. Then the correction is
// raised so that the next guess exceeds m (the artifact's resynchronization), and
// TSL[me].TRYLOCK(w.ts, WRITE): if it succeeds, no reader returned or will return w, and v is
// written again with a timestamp above m.ts, VERIFIED; if it fails, a reader pinned w, and w
// is the write.
//
// # Read (lines 12-21)
//
// A loop of M reads with a map of the tuple last seen per writer: a VERIFIED tuple is
// returned; a GUESSED tuple m read in an earlier iteration too (so no larger write completed
// before m's write began: the double-read lemma C.2) is returned if TSL[m.writer].TRYLOCK(
// m.ts, READ) succeeds, and marked VERIFIED in the background; a different tuple of a writer
// already seen means that writer's earlier write completed, and the earlier value is
// returned.
//
// Iteration bound. Lemma C.5: a read that sees tuples of one writer in three iterations
// returns in the third (the first two are equal, or it would have returned at the second; its
// read-mode TRYLOCK at the second failed, so a larger timestamp was locked or m.ts was locked
// in write mode, both after a read or write of a larger tuple had completed, so the third M
// read returns a larger tuple and the read returns the earlier one). So a read that has not
// returned has seen each writer in at most two iterations, and with n writers whose tuples can
// be read it returns by iteration 2n+1. Each iteration is one M read (one to three round
// trips: the read, a chase when no in-place copy is valid, a write-back) and at most one
// TRYLOCK.
//
// # Timestamp lock (TRYLOCK, Appendix B), not the authors' notification word
//
// Each replica's word is CASed from the value last seen to (ts, mode) until its timestamp is
// at least ts, all replicas in parallel, until a majority has left that loop; it returns false
// if any word seen holds a larger timestamp or ts in the other mode. A word never goes back
// nor switches mode for one timestamp, and two majorities share a replica, so the two modes
// never both succeed. Each failed CAS returns a strictly larger word, so the loop ends: one
// round trip when one of the round's expectations is right (a writer's own lock pipelines
// every value its word can hold, see Round trips); a reader's can take one more per
// concurrent locker.
//
// # Round trips
//
// Write, fast path: 1 (the write and the read in one batch; the mark is unsignaled or a
// Refresher's). Slow path: 1; then m's value when a majority does not hold m yet (from an
// in-place copy the read returned, else from m's buffer: the chase, +1, In-n-Out's second
// round trip); then the write-back of m and the TRYLOCK; then the rewrite when the lock is
// won (+1).
//
// The TRYLOCK(w.ts, WRITE) takes one round: the first batch read the writer's own lock words,
// and each round sends, per replica, one CAS per value the word can hold below (w.ts, ·) —
// the value last seen, then a lock in either mode on each of this writer's own guesses above
// it (only readers that read those guesses, and the writer, lock this word) — in ascending
// order, pipelined: the first whose expectation holds installs (w.ts, WRITE), the others
// fail. Each is one iteration of Appendix B's per-replica loop and expects a timestamp below
// w.ts, so the lock's safety argument is unchanged. (Up to 16 such values: beyond that, an
// older word left by a reader costs a second round.) A round waits for its other replicas
// before posting another, as each replica's loop in Appendix B is its own.
//
// Where the write-back goes. The proof needs it complete before TRYLOCK(WRITE) only through
// Lemma C.5's case (ii): a reader whose read-mode lock failed because the writer locked w.ts in
// write mode must read a tuple above w next, which holds when m is at a majority first. When
// the writer owns its metadata word (maxreg.Replicated.OwnWord: no other writer lane maps to
// it, the paper's recommended one word per writer), the write-back rides in the TRYLOCK's
// first batch instead, ahead of the CASes on each replica, and the lock CASes only the
// replicas where it surely installs m (already known to hold it, or the word's value known
// exactly: no CAS of its own in flight or failed since last seen). So no replica ever holds
// (w.ts, WRITE) without m, and a read-mode TRYLOCK reads each replica's metadata words right
// behind its CASes there: a reader that sees (w.ts, WRITE) on a replica learns in the same
// batch that the replica holds m or more, and its next M read returns a tuple above w — the
// lemma's conclusion, so the 2n+1 bound stands (Stats.ReadLockProbed counts the read-mode
// locks that learned a larger tuple so). A won lock needs a majority of replicas out
// of their loops, each of which (m was written back ahead of its CAS) holds m, so the read
// half is complete before the rewrite, as in the paper; the write-back is finished at a
// majority (usually no round trip) before the rewrite, and a pinned write needs none.
//
// A writer owns its word only if no other writer lane maps to it: with Params' defaults (64
// words, 128 lanes) every word serves two lanes, so the defaults get the shared-word bound
// below; Words at least the lanes' spread (128 for 128 lanes on two compute nodes, see
// maxreg's wordOf) gives every writer its own.
//
// So, when the lease holds: with its own metadata word, an update takes at most 1 + 1 (chase)
// + 1 (write-back with TRYLOCK) + 1 (rewrite) = 4 round trips, the paper's §7.8 bound;
// with a shared metadata word (Params.Words below the writer lanes' spread), the write-back
// is a round trip of its own (a word-mate's CAS can make it miss a replica that then holds
// the lock), and the bound is 5 — it is the paper's algorithm's own count once In-n-Out's
// chase is counted, as the paper's 4 counts M's read as one round trip (Appendix C.3 takes
// M.READ as 1 or 2, the 2 being the write-back). Schedule for the 5: W2's tuple m reaches one
// replica B only (its in-place copy, refreshed after W2's majority, is not there yet); W1's
// guess w < m is written to A and B while M is read there: m > w, on B alone, no valid
// in-place copy (chase B: +1), write-back to A (+1), TRYLOCK (+1), rewrite (+1): 5. A
// WriteRead whose lease ran out before its write-back (a client stalled longer than
// Params.Lease) falls back to a full read (1, +1 chase, +1 write-back), so such an update
// takes up to 7. A chase that finds the tuple's record only in a write-back's copy (its
// writer's buffer not written on the replicas holding it, maxreg's "Buffers") costs one more
// round trip each time. The Appendix B worst case (a TRYLOCK of w.ts + 1 rounds) no longer arises
// for the writer, whose candidate CASes cover every word its lock can hold.
//
// Measured on the simulator (the package's lincheck test: nine clients, clocks up to 30µs
// apart and 100 ppm drift, paused clients, replicas at different distances, one replica
// crashing midway; 1678 writes, AMD EPYC, -race). Before this scheme (separate write-back,
// one expectation per CAS): 751 in 1 round trip, 809 in 3, 30 in 4, 87 in 5, 1 in 7,
// TRYLOCK(WRITE) up to 2 rounds. Shared words (16 words, 128 lanes): 741 in 1, 839 in 3, 16
// in 4, 81 in 5 (chase + write-back), 1 in 7 (lease ran out); TRYLOCK(WRITE) 1 round. Own
// words (256): 765 in 1, 823 in 3, 87 in 4, 3 in 6 (all three after a lease ran out); every
// timely update within 4.
//
// Scripted schedules with a word per writer (clocks up to 100µs apart drifting by up to 100
// ppm, three seeds each) force each slow path: a stale guess un-published (4 round trips), a
// guess a reader pins, both locks failing on one timestamp, and a reader whose next M read is
// answered by replicas that do not hold the larger tuple yet, which it learned from its failed
// lock round's metadata read; there updates took at most 4 round trips and reads at most 4
// iterations (the bound is 5 for the two writers) and 9 round trips.
//
// Read: 1 when the first M read is one round trip and VERIFIED; each iteration is one M read
// (1, +1 chase, +1 write-back) and at most one TRYLOCK; at most 2n+1 iterations. Measured
// there: at most 5 iterations (the bound is 13 for the six writers) and 13 round trips over
// 1202 reads (1118 returned a VERIFIED tuple).
//
// # Failures
//
// A client may crash at any step: nothing waits on another client (locks are never held, only
// claimed per timestamp), so the others go on; its last write's outcome is unknown. With
// per-node lanes, a client that crashes holding its node's lane latch blocks its node's
// writes to that register (see Memory per register); clients of other nodes go on. Any f of
// the 2f+1 memory nodes may crash or hang (maxreg.Replicated); with more, operations fail with
// an error wrapping farmem.ErrNodeDown. Buffers are recycled as maxreg.Replicated describes.
// A replica whose node restarted empty counts again once Repopulate copied it; a TRYLOCK
// counts only answers to rounds posted within Params.Lease of its attempt's first (a client
// stalled longer starts the attempt over, Stats.LockRestarts), so with the copy made the
// fabric's down timeout plus Lease plus twice Skew after the loss, no answer from the lost
// replica is paired with one from its copy (see Repopulate).
//
// # Runtime
//
// Time, background work and randomness come from the client's farmem.Runtime; no Go lock is
// held across a verb (the lock caches' mutex guards only memory), so the package runs
// unchanged on the simulator.
//
// # Final tuples (tombstones)
//
// WriteFinal writes a VERIFIED tuple at a timestamp no guess reaches (FinalTS, the top of the
// 47-bit range less MaxSlots), and WriteBelow is Write that never re-executes above such a
// tuple: where Write's slow path would rewrite above a tuple m at or above its ceiling, it
// returns ErrCeiling instead, its guess unpublished by the won write-mode lock (so the write
// had no effect; a guess a reader pinned first is the write, below m). Together they are a
// tombstone that no later write overtakes (SWARM-KV's deletes, kvstore's Swarm kind). FormatQuorum
// formats a register on a majority of its replicas when the others are down.
//
// # Memory per register
//
// Size(p) bytes on each of the 2f+1 replicas: a 128-byte header, 8 bytes per metadata word,
// the in-place record (32 bytes plus ValueSize, 8-aligned), padded to 64, then a lane of Slots
// records per writer, then an 8-byte timestamp-lock word per writer (padded to 64). The lanes
// dominate: Writers x Slots x (32 + ValueSize). The paper's writers are clients, and so are
// this package's by default: a lane and a lock word per client that may write.
//
// Per-node lanes (maxreg.Params.PerNode) make the writers compute nodes instead: Writers is
// the number of compute nodes, each node's clients share its lane, its metadata word and its
// timestamp lock TSL[node], and they take turns on them with a latch word in their node's
// region (maxreg.Lanes; farmem's local latches: taken with CAS, awaited with Memory.Wait,
// held across verbs, no round trip). Per object and replica, with kvstore's SWARM-KV defaults
// (ValueSize 1024, Slots 4, Words min(Writers, 64)) and 8 clients per compute node:
//
//	clients  writers (per client / per node)  bytes per replica (per client / per node)
//	      4                             4 / 1             18,176 / 5,504
//	     64                            64 / 8            272,576 / 35,136
//	    128                           128 / 16           543,424 / 69,056
//	    512                           512 / 64         2,168,512 / 272,576 (2.07 MiB / 266 KiB)
//
// With 64-byte values: 1,856 / 704, 25,856 / 3,456, 50,944 / 6,656 and 201,472 / 25,856.
// (The simulated benchmark's compute nodes have 11 client slots, so per-client lanes there
// took 704 lanes per object at 512 clients; per-node lanes take 64 whatever the slots.) A
// footprint independent of the writers would need the authors' artifact's layout (per-client
// logs shared by all registers, each record naming its register, and a collector); it is not
// built.
//
// Safety with per-node lanes. A node's clients exclude each other around every write to one
// register, from its first batch to its rewrite (Register.Write holds the lane:
// maxreg.Replicated.HoldLane), and around every write-back a read makes into the lane: so the
// node's writes to the register are sequential, each beginning after the previous one
// returned, and their timestamps strictly increase (the lane's last timestamp is shared
// under the latch). That is all the proofs above use of a writer: Lemma C.5 and the read's
// "a different tuple of a writer already seen means its earlier write completed" need one
// writer's writes to be sequential; TRYLOCK's argument needs one writer's timestamps
// distinct and its write-mode locks taken in order; the buffer recycling needs one owner per
// buffer at a time, and the latch gives it. One thing a single client had and a node does
// not: two clients' batches to one memory node are not ordered, so a record write of the
// node still in flight to a replica (a straggler of an earlier write) could land after a
// later write reusing its buffer. The lane therefore records, per buffer and replica, the
// last record write posted, and a write leaves a replica out (waiting for the write to be
// done if a majority would be short) until it is done (maxreg's Stats.LaneWaits). The node's
// metadata word is shared by its clients' CASes, which are not ordered either, so it is never
// an own word: the write-back before a write-mode TRYLOCK is a round trip of its own (the
// shared-word bound of 5 round trips above). Concurrent writers of one node to one register
// are not combined: the later waits for the latch and writes on its own, one round trip
// more on its critical path; combining them (the later returning when the earlier's tuple is
// installed) would linearize it at the earlier's write, but needs the earlier to publish its
// outcome, and is not built.
//
// Costs of the latch: a write, and a read that writes back, take and release it with two
// verbs to the node's own region (no round trip; a warm kvstore update stays at one round
// trip); a node's writes to one register queue behind each other, and without EarlyReuse a
// node (not a client) makes at most Slots writes per register per reuse delay. A client that
// dies holding the latch leaves the register unwritable from its node: like every local
// latch, it protects clients that live as long as their node; the others wait while a live
// handle of the process holds it, and give up (an error wrapping farmem.ErrNodeDown) when none
// did and nobody took it for maxreg.Lanes.Patience.
//
// # Limits
//
// Writers are clients with ids 1..Params.Writers (with per-node lanes, clients of compute
// nodes 1..Params.Writers); values at most Params.ValueSize bytes. A read that must write
// back another writer's tuple needs a lane too (maxreg's "Buffers"). A register is never
// freed. One handle per client per register; with per-node lanes every handle of a process on
// the register shares one maxreg.Lanes (Options.Lanes).
package swarm
