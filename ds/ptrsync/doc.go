// Package ptrsync is the vocabulary of pointer synchronization: how a structure in far memory
// makes the final change of an update or a delete, the CAS of an 8-byte data pointer from the
// word naming the key's current block to the word naming a new block (or to 0). Structures
// (ds/race's slots, the pointer array of bench/ptrarray, an ordered index's CAS-swapped value
// pointers, a proxy's commit) present the pointer as a Target; synchronizers (Optimistic here;
// the CAS spinlock, the far MCS lock and CIDER in ds/cider; lock-based baselines elsewhere)
// implement Synchronizer. Either side can change without the other.
//
// # The exchange
//
// For each update or delete the structure calls Synchronizer.Plan once, before its first round
// trip: the plan says whether the structure writes the new block early (in parallel with its
// lookup) or leaves the write to Target.Install, and whether it reads the pointer's lock entry
// with its lookup. The structure then locates the pointer, reads it, confirms that the word
// read (Target.Old) names a block of the key, and calls Commit with a Target. Commit returns:
//
//   - Committed: the pointer changed from Result.Replaced (a word naming a block of the key,
//     which the structure retires) to the word Install installed.
//   - Combined: the change took effect inside another client's commit: it is linearized just
//     before that commit, which overwrote it, so nobody can observe its value. Its own block
//     was never published (the structure frees it).
//   - Retry: nothing took effect. The structure looks the key up again (reporting it missing
//     if it is gone) and calls Commit with a fresh Target.
//   - an error: the outcome is unknown (a node went down, the context ended). The structure
//     reports it and leaks, rather than frees, the new block.
//
// A synchronizer may also offer Straight: PlanStraight tells the structure that the operation's
// Commit would be Execute from Old and nothing else, and the structure may then make Execute's
// first step itself (the deadline check, then the CAS from Old, with concrete calls rather than
// the Target's methods) and hand it to CommitStraight in place of that Commit, which counts it
// as Commit would and continues a lost CAS as Execute would (ExecuteStep). Later Commits of the
// operation go through Commit. ds/race's cached Update uses it.
//
// # What a synchronizer promises
//
//   - Every change of the pointer is a CAS (Target.Install) whose expected value is a word read
//     during the operation: Old, a word an Install found, or a word another client's CAS saw
//     and passed on (a hint). The structure keeps such a word from naming a reused block (the
//     allocator's epoch pin), so the CAS has no ABA problem, and a CAS fences whoever makes it:
//     a client paused past a lock's lease cannot undo its successor's change.
//   - A word other than Old is used as an expected value only after Target.Same confirmed it
//     names a block of the key, and no CAS is made after Target.Deadline.
//   - A synchronizer belongs to one client (one goroutine), like the structure handle that
//     calls it; state shared by the clients of a compute node (CIDER's credits) is its own
//     business, guarded without holding a Go lock across a verb.
//
// # Costs
//
// Counted in round trips of the structure's Target (Install is one round trip where the block
// sits on the pointer's node and the write rides in the CAS's batch, two on ds/race whose block
// may sit on another node when the write was deferred; Same is free for Old and for a structure
// whose pointer belongs to one key, one block read on ds/race otherwise). Plan makes no verb.
// Optimistic, per Commit:
//
//	Committed, uncontended                 1 Install
//	Committed after k failed CASes         k+1 Installs, k Sames
//	Retry after k failed CASes             k Installs, k Sames (k-1 if the last found it empty)
//	Retry past the deadline                no verb
//
// A lock-based synchronizer adds the acquisition and the release of the pointer's lock entry to
// these (ds/cider states its own: the spinlock's acquisition is a CAS in the round trip that
// reads the pointer, the MCS lock's an enqueue and a hand-over or release); Combined costs its
// member no Install at all.
//
// # Lock entries
//
// A synchronizer that locks says how many bytes of lock entry it needs per pointer
// (Synchronizer.LockSize: 0, or a multiple of 8; the ds/cider locks take qlock.EntrySize, 16).
// The structure keeps the entries, in far memory, zero for a pointer nobody has locked: next to
// the pointer (the pointer array's records) or in an array parallel to its pointers (ds/race's
// per-slot metadata), and hands the entry's address to Commit (Target.Lock) and, when the plan
// asks for it, the entry's bytes as read with its lookup (Target.LockBytes). An entry is never
// moved: when a structure moves a pointer (a split), the moved pointer starts with a zero entry
// and the old one drains (every CAS on the old pointer fails once the structure has cleared it).
// A structure that keeps fewer bytes than LockSize refuses the synchronizer when it opens. A
// structure with no room for an entry per pointer may keep a table of entries hashed by key
// (ds/hybrid's value words) and mark its targets SharedLock: several pointers then queue on one
// entry, and the synchronizers pass words and outcomes between clients of the same pointer only.
//
// # Runtime
//
// Time comes from the client's farmem.Runtime (Target.Memory().Runtime()); nothing here starts a
// goroutine or holds a Go lock, so synchronizers run unchanged on the simulator.
package ptrsync
