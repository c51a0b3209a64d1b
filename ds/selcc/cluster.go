package selcc

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/nodestate"
)

// GCL is a global cache line: the address of its latch word in far memory; its body follows.
type GCL farmem.Addr

// Latch returns the line's latch word.
func (g GCL) Latch() farmem.Addr { return farmem.Addr(g) }

// Body returns the address of the line's body.
func (g GCL) Body() farmem.Addr { return farmem.Addr(g).Add(8) }

// String names the line by its address.
func (g GCL) String() string { return "gcl@" + farmem.Addr(g).String() }

// Cluster is SELCC on one fabric: its options and each hosted compute node's cache (frames,
// local latches, the invalidation handler), opened once with [Open]. Clients of any hosted
// compute node use it through a [Client].
type Cluster struct {
	opts   Options
	set    *nodestate.Set[*node]
	rt     farmem.Runtime
	fabric farmem.Fabric // opens the client that takes over a client's holds (see Recovery)

	closed atomic.Bool
}

// Open opens SELCC on every compute node fabric hosts: the frames in each node's shared area
// (alloc/nodearea) and the handler of invalidations in farmem.OwnerSELCC's block. Two Clusters
// cannot share a fabric's nodes at once (the handler's method id is taken).
func Open(ctx context.Context, fabric farmem.Fabric, opts Options) (*Cluster, error) {
	o, err := opts.withDefaults(fabric.Topology())
	if err != nil {
		return nil, err
	}
	c := &Cluster{opts: o, rt: fabric.Runtime(), fabric: fabric}
	set, err := nodestate.Open(ctx, fabric, fabric.Hosted(), farmem.OwnerSELCC,
		func(ctx context.Context, env *nodestate.Env) (*node, error) { return openNode(ctx, c, env) })
	if err != nil {
		return nil, err
	}
	c.set = set
	return c, nil
}

// Options returns the cluster's options with defaults filled in.
func (c *Cluster) Options() Options { return c.opts }

// Close releases every line every node holds, writing dirty lines back (so far memory then
// holds every write, a line handed over late included: see Recovery), and removes the
// handlers. It is idempotent. No client may start an
// access once Close began; a frame still latched (a handler finishing an invalidation, or a
// guard not yet released) is waited for, with Memory.Wait, before its line is released.
func (c *Cluster) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	return c.set.Close()
}

// NodeStats are counters of one compute node's cache.
type NodeStats struct {
	// Handled counts invalidations that changed this node's hold; Dropped those it dropped
	// (not held, stale, or in use locally).
	Handled, Dropped uint64
	// Evicted counts lines released by eviction; Leases lines given up by the γ budget, of
	// which Granted went to a waiting writer by priority hand-over.
	Evicted, Leases, Granted uint64
	// LatchWaits counts client accesses that found a frame's local latch held and waited for
	// it (a hit that waits still makes no round trip); LatchWait is their total time, and
	// WriterWait the part of it spent behind a client of this node that held the frame's
	// latch exclusively for a global exclusive acquisition (a write fetching or upgrading the
	// line, invalidations included: the local latch is held across it, as in the paper's
	// hierarchical latch, §6.1).
	LatchWaits            uint64
	LatchWait, WriterWait time.Duration
}

// NodeStats returns node's counters.
func (c *Cluster) NodeStats(n farmem.NodeID) NodeStats {
	st, ok := c.set.Get(n)
	if !ok {
		return NodeStats{}
	}
	return NodeStats{Handled: st.stats.handled.Load(), Dropped: st.stats.dropped.Load(),
		Evicted: st.stats.evicted.Load(), Leases: st.stats.leases.Load(), Granted: st.stats.granted.Load(),
		LatchWaits: st.stats.latchWaits.Load(), LatchWait: time.Duration(st.stats.latchWait.Load()),
		WriterWait: time.Duration(st.stats.writerWait.Load())}
}

// Client is one client's (one goroutine's) handle on the cluster.
type Client struct {
	c     *Cluster
	n     *node
	m     farmem.Memory
	me    farmem.ComputeID
	o     Options
	rt    farmem.Runtime
	flag  farmem.Addr // reply flags: one word per target index
	grant farmem.Addr // the grant word, after the flags
	seq   uint64
	// stale says that a wait on the reply block failed: late answers may still land in it, so
	// the client takes a fresh one once its acquisition ends (see lateanswer.go)
	stale bool
	// selOpen counts the client's open SEL-mode guards.
	selOpen int
	// life is what the client holds, for its node to take over if it loses its access.
	life life
}

