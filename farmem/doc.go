// Package farmem is the vocabulary of far memory, the contract code above the transports
// programs against: addresses, nodes and clients, verbs and batches, the Memory and Fabric
// interfaces every transport implements, the runtime that code above the transports takes time,
// goroutines and randomness from, counted costs, and the sentinel errors. It holds nothing a
// user does not need: what implementing a transport takes (admission checks, completing a
// Pending, counters, client slots, the cluster shape, fault injection, the wall-clock runtime)
// is the kit in farmem/transport.
//
// # Nodes, clients, addresses
//
// An [Addr] is a uint64: the node id in the top 16 bits, a byte offset in the low 48. Offset 0 of
// every node is its header, so the zero Addr is nil. Far memory never holds Go pointers.
//
// Memory nodes and compute nodes share one id space ([NodeID]). A memory node owns memory and runs
// no application code: it serves verbs only, and no structure may depend on its CPU (a CXL device
// has none). A compute node is a process: it has a dense, nonzero [ComputeID], owns a region that
// peers reach with ordinary verbs, and runs [Handler]s for Calls. A client is one goroutine's
// [Memory]; its dense 16-bit [ClientID] is unique in the cluster and maps to the client's slice of
// its compute node's region with no round trip ([Topology.ClientSlice]).
//
// # Semantics
//
// Every transport keeps these, and the conformance suite farmem/farmemtest checks each of them:
//
//  1. Words. Aligned 8-byte accesses never tear. CAS, FAA and MaskedCAS act on aligned 8-byte
//     words, atomically with respect to other atomics. A word that is ever the target of an atomic
//     is written only by atomics, because RDMA promises no more; the local transport has a strict
//     mode that reports any plain write overlapping such a word. FAA wraps modulo 2^64 (a negative
//     delta is its two's complement). MaskedCAS compares (mem & cmpMask) == (cmp & cmpMask) and,
//     if equal, stores (mem &^ swapMask) | (swap & swapMask); it returns the previous word either
//     way. There are no 16-byte atomics.
//  2. Longer data is not atomic. A read longer than 8 bytes may see a concurrent write interleaved
//     word by word. Transports copy word by word; structures detect tears themselves (versions,
//     checksums). The local and sim transports produce real tears on purpose, and tests assert
//     that they happened.
//  3. Order. Within one batch to one node, each op executes after, and observes the effects of,
//     every earlier op of that batch (an RC queue pair with fences where needed). Batches from one
//     client to one node apply in posting order. Nothing is ordered across nodes. When a verb
//     returns, its effect is visible to every client.
//  4. Costs. A batch is one round trip on the caller's critical path; its nodes are reached in
//     parallel. [Stats] counts, deterministically: critical-path round trips; verbs by kind and by
//     target (memory node or compute node); unsignaled verbs; bytes each way; failed CASes; Calls.
//  5. Errors are per op, wrapped with %w around the sentinels: [ErrOutOfRange] (outside every
//     registered region), [ErrMisaligned], [ErrNodeDown] (a crashed, unreachable or hung node,
//     reported within a bounded fabric time, never a hang), [ErrNodeLost] (a node that restarted
//     and lost its memory, fenced until adopted: see [Restarts]), [ErrClosed], and the
//     context's error.
//     No verb panics on bad input, including faults of mapped memory.
//  6. Wait is event-driven with a bounded wake latency: a peer's write wakes it (a futex or
//     spin-then-park on real transports, an event in the simulator), never a sleep-poll loop.
//  7. Call and Send reach compute nodes only. Handlers may issue verbs, nested Calls and Sends;
//     each compute node runs a bounded number of them at once.
//
// An op may be posted unsignaled (fire-and-forget): it is applied before the same client's next op
// to that node, and is never waited for. A batch whose op is rejected (out of range, misaligned,
// malformed) applies nothing: the bad ops fail with their error, the rest with [ErrAborted].
//
// # One-way messages
//
// [Memory.Send] runs a handler on a compute node without waiting for it (SELCC's and FlexKV's
// invalidations): the handler registered with [Fabric.Handle] for the method, whose reply is
// discarded. Its contract, kept by every transport and checked by farmemtest:
//
//   - Cost: Send returns once the transport has taken the message; it is counted in
//     [Stats].Messages and MessageBytes, never as a round trip or a Call. In the simulator a
//     message costs what a Call's request leg costs.
//   - Delivery is at most once. A message to a node that crashes (or is cut off) meanwhile, or
//     that names a method with no handler, is dropped; a handler's error is counted on the
//     callee ([Stats].MessageFailures of its handler client, in its fabric's Stats), never
//     returned. A Send that failed with ErrNodeDown or its context's error may or may not
//     have been delivered.
//   - Order: one client's messages to one node run in the order sent, one at a time; messages
//     of different senders run concurrently (on the node's handler clients), and nothing is
//     ordered between messages and Calls, or across nodes.
//   - Errors at once: ErrInvalid for a memory node, an unknown node or a request over
//     MaxCallBytes; ErrNodeDown for a node already known to be down.
//   - Bounded receivers: a node queues a bounded number of messages whatever its peers send
//     (an inbox per node; on the network transport also each connection's outstanding
//     window). A sender that finds its way full waits, until there is room or its context
//     ends; on the network transport a message that finds the node-wide inbox full is dropped
//     instead (the sender's window having been free). Each transport's doc gives its bounds.
//
// # Method ids
//
// A method id is 16 bits: its high byte names the owner of a block of 256 ids ([MethodOwner],
// whose table of owners is in this package), its low byte the method within the block. Every
// structure takes its ids from its own block, and [Fabric.Handle] refuses a second
// registration of a method on a node (ErrInvalid, naming the owner), so two structures never
// silently take each other's Calls; a nil handler removes a registration. Block 0 is left to
// applications and tests. Per-compute-node state that serves peers (caches, proxies,
// directories) is opened with package farmem/nodestate, which kvstore also uses.
//
// # Quorums and stragglers
//
// [Pending.WaitNodes] waits for every signaled op addressed to each of k nodes of a batch, as a
// replicated write needs, and fails at once when fewer than k nodes can still complete;
// [Pending.Then] runs a hook through the runtime once every op is done or failed, which is when
// the batch and its buffers return to the caller. A node that stops answering never blocks a
// client's posts to other nodes, and an op reported failed with [ErrNodeDown] takes effect, if at
// all, no later than its post time plus the down timeout (plus clock skew where the node checks
// an expiry), so a caller may recycle what the op referred to once that bound has passed.
//
// # Runtime
//
// The fabric provides time ([Runtime.Now], [Runtime.Sleep], timers), [Runtime.Go] for background
// work, seeded random sources, and [Runtime.Compute] to account CPU time. Code in ds/ and kvstore/
// uses only these, never holds a Go lock across a verb or a Wait, and keeps local latches as words
// in its compute node's region awaited with Wait. Context deadlines and leases are in fabric time
// ([Runtime.WithTimeout]). That is what lets the simulator run the same code deterministically.
package farmem
