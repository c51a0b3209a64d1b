package farmem

import "context"

// Memory is one client's access to far memory: one goroutine's, not to be shared. Verbs block
// until done; Post does not. See the package doc for the semantics every transport keeps.
type Memory interface {
	// Read copies len(dst) bytes at src into dst. Longer than 8 bytes, it is not atomic.
	Read(ctx context.Context, src Addr, dst []byte) error
	// Write copies src to dst. Longer than 8 bytes, it is not atomic.
	Write(ctx context.Context, dst Addr, src []byte) error
	// CAS swaps the aligned word at a to new if it equals old, and returns the word it found.
	CAS(ctx context.Context, a Addr, old, new uint64) (prev uint64, err error)
	// FAA adds delta (modulo 2^64) to the aligned word at a and returns the word it found.
	FAA(ctx context.Context, a Addr, delta uint64) (prev uint64, err error)
	// MaskedCAS compares (mem & cmpMask) with (cmp & cmpMask); if equal it stores
	// (mem &^ swapMask) | (swap & swapMask). It returns the word it found.
	MaskedCAS(ctx context.Context, a Addr, cmp, cmpMask, swap, swapMask uint64) (prev uint64, err error)
	// Post starts a batch and returns at once. The batch belongs to the transport until every
	// signaled op of it is done. The Pending is valid until the batch is posted again: a
	// transport may hand out the same Pending for the batch's next post.
	Post(ctx context.Context, b *Batch) *Pending
	// Do posts a batch and waits for all of it. It returns the first op error, or ctx's; each
	// op's result is in b.Ops[i]. If it returns because ctx ended, ops may still be in flight
	// and the batch stays the transport's until they are done: do not reuse it.
	Do(ctx context.Context, b *Batch) error
	// Wait blocks until until(word at a) holds and returns that word. a must be an aligned word
	// in the caller's own compute node's region. It is woken by writes and atomics to the word
	// (event-driven, never a sleep-poll loop).
	Wait(ctx context.Context, a Addr, until func(uint64) bool) (uint64, error)
	// Call runs method on compute node node with req and returns the handler's reply.
	Call(ctx context.Context, node NodeID, method uint16, req []byte) ([]byte, error)
	// Send delivers a one-way message: method's handler on compute node node runs with req,
	// and its reply is discarded. Send returns once the transport has taken the message (it
	// does not wait for the handler), so it is no round trip on the caller's critical path;
	// Stats counts it in Messages, never in RoundTrips or Calls. Delivery is at most once:
	// a message to a node that crashes, or that has no handler for method, is dropped, and a
	// handler's error is counted on the callee (Stats.MessageFailures of its handler client),
	// never returned. Messages from one client to one node run in the order sent, one at a
	// time; nothing is ordered across senders or nodes. Send fails at once, with ErrInvalid,
	// for a memory node, an unknown node or a request over MaxCallBytes, and with ErrNodeDown
	// for a node already known to be down. The receiver's queue is bounded: a sender that
	// finds it full waits, until there is room or ctx ends. See the package doc.
	Send(ctx context.Context, node NodeID, method uint16, req []byte) error
	// Stats returns this client's counted costs so far.
	Stats() Stats
	// Info describes this client: its id, compute node and slice.
	Info() ClientInfo
	// Topology returns the cluster as this client knows it.
	Topology() *Topology
	// Runtime returns this client's runtime (clock, Go, its own random source).
	Runtime() Runtime
	// Close releases the client and its slot. It is idempotent; verbs after it fail with
	// ErrClosed.
	Close() error
}

// Handler serves one Call or one-way message (Send) on a compute node. m is a client of that
// compute node that the handler may use for verbs, nested Calls and Sends while it runs; from
// is the caller's client id. For a Call, the returned bytes are the reply (at most
// MaxCallBytes) and an error reaches the caller wrapped in ErrRemote; for a message, the reply
// is discarded and an error is counted on the callee.
type Handler func(ctx context.Context, m Memory, from ClientID, req []byte) ([]byte, error)

// Fabric is an open cluster: it lists the nodes, opens clients on the compute nodes this
// process hosts, and registers Call handlers on them.
type Fabric interface {
	// Topology returns the cluster's nodes and region layout.
	Topology() *Topology
	// Hosted returns the compute nodes this process hosts, ascending.
	Hosted() []NodeID
	// Open returns a new client on hosted compute node node.
	Open(ctx context.Context, node NodeID) (Memory, error)
	// Handle registers h for method on hosted compute node node; a nil h removes method's
	// handler. A method that already has a handler there is refused with ErrInvalid (remove
	// it first to replace it), so two structures that picked the same id fail loudly instead
	// of one silently taking the other's Calls: see [Method] for the namespace of ids.
	Handle(node NodeID, method uint16, h Handler) error
	// Runtime returns the fabric's runtime.
	Runtime() Runtime
	// Stats returns the sum of the Stats of every client this fabric has opened.
	Stats() Stats
	// Close closes every client and releases the fabric. It is idempotent.
	Close() error
}
