// Package transport is the kit for writing a farmem transport: the one package a third party
// reads to put far memory of its own (a real CXL device, a new NIC) behind [farmem.Fabric] and
// [farmem.Memory]. Package farmem holds the contract users program against; this package holds
// what every implementation of that contract does the same way, so that the four transports of
// this repository (farmem/local, cxl, rdma, sim) cannot drift apart and a fifth starts from
// the same parts.
//
// # What a transport implements
//
// A transport provides a Fabric (a cluster as one process sees it: its [farmem.Topology], the
// compute nodes it hosts, clients and Call handlers on them, a [farmem.Runtime], Stats) and a
// client type, one goroutine's [farmem.Memory]. It keeps the semantics of farmem's package doc
// (word atomicity, batch order, costs, errors, event-driven Wait, Calls to compute nodes only);
// the conformance suite farmem/farmemtest checks them, and a transport's tests run it. It should
// implement [FaultInjector], which the suite and the structures' fault tests use.
//
// # The parts, in the order a client uses them
//
//   - Admission: Post calls [Admit] first. It applies the rules every transport shares: a closed
//     or crashed client refuses the batch, the batch's shape ([CheckBatch]) and every op against
//     its node's size ([CheckOp]) are checked, and a refused batch applies nothing ([Rejected]:
//     the bad ops fail with their error, the others with farmem.ErrAborted). Wait is admitted by
//     [AdmitWait] (the same refusal, its arguments checked by [CheckWait], the Wait counted), a
//     Call's arguments are checked by [CheckCall]; an op to an unknown node fails with
//     [NoSuchNode].
//   - Completion: [NewPendingOn] returns the farmem.Pending that Post hands out, carrying the
//     client's runtime (which runs its completion hook, farmem.Pending.Then), and the
//     [Completer] through which the transport reports each op's outcome, from any goroutine;
//     the first outcome of an op wins. Two rules keep farmem.Pending.WaitNodes and the hook
//     meaningful: a transport never blocks Post on one node (a full window or queue to a hung
//     node must not hold up ops to the others), and it reports an op failed with
//     farmem.ErrNodeDown only once the op can no longer take effect, or from a bound it states
//     (rdma's request expiry). The waiter parks on a [Parker]: [NewChanParker] on the
//     wall clock, the simulator's own in virtual time. A transport that runs a whole batch in
//     the caller of Do records outcomes with [SetResult] and needs no Pending. One that
//     allocates the Pending with its parker ([InitPendingOn]) may set the same one up again for
//     the batch's next post once the last is over ([Recycled], [KeepPending]), so that a batch
//     posted over and over allocates nothing.
//   - Atomics: [Apply] is the one definition of what CAS, FAA and MaskedCAS leave behind.
//   - Costs: each client keeps [Counters] (CountBatch or CountOp when posting, CountResult per
//     answer, CountCall, CountWait); a fabric's Stats sum them, closed clients included, which
//     [Registry] does. A one-op batch costs one atomic addition to count; a transport that
//     completes a run of answers together counts their bytes once ([Counters.ReceiveAhead],
//     then [Counters.CountResultAhead] per answer, before its op completes). A batch the
//     client's own goroutine runs inline is counted by that goroutine alone
//     ([Counters.CountAhead], [Counters.CountTally], [Counters.CountLone],
//     [Counters.CountDone]), into words only it writes, with plain loads and stores
//     (atomics.AddOwned) instead of locked additions.
//   - Clients: [Registry] hands out client slots and ids ([ClientIDOf], [ClientInfo]), finds a
//     client by id, lists them for Close and crashes, and keeps closed clients' counts.
//     [ClientState], embedded in the client, holds its info, runtime, counters and closed and
//     crashed states ([ClientState.Usable]), and through [Verbs] supplies Read, Write, CAS, FAA,
//     MaskedCAS and Do from the client's one-op runner and Post; [Verbs.PostOne] is the slow
//     path of a single verb.
//   - Calls: [Handlers] keeps a compute node's handlers and the pool of handler clients that
//     bounds how many run at once; [Handlers.Serve] runs one, turning a panic into an error.
//     A handler's error reaches the caller as [RemoteError], its sentinel carried as a [Code]
//     across a wire or a shared mapping. [SetHandler] is Handle's one rule (a method already
//     registered on the node is refused; nil removes).
//   - One-way messages: [CheckSend] validates a Send, [Counters.CountMessage] counts it on the
//     sender; an [Inbox] per node queues messages in one FIFO lane per sender, runs each lane
//     one message at a time through [Handlers.ServeMessage] (which counts failures on the
//     callee with [Counters.CountMessageFailure]), and bounds what is queued (Put waits for
//     room). The simulator keeps the same rules in virtual time on its own queues.
//   - Faults and ordering on the wall clock: [Queues] keep one client's batches to a node in
//     posting order when they run on goroutines, one queue per node, so a hung node stalls only
//     its own; [Changes] and [AwaitReach] make an op to a hung or partitioned node wait,
//     event-driven, until it is reachable again or its down timeout passes, and then fail it
//     unapplied.
//   - Shape: [Shape] is the cluster shape every transport's options embed (memory nodes,
//     compute nodes, client slots, handlers, slice and shared sizes), with visible defaults
//     ([Shape.EnsureDefaults]), its checks, and the [farmem.Topology] it gives.
//   - Wait: a transport that serves a region from its own process's memory parks each Wait
//     on [Waiters] (Add, then Remove) and calls [Waiters.Notify] with the bytes every write or
//     atomic touches there; the woken Wait re-reads its word. A shared mapping (cxl) or the
//     simulator wakes its waiters its own way.
//   - Naming: [MethodName] renders a method id in errors and logs; [RoleOf] is the role a node
//     id's encoding gives it, for checking what a peer claims.
//   - Time: [WallRuntime] is the farmem.Runtime of transports on the wall clock.
//
// Costs: on a verb's path everything here is a few atomic operations or one short critical
// section, and nothing allocates but a Pending where one is needed; listing a Registry's
// clients (for Close and crashes) sorts them.
package transport
