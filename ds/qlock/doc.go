// Package qlock is a far MCS queue lock (ShiftLock's design, without its reader-writer mode):
// the lock entry lives in far memory, each client waits in its own lock node in its compute
// node's region, and the lock passes from client to client by one-sided writes into those
// nodes, so a queue of waiters costs the memory node nothing while they wait. It is the lock
// under ds/cider, which also uses its messages for global write combining.
//
//	l, err := qlock.New(m, qlock.Options{})  // one per client (farmem.Memory)
//	a, _, err := l.Lock(ctx, entry)           // entry: a zeroed, 8-aligned 16-byte word pair
//	... critical section; protected writes are CASes from the value read (see Fencing) ...
//	err = a.Release(ctx, 0, 0)
//
// Protocols that pass the lock along with other meaning use Locker.Enqueue,
// Acquisition.Await, Successor, AwaitSuccessor, Send and Release.
//
// # Layout
//
// Words are little-endian. A lock entry (EntrySize bytes, zero when free) holds the lock word
// (tail ticket, closed bit, 18-bit generation) and an epoch that every hand-over to a waiting
// successor advances. A ticket is a client id and that client's acquisition number (SeqBits,
// from a random start). A lock node (NodeSize bytes at Options.Offset of the client's slice,
// found from a ticket with no round trip) holds the grant word (kind, acquisition number and a
// 32-bit check of the message), two payload words and the link word naming the successor.
//
// # Protocol
//
// Enqueue swaps the tail with one MaskedCAS that also requires the closed bit clear. If there
// was a predecessor, it writes the link word into the predecessor's node (with the
// predecessor's number, so a stale link is not taken for a current one) and waits with
// farmem.Memory.Wait on its own grant word. Send writes the payload, then the grant word, in
// one ordered batch; a receiver accepts only a grant word naming its current acquisition and a
// kind it waits for, and checks the payload (Msg.Damaged if it fails). Release hands over to a
// linked successor (a Granted message and the epoch's FAA in one batch), else CASes the lock
// word to free; if a successor swapped the tail meanwhile, it waits for the link and hands
// over.
//
// # Costs
//
// Round trips are LockRoundTrips, LinkRoundTrips, ReleaseRoundTrips and HandOverRoundTrips.
//
// # Recovery without a memory-node CPU
//
// A client that dies or stalls while it holds the lock, waits, or sits between its enqueue and
// its link stops the queue. Recovery uses verbs only:
//
//   - Lease on the epoch. A waiting client reads the entry every Options.Check; if the epoch
//     has not moved for Options.Lease of its own clock, the queue is stuck. A holder must pass
//     the lock on well within the lease.
//   - Reset by CAS. That client CASes the lock word from the value it read to "no tail, not
//     closed, generation + 1"; a changed word makes the CAS fail and it looks again later.
//   - Everyone notices. Clients of the old queue see the generation change and abandon their
//     acquisitions (ErrReset); a holder learns it from its Release. Messages within the dead
//     queue name acquisitions nobody waits for and are ignored, barring a writer stalled across
//     exactly a multiple of 2^29 of its receiver's acquisitions (2^18 for a link); a stale
//     write costs only liveness or is caught by the payload check.
//
// # Fencing
//
// A holder that was only paused and resumes after a reset still believes it holds the lock,
// and no lease check before writing can help. So the protected data must fence it: every
// protected write is a CAS from the value read under the lock (a versioned word, or one that
// never repeats, such as a pointer to a block that cannot be reused while the holder's epoch pin
// lasts). ds/cider's pointer changes are all such CASes.
//
// # Closing acquisitions
//
// Enqueue with closing set sets the closed bit, so no acquisition can queue behind it until it
// releases (later Enqueues fail with ErrClosedEntry, having changed nothing). ds/cider queues
// deletes this way.
//
// # Runtime
//
// Time comes only from the client's farmem.Runtime; the package starts no goroutine and takes
// no Go lock, so it runs unchanged on the simulator. Waiting is event-driven on the client's own
// words, never a poll of far memory.
package qlock
