// Package cider is CIDER (Du et al., PVLDB 19(8), 2026): pessimistic synchronization of the final
// pointer change of memory-disaggregated KV stores, with global write combining through the far
// MCS lock (ds/qlock) and contention-aware switching between optimistic and pessimistic paths.
// Its synchronizers implement ds/ptrsync's Synchronizer, so the paper's baselines run on the same
// structures:
//
//   - ptrsync.Optimistic: CAS the data pointer, retry over newer words of the same key (O-SYNC).
//   - Spin: a CAS spinlock with truncated exponential backoff (the Smart framework's "CAS").
//   - MCS: the far MCS lock alone, the lock passed with the pointer word (ShiftLock).
//   - CIDER: the MCS lock with global write combining, each update routed by its compute
//     node's credits (Credits: the credit and retryRecord maps of Algorithm 1).
//
// They run on RACE (ds/race keeps the lock entries as its per-slot metadata), on the paper's
// micro-benchmark, the pointer array (bench/ptrarray), and on Dolphin's hybrid tree (ds/hybrid),
// whose value words share the entries of a lock table hashed by key, as the paper does for
// SMART's leaf pointers (see "Shared lock entries" below). Each keeps Stats (ptrsync's counters and
// those of the lock paths) and describes its last operation (OpInfo) for the experiments.
//
// # Use
//
//	credits := cider.NewCredits(0)                        // one per compute node
//	s, err := cider.NewCIDER(m, credits, cider.Options{}) // one per client
//	t, err := race.Open(ctx, m, a, raceRoot, race.Options{Sync: s}) // race.Params.MetaSize >= 16
//
// # The synchronizer interface
//
// ds/ptrsync states the contract. A structure locates the data pointer, reads it and confirms it
// holds the key, and hands a ptrsync.Target to Commit: the pointer and its lock entry, the word
// read (Old), Install (write the new block if not yet, and CAS the pointer from an expected
// word: one round trip on the array, whose blocks sit on their pointer's node) and Same
// (whether a word read during the operation names a block of the key: always on the array,
// whose pointer is the key's own; a read of the block on RACE, whose slots change keys). Every
// pointer change, in every synchronizer and mode, is a CAS from a word read during the
// operation, which the allocator's epoch pin keeps from naming a reused block: there is no ABA,
// and a CAS fences whoever makes it. Plan is called once per operation before its first round
// trip: CIDER routes the operation there and says whether the structure writes the new block
// early (in parallel with its lookup) or leaves it to Install.
//
// # Costs
//
// On the pointer array, uncontended (round trips, then memory-node verbs; allocator pins and
// frees cost nothing within its Refresh):
//
//	Search                          2   READ pointer; READ block
//	Insert                          1   [WRITE block, CAS pointer]
//	Update, Optimistic              2   [WRITE block, READ pointer]; CAS
//	Update, Spin                    4   [WRITE, READ]; [CAS lock, READ pointer]; CAS; CAS unlock
//	Update, MCS                     4   [WRITE, READ]; MaskedCAS enqueue; CAS; CAS release
//	Update, CIDER, cold key         2   as Optimistic
//	Update, CIDER, hot key, alone   4   READ; MaskedCAS enqueue; [WRITE block, CAS pointer]; CAS release
//	Delete, CIDER                   4   READ; MaskedCAS closing enqueue; CAS pointer; CAS release
//
// A hand-over to a queued successor replaces the release CAS by two WRITEs to its compute node
// and one FAA of the epoch (one round trip). On RACE every path adds the table's lookup and
// confirmation (race's package doc): a pessimistic update costs 6 round trips there (buckets;
// block; enqueue; block WRITE; CAS; release), since a RACE block may sit on another node than
// its slot.
//
// # Global write combining (CIDER §4.2)
//
// An update routed pessimistic enqueues on the pointer's lock (qlock) without writing its block.
// What it does next depends on what reaches its lock node:
//
//  1. The lock (free at enqueue, or Granted by the previous holder, with the pointer word it
//     left as a hint). If nobody has linked behind it (a local read) it executes its own
//     change and releases: a lone holder. If someone has, it becomes the coordinator C: it
//     reads the lock word and the pointer in one round trip (step 1); the tail E closes the
//     batch (clients queued later wait behind E for the next one).
//  2. C sends E an Exec message with the pointer word it read (step 2): E holds the lock.
//  3. E, the last writer, writes its own block and CASes the pointer (step 3), and sends C a
//     Done message with the outcome: committed over word W, or not (step 4).
//  4. C passes a Combined message with the outcome to its successor, which passes it on, and so
//     on up to E (steps 5-6): the lock travels with the outcome. Each of C and the participants
//     takes the outcome as its own if the executor committed over a block of its own key
//     (Same(W)); its own block is never written (Outcome Combined), otherwise it retries.
//  5. E, receiving the Combined message, holds the lock again and releases it normally: to the
//     first client queued behind it (whose batch starts) or free.
//
// So a batch of n updates writes one KV block and CASes the pointer once (the tests count it:
// 2n+5 memory-node verbs for the batch, against 5n for MCS, and 3n+1 writes between compute
// nodes). Deletes are never combined: a delete enqueues as a closing acquisition (qlock), so no
// update can queue behind it until it releases; it is the executor of the batch ahead of it or
// a lone holder. An update refused by a closing delete pauses (exponential backoff) and lets
// the structure look again.
//
// Why it is linearizable: every member of a batch was invoked before C's tail read, which
// precedes E's CAS, and returns after E's CAS (the outcome reaches it through E's Done). So
// each member can be linearized just before E's CAS, in queue order, with E last: a member
// that took the outcome is overwritten at the instant it takes effect and nobody can observe
// its value. That needs E's CAS to land on a block of the member's key, which the member
// checks (Same(W)): on the array always so; on RACE a slot may have changed keys while the
// member waited (a delete and another key's insert, or a split's clearing), and then the
// member retries (a test shows members whose check accepts any word reporting an update that
// is not there). A member
// that retries instead of taking the outcome is also correct, for the same reason: its combined
// placement was invisible, so doing the update again later linearizes it later. Optimistic
// updates (other compute nodes route by their own credits) are CASes too: E's CAS fails
// against one, confirms the newer word and CASes again.
//
// # Contention-aware routing (CIDER §4.3, Algorithm 1)
//
// Each compute node keeps Credits: per key, a credit and the failed-CAS count (retryRecord) of
// its last optimistic update. An update whose key has credit spends one and goes pessimistic;
// afterwards the credit gains one if the update was in a combined batch (coordinator,
// participant or executor) and is halved (AIMDFactor) if it held the lock alone. An optimistic
// update whose failed CASes reach HotnessThreshold (2), following another such update of the
// key on this node, adds InitialCredit (36). Keys with no credit and a cool record are not
// kept; at most a capacity of keys are (CLOCK eviction). The maps are guarded by a mutex held
// only for map operations, never across a verb.
//
// # Decisions on the open questions (CIDER notes §8)
//
// Q1, the executor's CAS expectation: the pointer word the coordinator read together with the
// tail (no extra round trip), once Same confirms it names a block of the executor's key (on
// RACE a block read unless it is the executor's own Old). If the CAS finds another word
// (an optimistic writer of another compute node, or a holder of a reset lock) the executor
// confirms that word and CASes again, until its deadline; it never gives up the batch to an
// optimistic writer. A lone holder CASes from the word its predecessor installed (passed in
// the hand-over), else from its own read; a hint is only ever a word a CAS saw, so a wrong
// guess cannot circulate.
//
// Q2, the end of the hand-off chain: the chain runs from C to E. E, after answering C, waits in
// its lock node for the Combined message that ends the chain, then releases the lock to whoever
// queued behind it. E returns to its caller after that (its answer is decided at its CAS), so
// a client needs one lock node and never has two acquisitions in flight. In a batch of two,
// C's Combined message goes straight to E.
//
// Q3, the epoch FAA: one per hand-over to a waiting successor, in the same batch as the
// hand-over's writes; none when a release frees the lock (nobody is waiting, so nobody
// watches the epoch), none for Exec, Done and Combined (they pass the lock within one tenure).
// A combined batch costs at most one FAA, an uncontended update none; the FAA is off the
// critical path of the batch's members.
//
// Q4, local write combining: none, in CIDER or the baselines. The global queue already
// combines the clients of one compute node with everyone else's (a batch spans clients of
// every node that queued). The experiments are therefore the paper's "local
// WC off" configuration (its factor analysis, §5.4.1), which makes the optimistic collapse
// deeper than with local WC.
//
// Q5, versions: data pointers carry none, and nothing relies on a small counter that could
// wrap. A pointer's identity is its block's address, which the allocator's epochs keep from
// recurring while any operation that read it is pinned, so a CAS from a word read during the
// operation cannot succeed on a later incarnation, however many delete/insert cycles
// intervene (tested over 40 cycles; without the epochs the word recurs after one). The paper's lock-entry version had two jobs, done otherwise here: keeping updates
// from queuing behind a delete (the closed bit of the lock word), and keeping a batch to one
// key (each member's Same(W) check). The lock word's 18-bit generation changes only on resets
// and is only compared for a change by waiters that read it every Check. An update refused by a
// closing delete returns Retry: the structure looks again and reports ErrNotFound once the
// delete is done, or queues again.
//
// Q6 (RACE): see race's package doc; lock entries are the table's per-slot metadata, and the
// plan (ptrsync.Plan) lets CIDER defer the block write per operation and skip the entry prefetch.
// Q7: additive step 1; "two consecutive" means this update's and this node's previous
// optimistic update of the key both reached the threshold; an executor counts as combined;
// credits are per key (the array's index, ptrsync.KeyHash of a RACE key). The failed CASes of an
// optimistic update are recorded when the update completes, as Algorithm 1 does;
// Options.EarlyCredit records them as soon as they reach the threshold instead (a key in a
// storm of failing CASes then turns hot after two such updates instead of after two of them
// have fought their way through it, which decides how fast CIDER leaves a collapse at hundreds
// of clients). Q9: a client is a
// goroutine with one farmem.ClientID (16 bits) and one operation in flight; tickets add a
// 29-bit acquisition number.
//
// Q10, failures inside a batch: members learn only what E's Done message says, through C and
// the chain. If E dies (before or after its CAS), or C dies after handing over, or a
// participant dies in the chain, the members waiting for the lock see its epoch stand still
// for a lease, the lock is reset (qlock), and each retries its update from the start: safe,
// because a combined update is invisible (if E's CAS did land, the retry is linearized after
// it). E itself, its answer known at its CAS, returns it once the lock comes back or is reset
// (the tests crash E right after its CAS, and C right after its hand-over). No member ever reports an
// outcome it does not know; an operation returns an error (unknown outcome) only when its own
// verbs fail or its context ends. A holder paused past the lease resumes fenced: its CASes
// are from words it read. Messages of a dead queue name acquisitions nobody waits for, and a
// payload overwritten by such a stale writer fails its check (qlock), which a member treats as
// an unknown outcome: it retries.
//
// # Shared lock entries
//
// A structure whose lock entries are a table hashed by key (ptrsync.SharedLock: ds/hybrid's)
// queues several pointers on one entry. Every message that passes a pointer word on (a Granted
// hand-over, an Exec) then carries a tag of the pointer it was read at (ptrsync.HintTag, in the
// Aux bits above the hint bit), and the receiver uses the word only if the tag is its own
// pointer's. An executor's Done, passed on in the Combined messages, carries the address of the
// pointer it changed instead of the word it replaced: each member takes the outcome as its own
// only if that is its own pointer (the structure promises every nonzero word there names a
// block of the key), else it retries (Stats.Unconfirmed). So pointers sharing an entry are never
// combined, a batch's members are those of the executor's pointer, and the combining costs no
// Same read. On RACE and the pointer array (an entry per pointer) the tags are 0 and the
// messages are as before.
//
// # Runtime
//
// Time, sleeps and randomness come from the client's farmem.Runtime; the package starts no
// goroutine; the only Go lock is the Credits mutex, held for map operations alone. Waiting is
// qlock's Wait on the client's own lock node. Everything runs unchanged on the simulator, where
// the lincheck tests inject pauses past the lease, short pauses and crashes.
//
// # The experiment
//
// `farmem repro cider` (package bench/repro) runs CIDER §5.2-5.3 in the simulator against
// this package's synchronizers and ds/ptrsync's optimistic one, and checks the shape the paper
// reports in its tests; its documentation states the setup and how it departs from the paper's.
package cider
