// Package local is the in-process transport: memory nodes and compute nodes live in this
// process on the Go heap, so the race detector sees every access a structure makes around them.
// It is the transport of unit tests: it can add latency and jitter, tear long reads for real,
// report plain writes over atomic words (strict mode), and inject every fault of
// [transport.FaultInjector].
//
// Memory nodes have ids 1..MemoryNodes; compute node c (1..ComputeNodes) has id
// farmem.ComputeID(c).Node(). Every compute node is hosted by the one Fabric.
//
// Timing: the fabric runs on the wall clock. A batch to one node takes Latency (+ up to Jitter)
// from post to completion, its ops applied halfway. With no latency or jitter, a verb to a
// reachable node runs inline in the caller and costs tens of nanoseconds.
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
	// MemoryNodes is the number of memory nodes (default 1, at most farmem.MaxMemoryNode).
	MemoryNodes int
	// MemorySize is the size in bytes of each memory node (default 16 MiB); MemorySizes, if set,
	// gives each node's size instead and sets the node count.
	MemorySize  uint64
	MemorySizes []uint64
	// ComputeNodes is the number of compute nodes (default 1).
	ComputeNodes int
	// ClientsPerNode is the number of client slots per compute node, Call handlers included
	// (default 64).
	ClientsPerNode int
	// MaxHandlers is how many Call handlers a compute node runs at once (default 8); that many
	// of its client slots are reserved for them.
	MaxHandlers int
	// SliceSize is each client's slice of its compute node's region (default 16 KiB, rounded
	// up to 64 bytes).
	SliceSize uint64
	// SharedSize is the size of each compute node's shared area (default 1 MiB).
	SharedSize uint64
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
	if o.MemoryNodes == 0 {
		o.MemoryNodes = 1
	}
	if o.MemorySize == 0 {
		o.MemorySize = 16 << 20
	}
	if o.ComputeNodes == 0 {
		o.ComputeNodes = 1
	}
	if o.ClientsPerNode == 0 {
		o.ClientsPerNode = 64
	}
	if o.MaxHandlers == 0 {
		o.MaxHandlers = 8
	}
	if o.SliceSize == 0 {
		o.SliceSize = 16 << 10
	}
	o.SliceSize = (o.SliceSize + 63) &^ 63
	if o.SharedSize == 0 {
		o.SharedSize = 1 << 20
	}
	if o.DownTimeout == 0 {
		o.DownTimeout = 200 * time.Millisecond
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	switch {
	case o.MemoryNodes < 0 || o.MemoryNodes > int(farmem.MaxMemoryNode):
		return fmt.Errorf("local: %d memory nodes: %w", o.MemoryNodes, farmem.ErrInvalid)
	case o.ComputeNodes < 0 || o.ComputeNodes > int(farmem.MaxComputeID):
		return fmt.Errorf("local: %d compute nodes: %w", o.ComputeNodes, farmem.ErrInvalid)
	case o.MaxHandlers < 1 || o.ClientsPerNode <= o.MaxHandlers:
		return fmt.Errorf("local: %d client slots cannot hold %d handlers and a client: %w", o.ClientsPerNode, o.MaxHandlers, farmem.ErrInvalid)
	case o.ComputeNodes*o.ClientsPerNode > 0xffff:
		return fmt.Errorf("local: %d compute nodes x %d slots exceed 16-bit client ids: %w", o.ComputeNodes, o.ClientsPerNode, farmem.ErrInvalid)
	case o.Latency < 0 || o.Jitter < 0 || o.DownTimeout < 0:
		return fmt.Errorf("local: negative duration: %w", farmem.ErrInvalid)
	}
	for i := range o.MemoryNodes {
		size := o.MemorySize
		if len(o.MemorySizes) > 0 {
			size = o.MemorySizes[i]
		}
		if size < 64 || size > farmem.MaxOffset+1 {
			return fmt.Errorf("local: memory node size %d: %w", size, farmem.ErrInvalid)
		}
	}
	computeSize := farmem.ComputeHeaderSize + uint64(o.ClientsPerNode)*o.SliceSize + o.SharedSize
	if computeSize > farmem.MaxOffset+1 {
		return fmt.Errorf("local: compute region of %d bytes: %w", computeSize, farmem.ErrInvalid)
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
	f.topo = farmem.Topology{
		ClientsPerNode: opts.ClientsPerNode,
		SliceSize:      opts.SliceSize,
		DownTimeout:    opts.DownTimeout,
	}
	for i := range opts.MemoryNodes {
		size := opts.MemorySize
		if len(opts.MemorySizes) > 0 {
			size = opts.MemorySizes[i]
		}
		n := newNode(f, farmem.NodeID(i+1), size)
		f.nodes[n.id] = n
		f.topo.Nodes = append(f.topo.Nodes, farmem.NodeInfo{ID: n.id, Role: farmem.RoleMemory, Size: n.size})
	}
	computeSize := f.topo.SharedBase() + opts.SharedSize
	for c := range opts.ComputeNodes {
		n := newNode(f, farmem.ComputeID(c+1).Node(), computeSize)
		n.initCompute(opts)
		f.nodes[n.id] = n
		f.compute = append(f.compute, n)
		f.topo.Nodes = append(f.topo.Nodes, farmem.NodeInfo{ID: n.id, Role: farmem.RoleCompute, Size: n.size})
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
	if c != nil && f.hasPartitions.Load() {
		f.mu.Lock()
		p := f.partitions[partition{c.info.ID, n.id}]
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
