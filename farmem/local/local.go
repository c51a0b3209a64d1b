// Package local is the in-process transport: memory nodes and compute nodes live in this
// process on the Go heap, so the race detector sees every access a structure makes around them.
// It is the transport of unit tests: it can add latency and jitter, tear long reads for real,
// report plain writes over atomic words (strict mode), inject every fault of
// [transport.FaultInjector] and partitions of a node from whole compute nodes
// (Fabric.PartitionNodes), and restart a memory node with new, zeroed memory and a new
// incarnation (Fabric.Restart; farmem.Restarts: the node is fenced with farmem.ErrNodeLost
// until Adopt). A restart is atomic to verbs: a verb applies to the memory of the incarnation
// adopted when it was posted, wholly before the restart's wipe, or fails with ErrNodeLost
// (adopt.go).
//
// Memory nodes have ids 1..MemoryNodes; compute node c (1..ComputeNodes) has id
// farmem.ComputeID(c).Node(). Every compute node is hosted by the one Fabric.
//
// Timing: the fabric runs on the wall clock. A batch to one node takes Latency (+ up to Jitter)
// from post to completion, its ops applied halfway. With no latency or jitter, a verb to a
// reachable node runs inline in the caller and costs tens of nanoseconds.
//
// One-way messages (Send) join the target node's transport.Inbox (a FIFO lane per sender, at
// most transport.InboxMessages messages and transport.InboxBytes bytes queued per node; a
// sender that finds it full waits until ctx ends) and run after half the latency, on a handler
// client. A message to a crashed node fails at once; one to a hung node waits in the inbox and
// runs if the node resumes within the down timeout, else it is dropped; one across a partition
// is dropped.
//
// It is built from the kit in farmem/transport: its Options embed transport.Shape, its client
// slots are a transport.Registry, its clients embed transport.ClientState.
package local

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// Options configure a local fabric. The zero value gives one memory node and one compute node.
type Options struct {
	// Shape is the cluster's shape: nodes, their sizes, client slots and handlers (see
	// transport.Shape for the fields and their defaults).
	transport.Shape
	// MemorySizes, if set, gives each memory node's size instead of MemorySize, and sets
	// MemoryNodes to its length.
	MemorySizes []uint64
	// Latency is the time from posting a batch to a node to its completion (default 0).
	Latency time.Duration
	// Jitter adds a uniformly random delay in [0, Jitter) to each batch, and random yields
	// between the words of long accesses.
	Jitter time.Duration
	// Tearing yields the processor between the words of every access longer than 8 bytes, so
	// that concurrent long reads and writes really interleave word by word.
	Tearing bool
	// Strict makes a plain write that overlaps a word ever targeted by an atomic fail with
	// farmem.ErrAtomicOverlap (unapplied), and records it in Violations.
	Strict bool
	// DownTimeout is how long an op to a hung or partitioned node waits before it fails with
	// farmem.ErrNodeDown (default 200ms).
	DownTimeout time.Duration
	// Seed seeds the runtime's random sources and the jitter (default 1).
	Seed uint64
}

