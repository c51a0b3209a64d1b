// Package rdma is farmem's network transport: far memory in memory nodes on other machines
// (farmemd processes), reached over a pluggable data path — the tcp provider, in pure Go, or an
// ibverbs provider over rdma-core where a NIC exists — with compute processes that serve their
// own regions to each other.
//
// # Processes
//
// A memory node is a [Server] (what farmemd runs): it owns a region (anonymous memory, a shm
// file, a regular file or a device-DAX device) and applies verbs to it, with no application
// logic; it serves zeroed memory and never writes it itself. A compute process calls [Dial]
// with a [Cluster] and gets a [Fabric] hosting one compute node, whose region lives in the
// process and is served on its own listener, so a Wait on it is woken by the write itself.
//
// # Cluster file
//
// [ParseCluster] reads a line format ('#' starts a comment):
//
//	memory 1 10.0.0.1:7070              # memory <id> <host:port> [size=<bytes>]
//	memory 2 10.0.0.2:7070 size=4GiB    # a stated size lets processes start while it is down
//	registry 1                          # the node keeping compute membership (default: lowest id)
//	secret-file secret                  # the cluster secret, relative to this file
//	down-timeout 1s                     # unanswered ops fail with ErrNodeDown after this
//	lease 10s                           # a compute node's membership lease
//	clients-per-node 64                 # compute region layout; every process must agree
//	slice-size 16KiB
//	shared-size 1MiB
//	# compute 1 10.0.1.1:7100           # optional: a fixed set of compute nodes
//
// Without compute lines, each process joins at Dial: the registry node hands it the lowest free
// compute id with a lease, which it renews, learning the members, and leaves on Close.
// Membership uses the registry node's CPU; the data path never does.
//
// # Protocol and security
//
// Frames are internal/wire's: versioned (a peer of another protocol version is refused at the
// handshake, with both versions in the error), pipelined (up to Options.MaxOutstanding per
// connection), a batch in one frame or several. The window is per connection, so per client and
// node: a frame that finds it full waits in the connection's backlog, sent in order as answers
// free slots, and Post returns at once, so a hung node never holds up a client's posts to other
// nodes (what waits is bounded by the down timeout, which fails it). Every connection starts with a
// challenge-response on the cluster secret (HMAC-SHA256 over nonces from both sides; the secret
// never crosses the wire, and the node proves it too). The node then gives the client its
// region's size, key and incarnation; every op carries the key and is checked for key, bounds
// and alignment before anything of its batch applies. A wrong key fails with [ErrBadKey]
// (wrapping farmem.ErrOutOfRange). A node met with another incarnation than the one the fabric
// adopted is fenced (farmem.ErrNodeLost) until Fabric.Adopt; a node that only paused keeps its
// incarnation and is re-dialed with backoff. A refused client gets [ErrAuth] or [ErrRefused]; a
// malformed frame closes only its connection.
//
// # A memory node's bounds
//
// A Server's memory is bounded whatever its clients send: beyond the region, [ConnBufferBound]
// per authenticated connection (at most ServerOptions.MaxConns) and, on a shared connection,
// the bindings of at most 1024 channels to clients (about 100 KiB allocated at most), a few
// KiB per handshake (at most ServerOptions.MaxUnauth) and two node-wide budgets of
// ServerOptions.MaxBuffer for large requests and replies (a connection that would exceed one
// waits, unread). A batch whose results
// would exceed the frame limit is refused per op with wire.ErrReplyTooLarge. A client that
// sends without reading is closed at the write timeout; handshakes have a short deadline and
// the oldest silent one is pushed out first, so strangers cannot lock out a client that holds
// the secret. [Server.Metrics] reports the counters.
//
// # Order, costs and faults
//
// Each client has its own connection (on ibverbs, queue pair) to each node it uses, or, with
// Options.SharedConns, its own channel of the connection its fabric shares to a memory node
// (see Shared connections); a node applies a connection's batches one at a time in arrival
// order, so a batch's ops apply in order and one client's batches to one node in posting
// order. A batch is one round trip, as farmem.Stats counts it. A lost unsignaled op is never
// silent: the client's next op to that node fails with ErrNodeDown.
//
// One-way messages (Send) to another compute node are Msg frames (wire version 3) on the
// client's connection, each holding a slot of the connection's outstanding window until the
// target acknowledges it with an empty CallReply after its handler ran; the sender does not
// wait for that, only for a free slot (when MaxOutstanding messages and requests are in flight)
// and for the connection's handshake. The target counts messages against the connection's
// limit on outstanding Calls (a peer exceeding it is a protocol violation that closes its
// connection) and queues them in its transport.Inbox, a FIFO lane per sender; a message that
// finds the inbox full (transport.InboxMessages or transport.InboxBytes) is dropped, as at-most-
// once delivery allows, and acknowledged. A message to the client's own node joins the inbox
// directly, waiting for room.
//
// # Shared connections
//
// With Options.SharedConns, the clients of a Fabric share one connection to each memory node
// (wire protocol version 4, purpose PurposeShared; Calls, messages and verbs to compute nodes
// keep a connection per client). Each client has a channel on it, numbered by the process,
// which an Attach frame binds to the client before the channel's first request and a Detach
// frame unbinds when the client closes or gives up on the node; every request carries its
// channel in its id's top 16 bits. Each client keeps its own window of outstanding requests,
// its own order and its own failures: the node checks every op as before and applies a
// channel's requests as its client's (partitions and silences are per client), answers a
// request on a channel not bound (never attached, detached, or past its limit of 1024
// channels per connection, or a client bound on another channel) with a Detached frame and
// applies nothing of it, and treats a second Attach of a bound channel, an Attach of client 0
// or a Call as a protocol violation that closes the connection. The secret is proven once per
// connection, and a process names the clients it carries, as a client names itself in its
// hello on a connection of its own; the node keeps one channel per client on a connection.
//
// A client's failure stays its own: closing or crashing it detaches its channel; a client the
// node stops answering while it answers the connection (a partition of that client) fails
// after the down timeout alone, its requests reported failed from their expiry on, as for a
// silent node, and its next op attaches a new channel; when a silence ends, the node detaches
// the channels of the clients whose frames it dropped and says so, and their outstanding
// requests fail at once (nothing after a dropped frame applies). Answers to a closed
// channel's requests still in flight are dropped. Only a failure of the connection itself
// (the node crashed, hung, or broke the protocol) fails every channel on it.
//
// Writing: a client whose request is its only one outstanding on the node writes its frame
// itself at once, as on a connection of its own; a poster that finds another writing appends
// its frame to the output buffer and leaves, and the writer writes what was appended before
// it returns, in one more write per round: concurrent clients' frames share writes, with no
// timer and no goroutine hand-off. Reading: one goroutine at a time holds the connection's
// reader role and completes every answer it reads, whichever client's; a client whose answer
// is due waits, and a reader leaving the role with requests outstanding hands it to one of
// the waiting clients rather than to a goroutine of the connection's own. The node reads the
// requests of several clients in one read and writes their answers in one write. A lone client
// on a shared connection makes the same system calls as on its own: one write and one read on
// each side per round trip (cmd/farmemd's TestSyscallsPerRoundTripShared).
//
// Sharing is off by default because it pays only with many clients busy at once. Measured
// on a 2-CPU AMD EPYC VM, clients of one process reading 64 bytes one verb at a time each
// against one farmemd on loopback, both modes alternated in one run (cmd/farmemd's
// TestClientsBench): with 16 clients, sharing served 1.1 to 2.1 times the operations per
// second, at 0.6 to 0.9 times the client's CPU time per operation and 0.3 to 0.7 times the
// node's, with 0.16 to 0.2 reads and 0.5 to 0.9 writes per operation on the client's side and
// 0.13 to 0.55 of each on the node's (one and one without sharing); with 4 clients it served
// 0.45 to 0.95 times the operations, at 1.3 to 1.8 times the client's CPU time per operation
// (the node's: 0.7 to 0.95 times): the clients' exchanges, no longer independent, go in
// waves, which leaves the CPUs idle between them and costs wake-ups of halted virtual CPUs and
// of the goroutines the reader hands answers to (the Go runtime's own wake-ups of its threads
// add eventfd reads and writes to the client's calls). With 8 clients the two modes served
// about as much, with 32 sharing served 2.8 to 3.7 times as much (0.1 calls per operation on
// the node), with 2 about 0.8 times, and with one client the two modes cost the same. Turn it
// on for processes that keep many clients (8 or more, on that VM) busy on a node, or when the
// node's CPU time or its number of connections is what runs out.
//
// # System calls
//
// On the tcp provider a round trip costs one write and one read system call on each side. A memory
// node serves each connection inside one raw read of its socket (syscall.RawConn), as an event loop
// does: it reads what arrived, serves every whole frame, writes their replies in one write, and
// waits for the poller's next readiness event before it reads again, so it never makes the read
// that finds nothing that Go's net.Conn makes before it waits (the poller is edge triggered: a byte
// arriving after a read that drained the socket raises a new event). A lone verb's goroutine takes
// its connection's reader role before it sends: its read of the socket writes the frame and, the
// frame holding every outstanding request, waits for the answer's readiness event before reading. A
// signaled batch to one node posted while no one reads its connection is lazy: it waits in the
// connection's output buffer, and posting it costs no system call and wakes no goroutine; the
// buffer is written when the client next blocks in the fabric (a wait on any batch, verb, Call or
// word; the wait on that batch itself writes it inside its read of the socket, as for a lone verb),
// by the connection's next reader before it waits on the socket, or with the next other frame. So a
// client that posts and then waits costs one write and one read per round trip, and one that keeps
// k batches outstanding costs about one write and one read per k, as a pipelining client that
// flushes only before it blocks. A batch whose poster never waits in the fabric is written once the
// monitor finds the connection with nothing read for one of its looks, within a quarter of the down
// timeout. On linux these reads and writes of the sockets are raw system calls
// (syscall.RawSyscall): they never block, and entering them the scheduler's way woke its monitor
// thread on each round trip of a process that had gone idle. Frames posted while a reader holds the
// role leave when it next waits on the socket or leaves the role, and otherwise the connection's
// writer goroutine writes everything queued in one call; replies are written when no whole request
// is left to serve. None of this changes the node's bounds above: its first write of a reply queue
// arms no timer, and a queue the socket does not take at once is written within the write timeout.
//
// A process may let its readers spin ([SetSpin], or the FARMEM_SPIN environment variable, such as
// 50us; off by default): then a reader that finds its socket empty (a client's connection with
// requests outstanding, a node's connection waiting for the next; with several requests in
// flight only while the process's recent yields show free CPUs) first keeps reading it, yielding its CPU (sched_yield) between reads, for up to the
// spin limit before it parks in the poller, so that an answer that comes within the limit needs no
// wake-up of a sleeping thread. Only one reader of a process spins at a time, only with GOMAXPROCS
// above 1 and on Linux, and not for a while after a spin that went unanswered (a back-off that
// doubles with each miss in a row) or whose yield found its CPU taken by other work for more than
// 20µs (spin.go). A lone round trip then costs its write and read plus the reads that found nothing
// and the yields between them (one to four more reads on each side on a loaded 2-CPU VM), and each
// side keeps a CPU busy while the exchange goes on; with several requests in flight, the
// waits that spin add their empty reads to the calls above (about one read per batch with 8
// outstanding on an idle 2-CPU VM). It trades CPU time for latency: on a loaded 2-CPU VM a lone read's p50 fell by a
// fifth and the client's CPU time per read rose by about a third (spin.go has the figures), which
// is why it is off unless asked for. [SpinCounts] reports the waits that spun and the time spent
// spinning.
//
// A node that stops answering is detected by the client after the down timeout (quiet
// connections are pinged, so a slow Call handler is not taken for a dead node); a refused or
// reset connection fails at once. Nothing waits longer than the down timeout plus an eighth of
// it, and other nodes keep serving.
//
// # Late application
//
// A node that is paused (SIGSTOP, a long GC or swap storm) keeps the frames its socket received
// and reads them when it resumes. So that a request the client saw fail does not take effect
// then, every batch frame carries an expiry: the client's wall-clock post time plus its down
// timeout (the post reads only the monotonic clock; its wall time adds an offset to the wall
// clock refreshed at least every 100 ms, so a step of the client's wall clock counts toward S
// below until the next refresh; the node's check reads its clock the same way). The node compares it with its own wall clock before applying anything of the batch
// and refuses an expired batch whole (each signaled op fails with wire.ErrExpired, which wraps
// farmem.ErrNodeDown; the node's metrics count it under BatchesRefused["expired"]). The client,
// giving up on a silent node, reports each of its outstanding requests failed only from that
// request's expiry on. The bound, assuming the client's and node's clocks differ by at most S:
// no request the client saw fail with ErrNodeDown is applied later than its post time plus the
// down timeout plus S (a batch checked just before its expiry is applied within the time one
// batch takes; on the tcp provider the node reads its clock once for the batches that came in
// one read of the socket, at the first of them, so a later one of them is applied within the
// time that serving the batches before it in that read takes, at most 64 KiB of requests).
// Keep S well below the down timeout (NTP or PTP; milliseconds); a node whose
// clock runs ahead refuses requests early, one whose clock lags stretches the bound by the lag.
// The expiry also bounds a request's wait in a healthy but overloaded node's queue: one that
// reaches the node more than the down timeout after its post is refused, never applied late.
// A connection the node closed or reset fails at once: the node reads nothing more from it.
// Closing a client fails its outstanding requests at once with farmem.ErrClosed; those too are
// refused after their expiry. The bound holds on the tcp provider; on ibverbs the NIC applies
// work requests without the node's CPU, and a request is bounded only by the queue pair's
// retry timeout. [Injector] injects transport.FaultInjector's faults into
// in-process Servers and Fabrics, and cuts a node off from whole compute processes
// (Injector.PartitionNodes, a partition of the data path); nodes started with
// ServerOptions.AllowFaults accept [RemoteFault].
//
// # Providers
//
// The data path is a provider behind an internal interface (connect a client's queue pair to a
// node, post a batch in order, report each op's outcome), registered from its own build-tagged
// file; handshake, membership, Calls, Wait and faults are shared and always over tcp.
//
// # The ibverbs provider
//
// Provider "ibverbs" (builds with -tags rdma on Linux with cgo; elsewhere
// farmem.ErrNotSupported) puts the data path to memory nodes on RDMA. Options.Device and
// ServerOptions.Device (else the DeviceEnv variable) pick the device port,
// NAME[:PORT[:GID-INDEX]]. A memory node registers its mapped region (never the Go heap), and
// the NIC applies clients' verbs without the node's CPU; RC queue pairs are set up over the
// authenticated control connection. Compute regions are not registered: verbs and Calls to
// compute nodes stay on tcp.
//
// A batch's ops to one node are chained work requests posted with one doorbell. Every verb is
// one work request and one round trip, except MaskedCAS: upstream libibverbs has no masked
// atomics, so a partial mask is a CAS loop that costs one more round trip per retry (counted in
// Stats), and later ops to that node wait until it settles. Fences are set only where an RC
// queue pair could let an op overtake a READ or atomic, and only what is needed is signaled.
// Work with no completion for the down timeout fails with ErrNodeDown; an error completion
// kills the queue pair (a remote access error is ErrBadKey) and the next op connects anew.
// CrashAfter is not supported on the NIC's data path.
//
// Atomics act in the NIC's byte order: the provider refuses devices without host-endian atomics
// and big-endian hosts, so remote words are little-endian as the contract says. The NIC's
// atomics are atomic only among themselves, so a memory node's words must not also serve tcp
// clients' atomics.
package rdma
