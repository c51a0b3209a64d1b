// Package replmem presents 2f+1 memory nodes as one virtual memory node whose every 8-byte
// word is replicated and linearizable, and stays so with any f of those nodes crashed (the
// first one included). A client wraps its farmem.Memory with New; addresses on the virtual
// node (Options.Virtual) go through the protocol below, every other address passes through.
// ds/race builds its replicated index on it (race.Params.IndexReplicas): the table's code is
// unchanged, so its root, directory, subtables, splits and KV blocks are all replicated.
//
//	rm, err := replmem.New(m, replmem.Options{Nodes: nodes, Virtual: v})
//	rm.CAS(ctx, farmem.MakeAddr(v, off), old, new) // linearizable over the replicas
//
// It sits with the transports (it uses the kit in farmem/transport to report per-op results)
// because it is one: a Memory built from other Memories.
//
// # Layout
//
// A logical word at offset o of the virtual node is a group of four words at offset
// Stride·o (Stride = 4) on every replica: its value, its control word, its version word and
// a pending value. A version is a counter (47 bits) and the client id of its writer (16 bits),
// ordered as an unsigned word, and unique: a writer takes a counter above every counter it
// knows of for the word, above its own last one and above its clock (in units of 16µs), so no
// two writes share a version, and a word laid out again after its memory was freed and reused
// gets versions above its previous life's. The control word holds the replica's version while the word is free, and the
// locked bit with the version its holder will write while it is locked. The version word
// holds the version of the replica's value, or a dirty bit with the version of the pending
// value while a holder overwrites the value. All-zero is version 0 of value 0: the state of
// fresh memory, below every version written. A plain Write lays each word out as its value and
// a new version of the writer in the control and version words, so a replica that missed the
// write (down, or restarted empty) holds an older version, never a different value under the
// same one. Memory of a replicated structure is allocated at one offset on every replica (the
// allocator's symmetric area), Stride times as large.
//
// # Protocol
//
// Read (plain reads, any length, one round trip): every replica reads each range three times
// in one batch (ordered: control words, values, control words again), so a replica's copy of a
// word is consistent when both control reads show the same free version. The read succeeds
// when f+1 replicas are consistent and identical on every word of every read of the batch (the
// same quorum for all of them: a structure that reads its slots and then its header in one batch
// gets them in that order); otherwise it reads again with backoff and, after a few rounds, runs
// an identity write on each word that disagrees (see below), which locks a majority and brings
// it to the latest version.
//
// A word no write ever laid out (the unused tail of a block) reads as whatever f+1 replicas
// agree on, version 0 included; every word whose value matters was written to f+1 replicas
// at a version above 0.
//
// A read whose f+1 agreeing replicas hold a word above version 0 that another answering
// replica holds free at version 0 has met a hole: that replica missed the write that laid the
// word out (it was suspected, cut off or paused then, or restarted empty and is not yet
// repopulated). Such a copy counts in no majority, so the word would live on f+1 replicas
// only and one more crash would make it unreadable. The read copies its range to that
// replica (Repopulate: three round trips more, once per hole) before it returns. A handle also
// remembers, in its Health, the ranges it wrote while a replica was left out (up to 16384 per
// replica), and once the replica is back copies one of them per batch it runs.
//
// Write (plain writes: fresh memory only, before anything names it): the bytes laid out with
// zero control, version and pending words, to every replica not suspected down, in one round
// trip; done once f+1 replicas applied it.
//
// CAS, MaskedCAS and FAA (two round trips):
//
//  1. Lock round: a CAS of the word's control word on every replica from the control word this
//     client last saw there to locked(v), v the version this write will have, and, after it in
//     the same batch, a read of the replica's group of words. A replica where the CAS succeeded
//     is locked; with fewer than f+1 locked, the client unlocks them, waits with randomized
//     backoff and tries again (obstruction-free, as any quorum lock is: see Limits).
//  2. With f+1 locked replicas holding a version other than 0 (a replica at version 0 never
//     had the word written: it lost its memory or missed the write that laid the word out,
//     and it is locked and written like the others but never counted), the latest state is
//     the largest version among them: each locked
//     replica's (version, value) is (version word, value), or (version, pending value) when
//     the version word is dirty. The operation applies to that value.
//  3. Write round: on every locked replica, in one ordered batch, the pending value, the
//     version word dirty with the new version, the value, the version word clean, then a CAS of
//     the control word from locked(v) to the free version v. A CAS whose comparison fails writes
//     the latest version's value and version back instead (healing lagging replicas) and
//     reports the value it found. The operation is done once f+1 replicas released. If fewer
//     did (a locked replica failed in the write round: it crashed, or was cut off, midway),
//     the client settles its write: identity rounds, as a repairing read runs, over the
//     replicas that answer; one that finds the write's version the largest among f+1 holders
//     and releases it on f+1 replicas has completed it, as any lock set that sees an
//     unfinished write does, and the operation succeeds. Otherwise (a later version found, the
//     write perhaps overtaken unseen) its outcome is unknown: ErrNoQuorum.
//
// Leases: a holder posts nothing under its locks later than Lease minus ClockSkew after it
// posted the lock round (it gives the locks back instead and starts over). A lock word another
// client has seen unchanged for Lease plus twice ClockSkew is taken over by that client's next
// lock round: a CAS from the holder's lock word to its own. Lock words are unique (they carry
// the holder's unique next version), so an unchanged word means one holder that stopped.
//
// # Why it is linearizable
//
// Mutual exclusion: two lock rounds that both got f+1 replicas overlap on a replica, where the
// second CAS could only succeed after the first holder released or was taken over; by the
// lease rule a taken-over holder writes nothing more. So writes of a word under locks are
// totally ordered, each by the moment its write round's (f+1)-th release applies: its
// linearization point. A failed CAS is linearized at its lock round.
//
// Every write sees the latest committed one: a committed write's version is released on f+1
// replicas, and the next lock set of f+1 intersects them. On that replica the version word
// holds the committed version or a later one; a holder that died midway left either the old
// state, or a dirty version word with the whole pending value written before it, or the new
// state (each write lands in batch order), so step 2 never misreads a replica. An unfinished
// write (its holder dead) is either invisible to every later lock set or completed by the first
// one that sees it: it is then linearized at that moment, which lies within the dead
// operation's unbounded interval.
//
// Reads: f+1 consistent, identical copies of version v mean v was released on f+1 replicas,
// so committed, no later than the read's end; no version committed before the read began is
// missing from them (it would be on f+1 replicas, one of them in the read's quorum, and
// versions at a replica only grow). So the value read was the word's value at some moment
// within the read, and two reads ordered in real time return ordered versions. For several
// words read from one quorum, the order within each replica's batch gives a structure's reads
// in their order: if a write W2 of word y is started only after a write W1 of word x committed,
// a batch reading y and then x that sees W2 on its quorum sees W1 too (one replica of the
// quorum applied W1 before W2, and read y after W2 and x after that).
//
// With at most f replicas down every operation completes: reads and writes wait for the
// answering majority. A replica that fails with farmem.ErrNodeDown is suspected and left out
// of rounds for Options.Suspect, doubling on each failed try up to Options.SuspectMax; when
// the period passes, one round tries it (the probe) while the others keep leaving it out, and
// a success clears the suspicion. The suspicion lives in a Health, which the handles of one
// process share (Options.Health), so a crashed, hung or cut-off node costs the process one
// down timeout per probe period, not one per handle or per operation. Which replicas a round
// asks is the only thing suspicion decides: quorums are counted the same way whoever is asked. With more than f down, operations fail with ErrNoQuorum (wrapping
// farmem.ErrNodeDown: the outcome is unknown) and never return a wrong value.
//
// # Costs
//
// A plain read is one round trip and 3·Stride times the bytes of the unreplicated read from
// each replica (that is 36 times over three replicas); a plain write one round trip and Stride
// times the bytes to each replica; an atomic two round trips and 2 CASes, 1 read and up to 4
// writes per locked replica. Memory: Stride times the logical size on each replica. A batch
// mixing atomics and plain ops takes a round trip per run of plain ops and two per atomic;
// reads that follow an atomic in the batch go in its write round, after the release on each
// replica, and cost nothing more when f+1 replicas agree on them there (else they are read
// again in a round of their own).
//
// # Limits
//
// Liveness under contention is obstruction-freedom with randomized backoff, as for every
// quorum lock (a wait-free consensus object cannot be built from memory that may stop
// answering). A read that meets a word locked by a client that died waits a lease before it
// repairs it. Leases assume clients' clocks and verb delivery within ClockSkew (the fabric's
// late-application bound). A replica that returns after missing writes (a hung node, or one
// restarted empty) is brought back by copying (ds/race's Table.Repopulate), or healed range by
// range by the writes, repairs, reads and catch-up copies that meet it. Until then a word laid
// out while it was away is on f+1 replicas only (its copy there is at version 0, which no
// majority counts), and another crash before a read or a copy reaches the word makes the word
// unreadable (ErrNoQuorum): never stale. Catch-up copies come from the handles that wrote
// (one range per batch, so a long absence takes as many batches as ranges were written, and
// ranges beyond 16384 are left to reads and Repopulate), and a handle that stops running
// leaves its ranges uncopied. Copies it holds at an older version above 0 vote, and only cost
// the reads that meet them a repair. Suspicion is per Health: a partition that cuts a replica
// off from some compute nodes only is met by each of them separately. Plain writes store control words with ordinary
// writes, so the local transport's strict mode must be off for replicated memory. Post runs
// the batch to completion before returning.
package replmem
