// Package abd holds the two baselines of the SWARM paper's evaluation (§7, "Baselines"), built on
// farmem's verbs alone so that they run in the same harness as ds/swarm's registers:
//
//   - Raw: RAW, one object on one memory node, a get is one READ of the value and an update one
//     WRITE of it. No replication and no concurrency control: a concurrent read may return a
//     torn value, and a crashed node loses the object. It is the latency lower bound, not a
//     usable store; it is linearizable only for values of one 8-byte word (which never tear)
//     and without faults, and its tests check exactly that.
//   - DMABD: DM-ABD, ABD (Attiya, Bar-Noy and Dolev) over disaggregated memory made safe
//     for concurrency with pure out-of-place writes and one 8-byte max word per object per
//     replica, emulated with CAS ("a good engineering solution using known techniques").
//     Linearizable, tolerating f crashed or hung replicas of 2f+1.
//
// Both implement Object, as does an adapter over ds/swarm's Register in the tests and in
// bench/repro, so the three are driven and counted by the same code.
//
// # DM-ABD's layout
//
// Per replica (2f+1 memory nodes, one block each, Size bytes, 64-byte aligned):
//
//	[0, 64)     the max word (a Stamp), written only by CAS
//	[64, ..)    writer lanes (one per writer, by client rank), Params.Slots records each
//
// A record is [hash 8B | identity 8B | value length 8B | value], the hash an XXH3-64 of the
// rest. A Stamp is ts (32 bits, a logical counter as in ABD) | writer id (16 bits) | the
// writer's sequence number (16 bits), compared as an unsigned word; the record of a stamp is in
// slot seq mod Slots of its writer's lane on every replica, and its identity is the stamp's
// writer and sequence. A record is sealed before its timestamp is known (that is what lets the
// update write it in parallel with the timestamp read), so the identity leaves the ts out.
//
// # Get: two round trips
//
//  1. Read the max word of every replica, wait for a majority; v is the largest stamp seen
//     (also counting what this handle knows each replica holds).
//  2. Read v's record from a replica that answered with v. If fewer than a majority of
//     replicas are known to hold v, a third round trip writes it back (ABD's read write-back):
//     the record into v's slot and a CAS of the max word, on every replica not known to hold
//     v, until a majority holds v or more. Under no contention the answering majority holds v
//     and the get takes 2.
//
// A record whose identity or hash does not match (its slot reused by the writer's Slots-th
// next update while the read was in flight) restarts the get: safety never depends on when a
// slot is reused, liveness does (the read is lock-free; enough Slots make restarts rare).
//
// # Update: two round trips
//
//  1. In one batch per replica: WRITE the sealed record into the writer's next slot, and READ
//     the max word; wait for a majority. ts is the largest ts seen plus one.
//  2. CAS each replica's max word from the value last seen there to (ts, me, seq): the
//     emulated MAX. A CAS that fails on a smaller word retries from what it found (one more
//     round trip each, contention); one that finds a larger word is absorbed. It waits until
//     a majority holds the stamp or more. The record was posted to each replica ahead of the
//     CAS to that replica (batches from one client to one node apply in posting order), so a
//     visible stamp implies a whole record.
//
// The paper's DM-ABD sends to a majority chosen by the key's hash and falls back to all;
// this one, like ds/swarm's register (maxreg.Replicated), sends to every replica and waits for
// a majority, so both pay the same fan-out in client CPU.
//
// # Costs and limits
//
// Round trips: RawGetRoundTrips, RawUpdateRoundTrips, GetRoundTrips and UpdateRoundTrips
// (common case). A get moves 8 bytes per replica, then one record; an update a record and 8
// bytes per replica, then a CAS per replica. Each operation allocates its buffers (stragglers
// of a majority wait keep theirs until they complete). ts is 32 bits (about four billion
// updates of one object) and seq 16 bits, so a reader stalled across 65,536 updates of one
// writer could accept a reused record with the same identity; both are benchmark-grade limits.
// Writers are the clients with a lane (see Params.Writers). Objects are never freed. One handle per
// client per object; a handle belongs to one goroutine. No Go lock is held across a verb and
// nothing runs in the background, so the package runs unchanged on the simulator.
package abd