// Client returns m's handle. m must be a client of a compute node the cluster is open on
// (farmem.ErrInvalid otherwise). It zeroes m's reply flags (local verbs, no round trip).
func (c *Cluster) Client(ctx context.Context, m farmem.Memory) (*Client, error) {
	info := m.Info()
	n, ok := c.set.Get(info.Node)
	if !ok {
		return nil, fmt.Errorf("selcc: no cache on %v: %w", info.Node, farmem.ErrInvalid)
	}
	cl := &Client{c: c, n: n, m: m, me: info.Node.ComputeID(), o: c.opts, rt: m.Runtime(),
		flag: info.Slice.Add(c.opts.SliceOffset)}
	if n.retiredBlock(cl.flag) {
		// A previous client of the slice left late answers there (see lateanswer.go).
		b, err := n.replyBlock(ctx, m, cl.replyBlock())
		if err != nil {
			return nil, fmt.Errorf("selcc: a reply block for a client of %v: %w", info.Node, err)
		}
		cl.flag = b
	}
	cl.grant = cl.flag.Add(8 * uint64(c.opts.Codec.MaxNodes()))
	if err := m.Write(ctx, cl.flag, make([]byte, 8*c.opts.Codec.MaxNodes())); err != nil {
		return nil, err
	}
	if err := cl.setGrant(ctx, grantClosed); err != nil {
		return nil, err
	}
	// A random start keeps a previous client of this slot's late replies from matching; below
	// 2^40, so the numbers stay within the 48 bits a grant word holds.
	cl.seq = m.Runtime().Rand().Uint64() >> 24
	return cl, nil
}

// Alloc allocates a GCL through a (one round trip for the allocation as alloc documents it,
// plus one to write the zeroed body). Its latch word is zero: freshly claimed far memory is
// zero, and a block alloc hands out again has its first word reset by a CAS (never a plain
// write, since the word is a target of atomics).
func (cl *Client) Alloc(ctx context.Context, a *alloc.Allocator) (GCL, error) {
	addr, err := a.Alloc(ctx, uint64(8+cl.o.LineSize), 64)
	if err != nil {
		return 0, fmt.Errorf("selcc: alloc: %w", err)
	}
	g := GCL(addr)
	var b farmem.Batch
	b.Write(g.Body(), make([]byte, cl.o.LineSize))
	i := b.CAS(g.Latch(), 0, 0) // reads the word: a recycled block's link word
	if err := doAll(ctx, cl.m, &b); err != nil {
		return 0, err
	}
	if w, _ := b.Result(i); w != 0 {
		if _, err := cl.m.CAS(ctx, g.Latch(), w, 0); err != nil {
			return 0, err
		}
	}
	return g, nil
}

// Close forgets the handle; it is idempotent. Lines stay cached on the node.
func (cl *Client) Close() error { return nil }

func (cl *Client) word(ctx context.Context, a farmem.Addr) (uint64, error) {
	var b [8]byte
	if err := cl.m.Read(ctx, a, b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

func (cl *Client) backoff(ctx context.Context, try int) error {
	d := cl.o.Backoff / time.Duration(max(try, 1))
	if d <= 0 {
		return ctx.Err()
	}
	// jitter in [d/2, d] keeps retries of several nodes from locking step
	d = d/2 + time.Duration(cl.rt.Rand().Int64N(int64(d/2)+1))
	return cl.rt.Sleep(ctx, d)
}

func timeDuration(p uint32) time.Duration { return time.Duration(p) }

func durationOf(t farmem.Time) time.Duration { return time.Duration(t) }

// detached returns a context for work that must finish even if ctx ends (a release, a reply
// awaited, a verb whose outcome must be known). It is a fresh background context rather than
// context.WithoutCancel(ctx): the simulator finds its own contexts through context values, which
// WithoutCancel keeps, so a detached child would still end at the parent's virtual deadline.
func detached(context.Context) context.Context { return context.Background() }
