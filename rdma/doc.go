// Package rdma is farmem's network transport: far memory in memory nodes on other machines
// (farmemd processes), reached over a pluggable data path — the tcp provider here, in pure Go;
// an ibverbs provider over rdma-core where a NIC exists — with compute processes that serve
// their own regions to each other.
//
// # Processes
//
// A memory node is a [Server] (what farmemd runs): it owns a region (anonymous memory, a
// /dev/shm file, a regular file or a device-DAX device) and applies verbs to it, with no
// application logic. It serves zeroed memory and never writes it itself; the node header at
// offset 0 is formatted by package alloc through ordinary verbs.
//
// A compute process calls [Dial] with a [Cluster] and gets a [Fabric] (a farmem.Fabric) hosting
// one compute node: its region lives in the process and is served on the process's own
// listener, so peers' verbs and Calls reach it directly, and a Wait on it is woken by the
// write itself, never by polling a memory node.
//
// # Cluster file
//
// A cluster file is a line format: a keyword and its fields, separated by blanks; '#' starts a
// comment. [ParseCluster] reads it:
//
//	# two memory nodes; compute processes join dynamically
//	memory 1 10.0.0.1:7070              # memory <id> <host:port> [size=<bytes>]
//	memory 2 10.0.0.2:7070 size=4GiB    # a stated size lets processes start while it is down
//	registry 1                          # the memory node keeping compute membership (default: lowest id)
//	secret-file secret                  # the cluster secret, relative to this file
//	down-timeout 1s                     # unanswered ops fail with ErrNodeDown after this (default 1s)
//	lease 10s                           # a compute node's membership lease (default 10s)
//	clients-per-node 64                 # compute region layout (defaults 64, 16KiB, 1MiB);
//	slice-size 16KiB                    # every process of the cluster must agree on it
//	shared-size 1MiB
//	# compute 1 10.0.1.1:7100           # optional: a fixed set of compute nodes
//
// Compute ids are dense and nonzero. If the file lists compute nodes, they are the cluster's
// compute nodes and each process names its own with Options.ComputeID. Otherwise each process
// joins at Dial: it sends a control-plane JOIN to the registry memory node with its listen
// address and region key, receives the lowest free compute id (or the one it asked for) with a
// lease, renews it every third of the lease (learning the members each time), and leaves on
// Close. A peer unknown to a process is looked up with a LIST on first use. Membership uses the
// registry node's CPU; the data path never does.
//
// # Protocol and security
//
// Frames are internal/wire's: versioned binary frames, each with a request id, pipelined (up
// to Options.MaxOutstanding requests per connection), each batch in one frame or, if it is
// larger than the frame limit, in several consecutive ones. Every connection starts with a
// challenge-response on the cluster secret (HMAC-SHA256 over fresh nonces from both sides; the
// secret never crosses the wire, and the node proves it too). After it the node tells the
// client its region's size and key; every op carries the key, and the node checks each op's
// key, bounds and alignment before applying anything of its batch. A wrong key fails with
// [ErrBadKey] (which wraps farmem.ErrOutOfRange, like RDMA's remote access error), so a client
// holding the key of a node's earlier incarnation cannot scribble on the new memory. A Fabric
// does not get that far: the Welcome also carries the node process's incarnation (a random
// 64-bit id drawn at its start), and a node met with another incarnation than the one the
// fabric adopted is fenced, its verbs failing with farmem.ErrNodeLost, until Fabric.Adopt (see
// "Restarts" in adopt.go; a node that only paused comes back with the same incarnation and is
// usable again on its own, the fabric re-dialing it with backoff). A refused client gets [ErrAuth] or
// [ErrRefused] with the node's reason. A malformed frame closes only its connection, with a
// logged reason (log/slog) and an Error frame to the peer.
//
// # A memory node's bounds
//
// A [Server]'s memory is bounded whatever its clients send, authenticated or not. Beyond the
// region it holds at most [ConnBufferBound] (144 KiB) of buffers per authenticated connection
// (at most ServerOptions.MaxConns), a few KiB per connection in its handshake (at most
// ServerOptions.MaxUnauth), and two node-wide budgets of ServerOptions.MaxBuffer bytes (default
// 64 MiB): request payloads over 32 KiB are charged to one, replies over 32 KiB to the other,
// and a connection that would exceed one waits, reading nothing from its client meanwhile
// (buffers a budget keeps idle for reuse stay charged to it).
// That is about 710 MiB at the defaults, and 2×MaxBuffer plus 144 KiB for any one client. A
// batch whose results would exceed the frame limit the node announces is refused per op with
// wire.ErrReplyTooLarge (wrapping farmem.ErrInvalid) before any reply is built; a Fabric splits
// its batches so that never happens to it. Replies are written whenever 32 KiB queue up and a
// large one before the next request is read, so a client that sends without reading meets a
// full socket, then the write timeout, and is closed: backpressure, never growth. Connections
// in their handshake have their own budget and a short deadline (2s), and at the budget a new
// connection pushes out the oldest one that has not yet spoken, so strangers cannot lock out a
// client that holds the secret. [Server.Metrics] reports the counters (farmemd exports them to
// Prometheus).
//
// # Order, costs and faults
//
// On tcp, each client has its own connection to each node it uses (like an RC queue pair
// per client and node). A node applies a connection's batches one at a time in arrival order,
// so the ops of a batch apply in order, each seeing the earlier ones, and one client's batches
// to one node apply in posting order. An unsignaled op gets no result; if a connection fails
// while unsignaled ops on it are unconfirmed, the client's next op to that node fails with
// ErrNodeDown, so a lost unsignaled op is never silent (the ibverbs provider does the same).
// On tcp, MaskedCAS is one atomic at the node: one round trip. Costs are counted as
// farmem.Stats says; a batch is one round trip.
//
// A node that stops answering (killed, SIGSTOPped, partitioned) is detected by the client: a
// connection with requests outstanding and nothing received for the down timeout fails, and
// its requests with ErrNodeDown; quiet connections are pinged after a quarter of it, so a
// slow Call handler on a live node is not mistaken for a dead one. A refused or reset
// connection fails at once. Nothing waits longer than the down timeout plus an eighth of it
// (the monitor's period); other nodes keep serving.
//
// For tests, [Injector] injects every fault of transport.FaultInjector into in-process Servers
// and Fabrics, so farmemtest.Run runs its fault tests in one process. Against separate farmemd
// processes, tests use signals (kill -9 crashes, SIGSTOP hangs, SIGCONT resumes) and, on nodes
// started with --allow-faults (ServerOptions.AllowFaults), [RemoteFault] for a partition or a
// crash after n ops.
//
// # Providers
//
// The data path is a provider behind an internal interface (provider, qp in provider.go):
// connect gives a client's queue pair to a node, post sends a batch's ops to it in order and
// reports each op's outcome. Everything else — handshake, node info and health, membership,
// Calls (always over tcp), Wait, faults — is shared. A provider other than tcp registers itself
// in the providers table from its own build-tagged file, and its memory-node half in
// serverProviders; it sets up its queue pairs through control requests on the authenticated
// control connection each Fabric keeps to each node (wire.CtlProvider and up).
//
// # The ibverbs provider
//
// Options.Provider and ServerOptions.Provider "ibverbs" (farmemd --provider ibverbs) put the
// data path to memory nodes on RDMA, through rdma-core's libibverbs; it exists in builds with
// -tags rdma on Linux with cgo (elsewhere asking for it fails with farmem.ErrNotSupported).
// Options.Device and ServerOptions.Device (farmemd --device, else the DeviceEnv variable) pick the
// device port, NAME[:PORT[:GID-INDEX]]; by default the first device's port 1, and on RoCE a
// RoCE v2 IPv4-mapped GID.
//
// A memory node registers its mapped region (anonymous memory, a shm or regular file, device
// DAX: never the Go heap) with the NIC, which then applies clients' verbs without the node's
// CPU. A client's first op to a memory node creates a reliable-connected (RC) queue pair and
// sends its endpoint (queue pair number, PSN, LID, GID, MTU) in a control request over the
// authenticated control connection; the node creates a queue pair connected to it and answers
// with its own endpoint and its region's address, rkey, size and region key (a key other than
// the one this fabric learned means the node restarted: the ops fail with farmem.ErrNodeLost,
// as on tcp). Compute nodes' regions live on the Go heap and are never registered: verbs and Calls to
// compute nodes stay on tcp.
//
// One op is one work request; a batch's ops to one node are chained and posted with one
// ibv_post_send (one doorbell), more only if the send queue (128 work requests) or the 1 MiB
// staging ring fills. Per verb:
//
//	verb       work requests                                     round trips counted
//	Read       1 RDMA_READ into staging, copied out on completion 1
//	Write      1 RDMA_WRITE from staging (inline up to 64 bytes)  1
//	CAS        1 ATOMIC_CMP_AND_SWP                               1
//	FAA        1 ATOMIC_FETCH_AND_ADD                             1
//	MaskedCAS  full compare mask: 1 CMP_AND_SWP                   1
//	           empty swap mask: 1 FETCH_AND_ADD of 0              1
//	           otherwise a CAS loop: 1 CMP_AND_SWP guessing the   1, +1 per retry, +1 if signaled
//	           word's bits outside the compare mask are cmp's,    ops of its batch to the same
//	           and 1 more per retry (the word differed only       node follow it (they are sent
//	           outside the mask)                                  once it has settled)
//	Batch      its ops' work requests, chained per node           1 (+ MaskedCAS extras)
//
// Upstream libibverbs has no masked atomics, so MaskedCAS is that CAS loop; until it settles
// nothing posted after it to that node is sent, so later ops observe it. Its extra round trips
// are counted (transport.Counters.AddRoundTrips), per node; its retries' bytes and work requests
// are not (Stats count verbs, not work requests).
//
// IBV_SEND_FENCE is set on a WRITE or atomic that follows a READ or atomic still in flight,
// and on a READ that follows an atomic still in flight: an RC queue pair may let those
// overtake. A READ after a READ, and anything after a WRITE, needs none. Only what is needed
// is signaled: the last work request of a chain holding an op somebody waits for, each
// MaskedCAS attempt, and at least one in 64 work requests and in every half ring of staging,
// so unsignaled ops never fill the send queue; RC completions come in order, so one completion
// retires every work request before it. Completions are polled up to 32 at a time with one
// call, by the waiting goroutine itself when no one else polls (spinning briefly, then
// sleeping from 5µs to 200µs), else by the queue pair's background poller.
//
// If work is in flight and nothing completes for the down timeout, the queue pair fails it
// with ErrNodeDown (the NIC's own transport retries are set to give up within half of it). An
// error completion kills the queue pair: a remote access error fails its op with ErrBadKey
// (which wraps farmem.ErrOutOfRange; bounds are checked before posting, so only a stale key
// gets there), an invalid request with ErrInvalid, anything else with ErrNodeDown; the later
// ops of that batch fail with ErrAborted (ErrNodeDown if the failure was the node's), other
// batches' with ErrNodeDown, and the next op connects a new queue pair. Injected faults reach
// the NIC's data path through the node: Crash destroys its queue pairs, Hang and Partition
// break them (work on them goes unanswered until the down timeout, and the client connects
// anew once the silence ends); CrashAfter cannot stop a NIC after n ops and fails with
// ErrNotSupported.
//
// Atomics: a verbs atomic acts on the remote 8 bytes in the NIC's configured order. mlx5 NICs
// offer big-endian and host-endian atomics; the Linux driver selects host-endian where the NIC
// supports it and then reports IBV_ATOMIC_HCA, else IBV_ATOMIC_NONE. The provider refuses a
// device without atomics and a big-endian host, so remote words are little-endian, as the
// contract says. IBV_ATOMIC_HCA promises atomicity only among the NIC's atomics, not against
// the CPU's: do not also serve a memory node's words to tcp clients' atomics.
//
// The client side is built from the kit in farmem/transport: a Fabric's clients come from a
// transport.Registry and embed transport.ClientState, and its Call handlers run through
// transport.Handlers.
package rdma
