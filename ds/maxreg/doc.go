// Package maxreg is In-n-Out (§4 of "SWARM: Replicating Shared Disaggregated-Memory Data in No
// Time"): a conditional max register over values larger than a word, on one memory node,
// written and read in one round trip in the common case with one-sided verbs only. It is meant
// as the per-replica register under Safe-Guess (ds/swarm); on its own it is a max register whose
// values are ordered by a tag the writer stamps from the fabric clock. Replicated is the
// paper's reliable max register (its Appendix A) over 2f+1 of them, one per memory node.
//
//	addr, err := maxreg.Create(ctx, m, a, node, maxreg.Params{}) // once
//	r, err := maxreg.Open(ctx, m, addr, maxreg.Options{})         // per client
//	tag, err := r.Write(ctx, value)  // raises the register to (tag, value) if tag is larger
//	tag, v, err := r.Read(ctx)       // the largest tag and its value; zero Tag if empty
//
// A handle belongs to one client (one goroutine with its own farmem.Memory); handles share
// nothing but far memory and, optionally, a Refresher. An operation that fails with a transport
// error may or may not have taken effect.
//
// # What it guarantees
//
// The paper's max-register specification (its Appendix A), over tags: a read returns the empty
// register or the value of a write invoked before it returned, with that write's tag (never a
// torn or mixed value: validity); its tag is at least that of every write and every read that
// completed before it began (write-read and read-read monotonicity). With one metadata word
// (Params.Words = 1) it is moreover linearizable as an atomic max register; with more it need
// not be, since a read scans the words one by one and may return a write that began after
// another, which it missed, had completed. Both are checked in the package's tests under torn
// reads and writes, on the local transport and the simulator, with a client dying between the
// two ops of its write.
//
// # Layout
//
// A register is one block on one memory node, 64-byte aligned (Size(p) bytes):
//
//	[0, 128)            header: magic, version, the Params, a random nonce, the base time
//	[128, 128+8k)       k metadata words (Tags), written only by CAS
//	[.., +rec)          the in-place record
//	[64-aligned, ..)    writer lanes: lane c-1 for client id c, Params.Slots records each
//
// A record is [XXH3-128 hash 16B | identity 8B | length 8B | value], the identity being the
// write's Tag without its VERIFIED bit, the hash taken over identity, length and value with the
// seed hashSeed XOR the register's nonce (the same in every process; the nonce keeps a record
// left by an earlier register at the same address from validating). The in-place record and the
// out-of-place ones have the same format, so a refresh copies the writer's record verbatim.
//
// A Tag (see its doc) is 47 bits of timestamp, 16 bits of client id and the VERIFIED bit, most
// significant first, compared as an unsigned word. It locates its out-of-place record with no
// bits of its own: slot ts mod Slots of lane client-1. The hash binds the in-place copy to that
// pointer, since the identity it covers is the pointer's (client, ts).
//
// # Timestamps
//
// A tick is Params.Tick (1µs by default), counted from the register's creation (the base time
// in its header, fabric time from farmem.Runtime), so 47 bits last 2^47 ticks: 4.46 years at
// 1µs, 17.8 at 4µs. A write that would need a larger timestamp fails with ErrExhausted; nothing
// ever wraps. (The authors' artifact packs 28 bits of 466ns ticks, which overflow after about
// 125 s; a wrapping timestamp would make a new write order below old ones, so this package
// spends the bits the artifact gives a 24-bit log index, which the slot rule below replaces, on
// the timestamp instead.) A client's next timestamp is the first at least max(last+1, now) that
// takes the slot after its previous write's: strictly increasing whatever the clock does (a
// clock that steps back only stops the timestamps from following it until it catches up), at
// most Slots-1 ticks ahead of max(last+1, now), and a record slot is reused only by the
// Slots-th write after the one that used it. Open continues above the largest timestamp of the
// client's id it finds in the metadata words and in its lane's identity words, so a client id
// reused by a later client does not repeat a tag.
//
// # Write: one round trip
//
// The writer seals its record, then posts one batch to the register's node: the record's Write
// into its slot, then a CAS of its metadata word from the value it last saw there to the new tag.
// The only ordering used is the contract's: within one batch to one node each op executes after,
// and observes the effects of, the earlier ones (farmem's package doc, semantics 3), so a tag
// visible in a word implies its record whole in its slot. No ordering across batches or nodes
// is assumed. A CAS that finds another word (a writer sharing the word moved it) retries from
// what it found, one round trip each, until the word holds the tag or a larger one (the write is
// then absorbed); each failure strictly raises the expected value. Once installed, the in-place
// copy is refreshed in the background: by Options.Refresher (its own client, a goroutine from
// Runtime.Go, one pending copy per register), or else by an unsignaled Write on the writer's
// client (no round trip; applied before its next verb to the node). WriteFlag writes GUESSED
// tags and Verify sets VERIFIED with one CAS and no data: the copy and the record stay valid
// because the hash covers the identity, not the flag.
//
// # Read: one round trip, two when the copy is torn or stale
//
// One Read returns the k words and the in-place record; the register's tag is the largest word.
// If the record's identity is that tag's and its hash holds, its value is returned. Otherwise
// (torn by concurrent refreshes, or stale: naming an older or newer write) the tag's record is
// read from its slot and returned if its identity and hash hold, and the copy is refreshed. A
// record that fails there was overwritten by its writer's Slots-th next write, begun between
// the read's two round trips: the read starts over. That restart is the only loop: a read takes
// 1 or 2 round trips plus 2 per restart, and restarts only while the writer of the largest tag
// installs Slots-1 more writes and begins another within one read's two round trips, so it is
// lock-free, and wait-free only under that bound on writers' speed (see Buffers).
//
// # Metadata words (choosing k)
//
// Writers update word rank mod k, the rank numbering clients with compute nodes interleaved
// (wordOf): (client id - 1) mod k on one compute node. Plain client id mod k, as the issue
// suggests, puts slot s of every compute node on one word whenever k divides ClientsPerNode
// (64 by default): measured with that mapping, 16 writers on two nodes made only 52-64% of
// their writes in one round trip even with k = 64. A writer sharing its word loses a CAS
// whenever another writer of the word wrote since its own last write, contended or not; with
// one word per writer its CAS always wins. Readers pay 8 bytes per word. The package's tests
// run the paper's §7.9 experiment scaled down on the simulated ConnectX-6 (one register,
// 64-byte values, clients over two compute nodes, virtual time) and print, for k = 1/4/16/64:
//
//	YCSB A, 16 clients: 1-RTT writes 6.7/30.2/100/100%, write p50 8.7/5.8/3.2/3.2µs, read p50 4.94/4.94/4.95/4.98µs
//	YCSB B, 16 clients: 1-RTT writes 9.8/22.0/100/100%, write p50 6.1/5.8/3.3/3.4µs, read p50 4.94/4.94/4.95/4.98µs
//	YCSB A, 64 clients: 1-RTT writes 5.2/5.2/24.1/100%, write p50 44.5/10.8/8.9/6.4µs, read p50 2.3/6.4/7.2/8.0µs
//	YCSB B, 64 clients: 1-RTT writes 1.5/12.2/34.4/100%, write p50 11.2/9.0/8.7/5.7µs, read p50 7.1/7.2/7.2/7.2µs
//
// Reads grow by 8 bytes a word (317 bytes at k = 16, 701 at 64, with 64-byte values) and
// their latency moves little (up to 10% at 64 clients under YCSB A), while writes lose round
// trips to every shared word (39% slower at the median with 64 writers on 16 words).
// DefaultWords is therefore 64, one word per writer for up to 64 writers, as the paper
// recommends; registers read far more than written, where bandwidth matters, may take 16.
//
// # Replication (Replicated)
//
// The paper's reliable max register: N = 2f+1 In-n-Out registers on distinct memory nodes,
// formatted with one header (the same base time and hash nonce), so a record is byte-for-byte
// the same on every replica and an 8-byte tag names the same buffer on each (slot ts mod Slots
// of lane client-1). It lives here rather than in ds/swarm because it is a max register with
// the same specification, tags and layout, and its write-back copies another writer's
// record into a buffer of the helper's lane on a lagging replica, which readers find through
// the layout (see "Buffers"); ds/swarm
// builds Safe-Guess on it. Each handle keeps, per replica, the largest tag the replica is
// known to hold (a CAS or a read of it returned at least that tag: the paper's cache[r]) and
// the last value seen in its own metadata word there.
//
//   - inner_write(t): to every replica not known to hold t or more, one batch per round: the
//     record into t's buffer, then a masked CAS (the VERIFIED bit ignored, so a concurrent
//     VERIFIED mark does not make it fail) of the client's word from its last seen value to
//     t. It waits with Pending.WaitNodes for as many replicas as the majority still needs
//     and returns; a lost CAS on a shared word starts another round. The replicas it did not
//     wait for (stragglers) finish on their own: the batch's completion hook
//     (Pending.Then) raises the caches from what they return, and their buffers (a record
//     allocated per write, read buffers per read) are left untouched until it has run. A CAS
//     expects the handle's own CAS still in flight to the word, if any; when that one's tag
//     is not below t, the CAS stores back what it finds (a probe: a word never goes down).
//     Rounds are bounded: a write gives up with ErrContended (an ErrNoQuorum, outcome
//     unknown) once it has posted MaxInstallRounds rounds for longer than Params.Lease
//     (only writers sharing its word can make it lose a round), and a write-back posts no
//     round past its read's lease.
//   - Write: inner_write of the client's next tag, one round trip, none if a majority is
//     already known to hold a larger tag.
//   - Read: every replica's words and in-place record in one batch, a majority waited for; v
//     is the largest tag known for any replica (also from earlier operations), its value an
//     in-place copy some replica returned with v (else v's buffer, read on the replicas known
//     to hold v: one more round trip); then inner_write(v), usually free because the replicas
//     that answered hold v (one more round trip otherwise). A read starts over if every
//     buffer it chased was reused, or if its lease ran out (below).
//   - WriteRead (Safe-Guess's first round trip): a write and a read in one batch; if the
//     read half found a larger tag, that tag is written back as a read's would be. The read
//     half's result is the larger of what its answers show, counted beside the batch's build
//     time as a Read counts its own, and what the write has learned by its end (its later
//     rounds, a CAS lost on a shared word), counted beside its start.
//     WriteReadDeferred instead hands that write-back (a WriteBack, its value already found)
//     to the caller, who carries it in its next batch ahead of its own ops on each replica
//     (Safe-Guess's lock round), then finishes it (no round trip once a majority completed
//     that batch). WriteBack.Sure tells on which replicas completing that batch surely
//     installs the tag: those known to hold it, or, when the handle owns its metadata word
//     (OwnWord: no other writer lane maps to it), those whose word's value it knows exactly.
//   - Probe: a read of replicas' metadata words carried in a caller's batch, raising what the
//     handle knows each replica holds; Probe.Top tells the caller the largest tag read there.
//   - Mark: the VERIFIED bit of a GUESSED tag, a CAS of its writer's word from the tag to
//     tag|VERIFIED on every replica, in the background (a Refresher's goroutine from
//     Runtime.Go, or unsignaled); a word is only ever raised, so a late mark changes nothing
//     else.
//
// With at most f replicas crashed or hung, every operation completes (the majority answers);
// with f+1, operations fail with ErrNoQuorum (which wraps farmem.ErrNodeDown: outcome
// unknown) and never return a wrong value. A replica counts toward a majority holding a tag
// only on an answer to a batch built within Params.Lease of the others counted (a write's
// rounds, a read and its write-back), whatever the client stalled in between, so a replica
// lost and repopulated (RepopulateReplica) during a stall is never counted on its lost
// memory's answer beside answers that came after the copy.
//
// # Buffers and their recycling
//
// Each writer has a lane of Params.Slots records per register (per replica), and the tag
// names its buffer (slot ts mod Slots); nothing is allocated per write, nothing is freed. A
// reader accepts a record only if its identity is the tag it chased and its 128-bit hash
// holds, so a reused, half-rewritten or stale buffer is never returned as another write's
// value: safety never depends on when a buffer is reused. Liveness and durability do.
//
// Register (one node) reuses a buffer round-robin with no coordination (the next write after
// Slots-1 others): a read that chased a buffer reused meanwhile starts over, so its reads are
// lock-free, wait-free only if writers are slower than readers.
//
// Replicated recycles by this scheme (the paper's §4.5 describes one and nobody built it):
//
//   - Only a buffer's owner writes it. A write-back (inner_write of another writer's tag v on
//     a lagging replica) copies v's record into a buffer of the helper's own lane, as the
//     paper's In-n-Out write takes the caller's own pre-allocated chunk, never into v's
//     writer's buffer; the helper records that buffer as holding v (a copy of v is reused for
//     later write-backs of v). A read whose chase of v's buffer finds neither v nor a later
//     record of v's writer (v reached those replicas by write-backs only) reads, on the
//     replicas whose words hold v, the lanes of those words' writers (one more round trip;
//     CopyChases); one that finds a later record of v's writer starts over (v is superseded).
//     So no client ever writes into a buffer another client may reuse, and no late op (a
//     straggler, a paused node's queue, a write-back posted before a pause) can land in a
//     reused buffer: reuse needs no bound on late application. Only clients with a lane
//     (ids 1..Params.Writers) can write back; a read by another client that must write back
//     fails with ErrNotWriter.
//   - Superseded: a buffer's tag t is superseded once the owner knows a majority to hold a
//     larger tag (its next write returned, a read or write-back returned a larger tag, or its
//     caches show one). From then on every read that begins returns a larger tag (write-read
//     and read-read monotonicity), so only reads begun earlier may still chase t, and t's
//     durability rests on the larger tag's records. A buffer holding a tag not superseded is
//     never reused: a replica whose words hold that tag may have no other copy of its record.
//   - Lease: a client posts no verb that depends on a tag (the chase of its buffer, a
//     write-back of it) later than Params.Lease after it began the read that returned the
//     tag, by its own clock; a read past its lease starts over (LeaseRestarts).
//   - Reuse: a buffer is reused ReuseDelay = Lease + Skew after its tag was superseded, on the
//     owner's clock, so that a chase posted within its lease finds its record: reads restart
//     only when their client stalled past the lease, and are wait-free under that synchrony
//     (clients' clocks measure elapsed time within Skew of each other over a ReuseDelay; a
//     client does not stall between checking its lease and posting). A write whose buffers
//     are all too recently superseded sleeps until one ages (RecycleWaits), or, with
//     ReplicatedOptions.EarlyReuse, reuses the oldest superseded one at once (EarlyReuses):
//     the writer never waits, and reads above Slots writes per ReuseDelay per writer are
//     lock-free instead. A write with no superseded buffer reads the register first.
//     Without synchrony, safety and durability are unchanged; only restarts remain.
//
// The cost, without EarlyReuse: a writer makes at most Slots writes per ReuseDelay (with
// DefaultLease and DefaultSkew, 4 slots per 2ms: about 2,000 writes a second per writer per
// register); with it, none. (Before copies, a write-back wrote into the writer's buffer, and
// reuse had to wait out the fabric's down timeout too: a second on cxl, four writes a second
// per writer per key.) A store of many registers could share per-client logs across
// registers (as the artifact's per-client log regions do) so as not to pay a lane per writer
// per register; that is not built.
//
// # Per-node lanes
//
// With Params.PerNode (replicated registers only; the header's layout version says so) the
// writers are compute nodes: a tag's 16-bit writer field holds the compute id of the writing
// client's node, Writers counts compute ids, writer c's metadata word is (c-1) mod k and its
// lane is lane c-1, so a register takes Writers lanes of Slots records whatever the number of
// clients per node. The clients of one node share the lane's state (ReplicatedOptions.Lanes,
// one per process and fabric: the last timestamp, the slots' tags and reuse times, the node
// word's last value and in-flight CASes) and take turns with a latch word in the node's shared
// area (alloc/nodearea): a write holds it from its stamp to its return, a read only while it
// writes back; Replicated.HoldLane holds it across a caller's several operations (ds/swarm's
// write). Under the latch the node is one sequential writer, so what "Buffers" argues of a
// writer holds of the node, except for one thing: two clients' batches to one memory node are
// not ordered, so a record write of the lane is not posted to a replica where the previous
// record write into the same buffer may still be in flight (the write waits, without a round,
// if a majority would be short: LaneWaits), and the node's word is never an own word
// (OwnWord false). A round that skipped such a replica may have asked only replicas that do
// not answer (a paused node): when the replicas it asked can no longer form the majority, or
// it has waited a Params.Lease and a replica it skipped is free, the write asks that replica
// in another round rather than fail while a majority is reachable. A read writing back a tuple of its own node whose buffer the lane reused
// since starts over (the tuple is superseded). Costs: two verbs to the node's own region per
// write (no round trip); a node's writes to one register are sequential. A waiter waits while the holder
// lives (a handle of the process holds the latch: its operation ends, each verb at worst
// after a down timeout) or the latch changes hands; a client that dies holding the latch
// blocks its node's writes to the register, and the others give up when no live handle held
// it, nobody took it for a whole Lanes.Patience and it is still held (ErrLaneStuck). A Lock
// cut short by the patience may have taken the latch all the same (a transport applies an op
// whose context ended before its answer); it then names the client, which releases it.
//
// # Costs
//
// Round trips are the constants WriteRoundTrips, CASRetryRoundTrips, WriteAbsorbedRoundTrips,
// VerifyRoundTrips, ReadRoundTrips, ReadChaseRoundTrips, OpenRoundTrips and FormatRoundTrips;
// for Replicated, ReplicatedWriteRoundTrips, ReplicatedReadRoundTrips (plus one to chase, one
// to write back) and OpenReplicatedRoundTrips. A replicated write sends its record and CAS to
// every replica and allocates the record it sends (its buffers belong to the transport until
// the stragglers' hook has run); a replicated read reads every replica's words and in-place
// record, allocating a buffer per replica for the same reason.
// A write moves its record (32 bytes plus the value) and a CAS; a read k words and the in-place
// record (32 bytes plus ValueSize), and on a chase the record again; the background refresh
// moves one record. A write and a read hash their value once with XXH3-128 (a chasing read
// twice). A write, and a read that chased, allocate the copy their refresh writes (and,
// without a Refresher, its one-op batch); a read answered in place allocates nothing beyond dst.
//
// # Runtime
//
// Time comes only from the client's farmem.Runtime, background work only from Runtime.Go (the
// Refresher), and no Go lock is held across a verb (the Refresher's mutex guards only its
// queue), so the package runs unchanged on the simulator.
//
// # Limits
//
// Values are at most Params.ValueSize bytes, fixed at creation. Only clients with ids
// 1..Params.Writers may write (ErrNotWriter); any client may read. One handle per client per
// register. There is no delete or tombstone of its own: ds/swarm's WriteFinal writes one as a
// tag at the top of the timestamp range (swarm.FinalTS), which SWARM-KV (kvstore's Swarm
// kind) uses. A register is never freed by this package.
package maxreg
