package cxl

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/farmem/farmem/atomics"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
	"github.com/farmem/farmem/numaemu"
)

// Fabric states.
const (
	stateUp int32 = iota
	stateHung
	stateCrashed
	stateClosed
)

// Fabric is one compute node attached to a region: a farmem.Fabric hosting that one node, and a
// transport.FaultInjector over this process's view of the region. See the package doc.
type Fabric struct {
	m        *mapping
	rt       *transport.WallRuntime
	cid      farmem.ComputeID
	id       farmem.NodeID
	gen      uint32
	token    uint64 // what this node writes as a mailbox owner: cid<<32 | gen
	seg      *seg
	policy   Policy
	uncached bool
	inject   time.Duration
	injector *numaemu.Injector
	// checkEvery is how often a party waiting on a peer re-checks that the peer is alive.
	checkEvery time.Duration

	state    atomic.Int32
	ctx      context.Context // Call handlers' context: ends when the node crashes or closes
	cancel   context.CancelFunc
	stop     chan struct{} // closed when the node crashes or closes
	stopOnce sync.Once
	bg       sync.WaitGroup // the renewer and the dispatcher
	serving  sync.WaitGroup // handler goroutines

	handlers *transport.Handlers[*client]
	clients  *transport.Registry[*client]
	inbox    *transport.Inbox // one-way messages to this node (send_linux.go)
}

var (
	_ farmem.Fabric           = (*Fabric)(nil)
	_ transport.FaultInjector = (*Fabric)(nil)
)