func (o *Options) defaults() error {
	if len(o.MemorySizes) > 0 {
		o.MemoryNodes = len(o.MemorySizes)
	}
	o.EnsureDefaults()
	if o.DownTimeout == 0 {
		o.DownTimeout = 200 * time.Millisecond
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if err := o.Check(); err != nil {
		return fmt.Errorf("local: %w", err)
	}
	if o.Latency < 0 || o.Jitter < 0 || o.DownTimeout < 0 {
		return fmt.Errorf("local: negative duration: %w", farmem.ErrInvalid)
	}
	for _, size := range o.MemorySizes {
		if size < 64 || size > farmem.MaxOffset+1 {
			return fmt.Errorf("local: memory node size %d: %w", size, farmem.ErrInvalid)
		}
	}
	return nil
}

// Fabric is a local cluster. It implements farmem.Fabric and transport.FaultInjector.
type Fabric struct {
	opts  Options
	topo  farmem.Topology
	rt    *transport.WallRuntime
	nodes map[farmem.NodeID]*node
	// mem and compute list the nodes by kind, ascending.
	compute []*node

	clients *transport.Registry[*client]
	changes transport.Changes // notified at every fault change

	mu         sync.Mutex
	partitions map[partition]bool
	// hasPartitions lets the hot path skip the partition map while there are none.
	hasPartitions atomic.Bool

	jitterMu sync.Mutex
	jitter   interface{ Int64N(int64) int64 }

	violations atomic.Int64
	adoptions  atomic.Uint64 // see adopt.go
}

type partition struct {
	client farmem.ClientID
	node   farmem.NodeID
}

var _ farmem.Fabric = (*Fabric)(nil)
var _ transport.FaultInjector = (*Fabric)(nil)

// New returns a local fabric.
func New(opts Options) (*Fabric, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	f := &Fabric{
		opts:       opts,
		rt:         transport.NewWallRuntime(opts.Seed),
		nodes:      make(map[farmem.NodeID]*node),
		partitions: make(map[partition]bool),
		clients:    transport.NewRegistry[*client](opts.ClientsPerNode, opts.SliceSize, opts.MaxHandlers),
	}
	f.jitter = f.rt.NewRand()
	f.topo = opts.Topology(opts.DownTimeout)
	for i := range f.topo.Nodes {
		info := &f.topo.Nodes[i]
		size := info.Size
		if k := int(info.ID) - 1; info.Role == farmem.RoleMemory && k < len(opts.MemorySizes) {
			size = opts.MemorySizes[k]
		}
		n := newNode(f, info.ID, size)
		info.Size = n.size
		f.nodes[n.id] = n
		if info.Role == farmem.RoleCompute {
			n.initCompute(opts)
			f.compute = append(f.compute, n)
		}
	}
	return f, nil
}

// Topology implements farmem.Fabric.
func (f *Fabric) Topology() *farmem.Topology { return &f.topo }

// Hosted implements farmem.Fabric: every compute node.
func (f *Fabric) Hosted() []farmem.NodeID { return f.topo.ComputeNodes() }

// Runtime implements farmem.Fabric.
func (f *Fabric) Runtime() farmem.Runtime { return f.rt }

// Stats implements farmem.Fabric.
func (f *Fabric) Stats() farmem.Stats { return f.clients.Stats() }

// Violations returns the number of strict-mode violations seen so far.
func (f *Fabric) Violations() int64 { return f.violations.Load() }

// Open implements farmem.Fabric.
func (f *Fabric) Open(ctx context.Context, id farmem.NodeID) (farmem.Memory, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n, err := f.computeNode(id)
	if err != nil {
		return nil, err
	}
	return n.openClient(-1)
}

// Handle implements farmem.Fabric.
func (f *Fabric) Handle(id farmem.NodeID, method uint16, h farmem.Handler) error {
	n, err := f.computeNode(id)
	if err != nil {
		return err
	}
	return n.handlers.Set(method, h)
}

func (f *Fabric) computeNode(id farmem.NodeID) (*node, error) {
	if f.clients.Closed() {
		return nil, fmt.Errorf("local: fabric: %w", farmem.ErrClosed)
	}
	n := f.nodes[id]
	if n == nil || !id.IsCompute() {
		return nil, fmt.Errorf("local: %v is not a compute node of this fabric: %w", id, farmem.ErrInvalid)
	}
	if n.state.Load() == stateCrashed {
		return nil, fmt.Errorf("local: %v: %w", id, farmem.ErrNodeDown)
	}
	return n, nil
}

// Close implements farmem.Fabric: every client is closed and every node stops serving.
func (f *Fabric) Close() error {
	clients, first := f.clients.Close()
	if !first {
		return nil
	}
	for _, c := range clients {
		_ = c.Close()
	}
	for _, n := range f.nodes {
		n.setState(stateCrashed)
	}
	f.changes.Notify()
	return nil
}

// reach says how client c currently sees node n.
func (f *Fabric) reach(c *client, n *node) transport.Reach {
	switch n.state.Load() {
	case stateCrashed:
		return transport.Down
	case stateHung:
		return transport.Silent
	}
	if n.inc.Load() != n.adopted.Load() || n.fenced.Load() {
		return transport.Lost
	}
	if c != nil && f.hasPartitions.Load() {
		f.mu.Lock()
		p := f.partitions[partition{c.ClientInfo.ID, n.id}]
		f.mu.Unlock()
		if p {
			return transport.Silent
		}
	}
	return transport.Reachable
}

// awaitReach blocks until c can reach n, failing with ErrNodeDown if n is crashed or stays
// silent until deadline, or with ctx's error.
func (f *Fabric) awaitReach(ctx context.Context, c *client, n *node, deadline time.Time) error {
	return transport.AwaitReach(ctx, n.id, deadline, func() (transport.Reach, <-chan struct{}) {
		ch := f.changes.Chan()
		return f.reach(c, n), ch
	})
}

// delay returns the time a batch to one node takes: latency plus jitter.
func (f *Fabric) delay() time.Duration {
	d := f.opts.Latency
	if f.opts.Jitter > 0 {
		f.jitterMu.Lock()
		d += time.Duration(f.jitter.Int64N(int64(f.opts.Jitter)))
		f.jitterMu.Unlock()
	}
	return d
}
