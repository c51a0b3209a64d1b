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
// (maxreg.Replicated.Mark). Otherwise the larger tuple m read is first written back to a
// majority, so that M's read is complete before the lock: Lemma C.5's case (ii) uses the
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
// round trip when the handle's cache of the word is right; every concurrent locker can cost
// one more.
//
// # Round trips
//
// Write, fast path: 1 (the write and the read in one batch; the mark is unsignaled or a
// Refresher's). Slow path: 1, then the write-back of the larger tuple m when a majority does
// not hold it yet (its value from an in-place copy the read returned, else from its buffer:
// +1; the write-back: +1), then the TRYLOCK's rounds L, then the rewrite when the lock is won
// (+1). L is 1 when the handle's cache of its own lock words is right; each failed CAS
// returns a strictly larger word, and the only words between the cached one and (w.ts,
// WRITE) are read-mode locks that readers took on this writer's earlier guesses, so L <= 1 +
// the number of readers concurrently locking. A WriteRead whose lease ran out before its
// write-back (a client stalled longer than Params.Lease) falls back to a full read (up to 3
// more). So an update takes at most 4 + L round trips, 3 + L in the common slow path, and
// the paper's "at most 4" (§7.8) holds when L = 1 and m needs no chase. Measured on the
// simulator (the package's lincheck test: six and nine clients, clocks up to 30µs apart and
// 100 ppm drift, paused clients, replicas at different distances, one replica crashing
// midway), over 1678 writes: 751 in 1 round trip, 809 in 3, 30 in 4, 87 in 5, 1 in 7 (the
// most); TRYLOCK took at most 2 rounds. The first batch also reads the writer's own lock words
// (8 bytes per replica), so that the TRYLOCK starts from their current values; the 5-round-
// trip writes are mostly a write-back plus a TRYLOCK whose first answer came from a replica
// that had not answered that batch.
//
// Read: 1 when the first M read is one round trip and VERIFIED; each iteration is one M read
// (1, +1 chase, +1 write-back) and at most one TRYLOCK; at most 2n+1 iterations. Measured
// there: at most 5 iterations (the bound is 13 for the six writers) and 13 round trips over
// 1202 reads (1118 returned a VERIFIED tuple).
//
// # Failures
//
// A client may crash at any step: nothing waits on another client (locks are never held, only
// claimed per timestamp), so the others go on; its last write's outcome is unknown. Any f of
// the 2f+1 memory nodes may crash or hang (maxreg.Replicated); with more, operations fail with
// an error wrapping farmem.ErrNodeDown. Buffers are recycled as maxreg.Replicated describes.
//
// # Runtime
//
// Time, background work and randomness come from the client's farmem.Runtime; no Go lock is
// held across a verb (the lock caches' mutex guards only memory), so the package runs
// unchanged on the simulator.
//
// # Limits
//
// Writers are clients with ids 1..Params.Writers; values at most Params.ValueSize bytes. A
// register is never freed. One handle per client per register.
package swarm
