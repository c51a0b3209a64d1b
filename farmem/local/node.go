package local

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
	"github.com/farmem/farmem/internal/wordmem"
)

const (
	stateUp int32 = iota
	stateHung
	stateCrashed
)

// node is a memory node or a compute node's region.
type node struct {
	f     *Fabric
	id    farmem.NodeID
	size  uint64
	words []uint64
	mem   wordmem.Mem
	state atomic.Int32
	// crashAfter is -1, or the number of ops the next batch applies before the node crashes.
	crashAfter atomic.Int64
	// atomicBits has one bit per word ever targeted by an atomic (strict mode only).
	atomicBits []atomic.Uint64
	// inc is the incarnation of the node's memory, adopted the one the fabric's verbs may
	// reach: they differ after a Restart until Adopt (see adopt.go).
	inc, adopted atomic.Uint64
	fenced       atomic.Bool // Fence: lost until Adopt whatever the incarnations say
	// life is held shared by every verb while it checks its incarnation and applies its ops,
	// and exclusively by Restart while it changes inc and wipes the memory: a restart is atomic
	// to verbs (adopt.go).
	life sync.RWMutex

	// Compute nodes only.
	watch    transport.Waiters
	ctx      context.Context // ends when the node crashes or the fabric closes
	cancel   context.CancelFunc
	handlers *transport.Handlers[*client]
	inbox    *transport.Inbox // one-way messages (send.go)
}

func newNode(f *Fabric, id farmem.NodeID, size uint64) *node {
	size &^= 7
	n := &node{f: f, id: id, size: size, words: make([]uint64, size/8)}
	n.mem = wordmem.FromWords(n.words)
	n.crashAfter.Store(-1)
	n.inc.Store(f.newIncarnation())
	n.adopted.Store(n.inc.Load())
	if f.opts.Strict {
		n.atomicBits = make([]atomic.Uint64, (size/8+63)/64)
	}
	return n
}

func (n *node) initCompute(o Options) {
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.handlers = transport.NewHandlers[*client](o.MaxHandlers)
	n.inbox = transport.NewInbox(transport.InboxMessages, transport.InboxBytes, n.deliver)
	for i := range o.MaxHandlers {
		c, err := n.openClient(o.ClientsPerNode - o.MaxHandlers + i)
		if err != nil {
			panic(err) // unreachable: the slots were just created free
		}
		n.handlers.AddClient(c)
	}
}

func (n *node) setState(s int32) {
	if n.state.Swap(s) == s {
		return
	}
	if s == stateCrashed && n.cancel != nil {
		n.cancel()
		n.watch.WakeAll()
		for _, c := range n.f.clients.Clients() {
			if c.node == n {
				c.crash()
			}
		}
	}
}

// openClient opens a client in slot (a handler client's), or in the first free application
// slot when slot < 0.
func (n *node) openClient(slot int) (*client, error) {
	f := n.f
	c, err := f.clients.Open(n.id, slot, func(info farmem.ClientInfo) (*client, *transport.Counters) {
		c := &client{f: f, node: n, handler: slot >= 0}
		c.Init(info, f.rt.Fork(), c.single, c.Post)
		return c, &c.Counters
	})
	if err != nil {
		return nil, err
	}
	// A new client starts from a clean slice.
	for off := c.ClientInfo.Slice.Offset(); off < c.ClientInfo.Slice.Offset()+f.opts.SliceSize; off += 8 {
		n.mem.Store(off, 0)
	}
	return c, nil
}

// apply executes one checked op and returns its result. It is where strict mode and Wait
// wake-ups happen.
func (n *node) apply(op *farmem.Op, between func()) (uint64, error) {
	off := op.Addr.Offset()
	switch op.Kind {
	case farmem.OpRead:
		n.mem.ReadAt(op.Buf, off, between)
		return 0, nil
	case farmem.OpWrite:
		if n.atomicBits != nil && n.overlapsAtomic(off, uint64(len(op.Buf))) {
			n.f.violations.Add(1)
			return 0, fmt.Errorf("local: write of %d bytes at %v: %w", len(op.Buf), op.Addr, farmem.ErrAtomicOverlap)
		}
		n.mem.WriteAt(op.Buf, off, between)
		n.watch.Notify(off, uint64(len(op.Buf)))
		return 0, nil
	default:
		if n.atomicBits != nil {
			w := off / 8
			n.atomicBits[w/64].Or(1 << (w % 64))
		}
		prev := n.mem.Atomic(op, off)
		n.watch.Notify(off, 8)
		return prev, nil
	}
}

func (n *node) overlapsAtomic(off, length uint64) bool {
	if length == 0 {
		return false
	}
	for w := off / 8; w <= (off+length-1)/8; w++ {
		if n.atomicBits[w/64].Load()&(1<<(w%64)) != 0 {
			return true
		}
	}
	return false
}

func (n *node) forgetAtomic(off, length uint64) {
	if n.atomicBits == nil || length == 0 || off >= n.size {
		return
	}
	end := min(off+length, n.size)
	for w := off / 8; w < (end+7)/8; w++ {
		n.atomicBits[w/64].And(^uint64(1 << (w % 64)))
	}
}

// between returns the hook called between the words of a long access, or nil.
func (f *Fabric) between() func() {
	switch {
	case f.opts.Tearing:
		return runtime.Gosched
	case f.opts.Jitter > 0:
		return f.maybeYield
	}
	return nil
}

func (f *Fabric) maybeYield() {
	f.jitterMu.Lock()
	y := f.jitter.Int64N(8) == 0
	f.jitterMu.Unlock()
	if y {
		runtime.Gosched()
	}
}
