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
// [ErrBadKey] (which wraps farmem.ErrOutOfRange, like RDMA's remote access error): it is what a
// client holding the key of a node's earlier incarnation gets after the node restarted, so a
// stale client cannot scribble on the new memory. A refused client gets [ErrAuth] or
// [ErrRefused] with the node's reason. A malformed frame closes only its connection, with a
// logged reason (log/slog) and an Error frame to the peer.
//
// # Order, costs and faults
//
// Each client has its own connection to each node it uses (like an RC queue pair per client
// and node). A node applies a connection's batches one at a time in arrival order, so the ops
// of a batch apply in order, each seeing the earlier ones, and one client's batches to one
// node apply in posting order. An unsignaled op gets no result; if a connection fails while
// unsignaled ops on it are unconfirmed, the client's next op to that node fails with
// ErrNodeDown, so a lost unsignaled op is never silent. MaskedCAS is one atomic at the node:
// one round trip. Costs are counted as farmem.Stats says; a batch is one round trip.
//
// A node that stops answering (killed, SIGSTOPped, partitioned) is detected by the client: a
// connection with requests outstanding and nothing received for the down timeout fails, and
// its requests with ErrNodeDown; quiet connections are pinged after a quarter of it, so a
// slow Call handler on a live node is not mistaken for a dead one. A refused or reset
// connection fails at once. Nothing waits longer than the down timeout plus an eighth of it
// (the monitor's period); other nodes keep serving.
//
// For tests, [Injector] injects every fault of farmem.FaultInjector into in-process Servers
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
package rdma
