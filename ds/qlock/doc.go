// Package qlock is a far MCS queue lock (ShiftLock's design, without its reader-writer mode):
// the lock entry lives in far memory, each client waits in its own lock node in its slice of
// its compute node's region, and the lock passes from client to client by one-sided writes
// into those nodes, so a queue of waiters costs the memory node nothing while they wait. It is
// the lock under ds/cider, which also uses its messages to run global write combining.
//
// # Use
//
//	l, err := qlock.New(m, qlock.Options{})       // one per client (farmem.Memory)
//	a, _, err := l.Lock(ctx, entry)                // entry: a zeroed, 8-aligned 16-byte word pair
//	... critical section; protected writes are CASes from the value read (see Fencing) ...
//	err = a.Release(ctx, 0, 0)
//
// Lower level, for protocols that pass the lock along with other meaning (ds/cider):
// Locker.Enqueue, Acquisition.Await (for Granted, Exec, Done or Combined messages),
// Acquisition.Successor and AwaitSuccessor, Acquisition.Send, Acquisition.Release.
//
// # Layout
//
// Words are little-endian. A lock entry (EntrySize = 16 bytes, zero when free):
//
//	0   lock word: tail ticket (45 bits) | closed << 45 | generation (18 bits) << 46
//	8   epoch: advanced (FAA) by every hand-over to a waiting successor
//
// A ticket names one acquisition: the client id (16 bits) and the client's acquisition number
// (SeqBits = 29 bits, counted modulo 2^29 from a random start). A lock node (NodeSize = 32
// bytes at Options.Offset of the client's slice; a peer finds it from a ticket with
// Topology.ClientSlice, no round trip):
//
//	0   grant word: kind (3 bits) << 61 | acquisition number << 32 | check (32 bits)
//	8   payload word A (Msg.Word)
//	16  payload word B: ticket (Msg.From) | aux (19 bits) << 45
//	24  link word: 1 << 63 | predecessor's number (low 18 bits) << 45 | successor's ticket
//
// The check is a 32-bit digest of the kind, the number and both payload words.
//
// # Protocol
//
// Enqueue: one MaskedCAS on the lock word that compares only the closed bit (it must be clear)
// and swaps only the tail (and the closed bit, for a closing acquisition): ShiftLock's
// get-and-set, refused while a closing acquisition is queued. The previous word names the
// predecessor and the generation. If there was one, one WRITE of the link word into the
// predecessor's node (the predecessor's number in it, so a link meant for an earlier
// acquisition of that client is not taken for a current one). Then the client waits with
// farmem.Memory.Wait on its own grant word, for a message that names its acquisition number.
//
// Messages: Send writes payload words A and B, then the grant word, in one batch to the
// receiver's compute node (ordered there, so the receiver sees the payload once it sees the
// grant word): two WRITEs, one round trip. A receiver accepts a grant word only if it names
// its current acquisition number and a kind it waits for; it then reads the payload from its
// own node and checks it against the grant word's check (Msg.Damaged if it fails).
//
// Release: if a successor has linked (a local read), a Granted message to it plus the epoch
// FAA in the same batch (one round trip: two writes to its compute node, one FAA to the
// entry's memory node). Otherwise one CAS of the lock word from this acquisition's value to
// "free, same generation"; if it fails because a successor swapped the tail meanwhile, wait
// for its link and hand over.
//
// Costs, uncontended (asserted exactly by the package's tests): Lock 1 MaskedCAS, Release 1 CAS (2 round trips,
// 2 memory-node verbs). Queued: 1 MaskedCAS and the link WRITE to acquire, and the hand-over
// (2 WRITEs to the successor's compute node, 1 FAA) to release; waiting costs the memory node
// nothing but the liveness reads below.
//
// # Recovery without a memory-node CPU
//
// A queue is a linked list through client memory, so a client that dies or stalls while it
// holds the lock (or while it waits, since it then never passes the lock on, or between its
// enqueue and its link) stops the queue. Recovery is client-driven and uses only verbs:
//
//   - Lease on the epoch. Every hand-over to a waiting successor advances the epoch. A client
//     waiting (for the lock, for a message, or for a successor's link) reads the entry (one
//     READ of both words) every Options.Check; if the epoch has stood still for
//     Options.Lease of fabric time since it first saw that value, the queue is stuck.
//     Only times the client took itself are compared, so no clock skew enters. A holder must
//     pass the lock on well within the lease (ds/cider's critical sections take a few round
//     trips); a lock freed with nobody waiting advances nothing, since nobody is watching.
//   - Reset by CAS. The client that finds the queue stuck CASes the lock word from the value
//     it just read to "no tail, not closed, generation + 1". The CAS fails if the word changed
//     (a new tail), and the client looks again at its next check. A reset needs no memory-node
//     CPU (there is no lock-reset RPC, and a CXL device has no CPU).
//   - Everyone notices. Every client of the old queue sees the generation change at its next
//     check and abandons its acquisition (ErrReset); waiters enqueue again in the new
//     generation, and a holder learns that it lost the lock from its Release. Messages still
//     sent within the dead queue name acquisition numbers nobody waits for any more, so they
//     are ignored (a message from a writer stalled across exactly a multiple of 2^29 of its
//     receiver's acquisitions could be taken for a current one; a link, across 2^18).
//     A stale writer can overwrite a word that a current message used, which costs only
//     liveness (that receiver waits until the next reset) or is caught by the payload check.
//
// # Fencing
//
// A holder that was only paused (descheduled, a GC pause, PauseClient in the simulator) and
// resumes after its lock was reset still believes it holds the lock; a check of its lease
// before writing cannot help, since it may stall again between the check and the write. So
// the protected data must fence it: every protected write is a CAS from the value the holder
// read under the lock (with a version in the word, or a word that never repeats, such as a
// pointer to a block that cannot be reused while the holder's epoch pin lasts). A resumed
// holder's write then fails if anyone wrote since it read, and succeeds only if its critical
// section can be ordered where it read (the simulated tests pause a holder past its lease,
// and show a plain write losing updates there). ds/cider's pointer changes are all such CASes.
//
// # Closing acquisitions
//
// Enqueue with closing set queues an acquisition that no other can join behind until it
// releases (its Enqueue sets the closed bit; later Enqueues fail with ErrClosedEntry, having
// changed nothing). ds/cider queues deletes this way, so that a delete is always the last of
// its queue.
//
// # Runtime
//
// Time comes only from the client's farmem.Runtime; the package starts no goroutine and takes
// no Go lock, so it runs unchanged on the simulator. Waiting is farmem.Memory.Wait on the
// client's own words (event-driven), never a poll of far memory; the liveness reads happen
// once per Options.Check.
package qlock