// Open maps the region at path (sharing this process's mapping if it has one) and attaches a
// compute node to it: the usual way in. Close the Fabric to detach; the mapping goes with the
// last handle.
func Open(path string, o OpenOptions) (*Fabric, error) {
	r, err := OpenRegion(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.Attach(o)
}

// Attach attaches a new compute node to the region: it claims the lowest free compute id with
// a CAS in the region's compute-id table, zeroes the node's region, resets its mailboxes and
// starts renewing its lease. A process may attach several times; each Fabric is a compute node
// of its own.
func (r *Region) Attach(o OpenOptions) (*Fabric, error) {
	if r.closed.Load() {
		return nil, fmt.Errorf("cxl: attach to a closed region handle: %w", farmem.ErrClosed)
	}
	if o.Policy != Coherent && o.Policy != Uncached {
		return nil, fmt.Errorf("cxl: policy %v: %w", o.Policy, farmem.ErrInvalid)
	}
	m := r.m
	if err := m.acquire(); err != nil {
		return nil, err
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	h := m.h
	f := &Fabric{
		m:          m,
		rt:         transport.NewWallRuntime(o.Seed),
		policy:     o.Policy,
		uncached:   o.Policy == Uncached,
		inject:     m.placement.Inject,
		checkEvery: max(h.DownTimeout/4, time.Millisecond),
		stop:       make(chan struct{}),
		handlers:   transport.NewHandlers[*client](int(h.MaxHandlers)),
		clients:    transport.NewRegistry[*client](int(h.ClientsPerNode), h.SliceSize, int(h.MaxHandlers)),
	}
	f.inbox = transport.NewInbox(transport.InboxMessages, transport.InboxBytes, f.runMessage)
	if o.Profile != nil {
		f.inject = o.Profile.Added()
	}
	if f.inject > 0 {
		f.injector = numaemu.Default()
	}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	var err error
	claimed := false
	if gerr := atomics.Guard(func() {
		var cid farmem.ComputeID
		var gen uint32
		if cid, gen, err = m.claim(); err != nil {
			return
		}
		claimed = true
		f.cid, f.id, f.gen, f.token = cid, cid.Node(), gen, uint64(cid)<<32|uint64(gen)
		f.seg = &m.comp[cid]
		f.reset()
		m.writeIdent(f.seg, gen)
	}); gerr != nil {
		if claimed {
			_ = atomics.Guard(func() { m.setLease(f.seg, f.gen, expCrashed) })
		}
		err = fmt.Errorf("cxl: attach a compute node: %w: %w", farmem.ErrNodeDown, gerr)
	}
	if err != nil {
		m.release()
		return nil, err
	}
	for i := range int(h.MaxHandlers) {
		c, err := f.newClient(int(h.ClientsPerNode)-int(h.MaxHandlers)+i, true)
		if err != nil {
			// Only a memory fault gets here (the slots are free and in range).
			_ = atomics.Guard(func() { m.setLease(f.seg, f.gen, expCrashed) })
			m.release()
			return nil, err
		}
		f.handlers.AddClient(c)
	}
	m.hmu.Lock()
	m.hosted[f.cid] = f
	m.hmu.Unlock()
	f.bg.Add(2)
	go f.renewer()
	go f.dispatcher()
	return f, nil
}

// reset gives a newly claimed node a zeroed region and idle mailboxes. Each mailbox's sequence
// is advanced, so a caller of the id's previous holder finds its mailbox lost.
func (f *Fabric) reset() {
	s := f.seg
	clear(unsafe.Slice((*byte)(s.base), s.size))
	c := f.ctl()
	atomic.StoreUint32(c.slotFreeWaiters(), 0)
	atomic.StoreUint32(c.bellSleepers(), 0)
	for b := range numBuckets {
		atomic.StoreUint32(c.bucketWaiters(b), 0)
	}
	for i := range int(f.m.h.Mailboxes) {
		sl := f.m.slot(s, i)
		st := atomic.LoadUint32(sl.st())
		atomic.StoreUint32(sl.st(), mkSt(stSeq(st)+1, 0, phFree))
		atomic.StoreUint32(sl.sleepers(), 0)
		atomic.StoreUint64(sl.owner(), 0)
	}
	if f.uncached {
		atomics.WriteBack(s.base, uintptr(s.size))
		atomics.WriteBack(s.ctl, uintptr(f.m.h.ctlSize()))
	}
}

func (f *Fabric) ctl() ctlBlock { return ctlBlock{f.seg.ctl} }

// ID returns this fabric's compute node.
func (f *Fabric) ID() farmem.NodeID { return f.id }

// Policy returns the access policy.
func (f *Fabric) Policy() Policy { return f.policy }

// Inject returns the latency injected per verb (and per Call message chunk).
func (f *Fabric) Inject() time.Duration { return f.inject }

// Topology implements farmem.Fabric: every memory node and every compute id of the region.
func (f *Fabric) Topology() *farmem.Topology { return &f.m.topo }

// Hosted implements farmem.Fabric: this fabric's one compute node.
func (f *Fabric) Hosted() []farmem.NodeID { return []farmem.NodeID{f.id} }

// Runtime implements farmem.Fabric: the Unix wall clock.
func (f *Fabric) Runtime() farmem.Runtime { return f.rt }

// Stats implements farmem.Fabric.
func (f *Fabric) Stats() farmem.Stats { return f.clients.Stats() }

// usable reports why the node cannot serve, or nil.
func (f *Fabric) usable() error {
	switch f.state.Load() {
	case stateCrashed:
		return fmt.Errorf("cxl: %v crashed: %w", f.id, farmem.ErrNodeDown)
	case stateClosed:
		return fmt.Errorf("cxl: fabric of %v: %w", f.id, farmem.ErrClosed)
	}
	return nil
}

// stopped reports whether the node has crashed or closed.
func (f *Fabric) stopped() bool { return f.state.Load() >= stateCrashed }

// Open implements farmem.Fabric.
func (f *Fabric) Open(ctx context.Context, node farmem.NodeID) (farmem.Memory, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if node != f.id {
		return nil, fmt.Errorf("cxl: %v is not hosted by this fabric (%v): %w", node, f.id, farmem.ErrInvalid)
	}
	if err := f.usable(); err != nil {
		return nil, err
	}
	return f.newClient(-1, false)
}

// newClient opens a client on slot (the first free application slot when slot < 0) with a
// zeroed slice.
func (f *Fabric) newClient(slot int, handler bool) (*client, error) {
	c, err := f.clients.Open(f.id, slot, func(info farmem.ClientInfo) (*client, *transport.Counters) {
		c := &client{f: f, m: f.m, handler: handler}
		c.Init(info, f.rt.Fork(), c.single, c.Post)
		return c, &c.Counters
	})
	if err != nil {
		return nil, err
	}
	off, size := c.ClientInfo.Slice.Offset(), c.ClientInfo.SliceSize
	if err := atomics.Guard(func() {
		p := unsafe.Add(f.seg.base, off)
		clear(unsafe.Slice((*byte)(p), size))
		if f.uncached {
			atomics.WriteBack(p, uintptr(size))
		}
	}); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("cxl: clear the slice of client %d: %w: %w", c.ClientInfo.ID, farmem.ErrNodeDown, err)
	}
	return c, nil
}

// Handle implements farmem.Fabric.
func (f *Fabric) Handle(node farmem.NodeID, method uint16, h farmem.Handler) error {
	if node != f.id {
		return fmt.Errorf("cxl: %v is not hosted by this fabric (%v): %w", node, f.id, farmem.ErrInvalid)
	}
	if err := f.usable(); err != nil {
		return err
	}
	return f.handlers.Set(method, h)
}

// halt stops the node's background work and wakes everything parked on it: the dispatcher,
// handlers waiting for a caller, and Waits. It does not wait for anything.
func (f *Fabric) halt() {
	f.stopOnce.Do(func() {
		close(f.stop)
		f.cancel()
		f.inbox.Close()
		_ = atomics.Guard(func() {
			c := f.ctl()
			bump(c.bell())
			for b := range numBuckets {
				bump(c.bucketSeq(b))
			}
			for i := range int(f.m.h.Mailboxes) {
				futexWake(f.m.slot(f.seg, i).st())
			}
		})
	})
}

// crash makes the node fail-stop: its lease is marked crashed (every process sees it down at
// once), its clients, Waits and handlers end with ErrNodeDown, and it serves no more Calls.
// The id stays crashed until another attach reclaims it.
func (f *Fabric) crash() {
	for {
		s := f.state.Load()
		if s >= stateCrashed {
			return
		}
		if f.state.CompareAndSwap(s, stateCrashed) {
			break
		}
	}
	_ = atomics.Guard(func() { f.m.setLease(f.seg, f.gen, expCrashed) })
	for _, c := range f.clients.Clients() {
		c.crash()
	}
	f.halt()
}

// Close implements farmem.Fabric: it closes every client, stops serving Calls, waits (up to the
// down timeout) for running handlers, releases the compute id and drops the mapping. It is
// idempotent.
func (f *Fabric) Close() error {
	cs, first := f.clients.Close()
	if !first {
		return nil
	}
	crashed := !f.state.CompareAndSwap(stateUp, stateClosed) && !f.state.CompareAndSwap(stateHung, stateClosed)
	for _, c := range cs {
		_ = c.Close()
	}
	f.halt()
	f.bg.Wait()
	done := make(chan struct{})
	go func() {
		f.serving.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(f.m.h.DownTimeout):
		// A handler ignores its context. Leave the id crashed rather than free: a crashed id
		// is reclaimed the same way, and the handler, once it returns, writes nothing.
		crashed = true
		_ = atomics.Guard(func() { f.m.setLease(f.seg, f.gen, expCrashed) })
	}
	if !crashed {
		_ = atomics.Guard(func() { f.m.setLease(f.seg, f.gen, expFree) })
	}
	f.m.hmu.Lock()
	if f.m.hosted[f.cid] == f {
		delete(f.m.hosted, f.cid)
	}
	f.m.hmu.Unlock()
	f.m.release()
	return nil
}

// renewer renews the node's lease every quarter of the down timeout and reclaims mailboxes of
// its control block whose callers died. A renewal that fails means another process fenced the
// node (it saw the lease expire): the node crashes itself.
func (f *Fabric) renewer() {
	defer f.bg.Done()
	t := time.NewTicker(max(f.m.h.DownTimeout/4, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-f.stop:
			return
		case <-t.C:
		}
		if f.state.Load() == stateHung {
			continue
		}
		ok := false
		err := atomics.Guard(func() {
			if ok = f.m.renew(f.seg, f.gen); ok {
				f.m.reclaimDead(f.seg)
			}
		})
		if err != nil || !ok {
			f.crash()
			return
		}
	}
}
