package rdma

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
	"github.com/farmem/farmem/internal/wire"
)

// Options configure one compute process's Fabric.
type Options struct {
	// Secret is the cluster secret. If nil, the cluster file's secret-file is read.
	Secret []byte
	// ComputeID is this process's compute id. With compute nodes listed in the cluster file it
	// must name one of them; otherwise 0 claims the lowest free id from the registry, and a
	// nonzero id claims that one.
	ComputeID farmem.ComputeID
	// Listen is the address this process serves its region on: default its cluster-file
	// address, else 127.0.0.1:0 (loopback, a free port).
	Listen string
	// Advertise is the address peers are told to reach this process at (default the
	// listener's address).
	Advertise string
	// MaxHandlers is how many Call handlers run at once (default 8); that many client slots
	// are reserved for them.
	MaxHandlers int
	// DownTimeout overrides the cluster file's down-timeout.
	DownTimeout time.Duration
	// Provider is the data path to memory nodes: "tcp" (the default) or "ibverbs" (a build
	// with -tags rdma; compute nodes are still reached over tcp).
	Provider string
	// Device is the RDMA device port the ibverbs provider uses, "NAME[:PORT[:GID-INDEX]]"
	// (default: the DeviceEnv variable, else the first device, port 1, GID chosen automatically).
	Device string
	// MaxOutstanding bounds the requests one client has unanswered on one node (default 256).
	MaxOutstanding int
	// SharedConns makes the fabric's clients share one connection per memory node (wire
	// version 4): the frames of clients posting at once travel in one write and are answered
	// in one read on each side, and the node serves one connection per process. By default
	// each client has a connection of its own to each node. See the package doc's "Shared
	// connections" for when sharing pays. It applies to the tcp provider's data path (on
	// ibverbs each client keeps its queue pair); Calls and verbs to compute nodes keep a
	// connection per client.
	SharedConns bool
	// Logger receives structured logs (default: none are written).
	Logger *slog.Logger
	// Seed seeds the runtime's random sources (default 1).
	Seed uint64
}

// Fabric is one compute process's view of a cluster: it implements farmem.Fabric. It hosts one
// compute node (its own region, served to peers on its own listener, with its Call handlers),
// and reaches memory nodes and peer compute nodes over the provider's data path.
type Fabric struct {
	cl     Cluster
	opts   Options
	log    *slog.Logger
	rt     *transport.WallRuntime
	secret []byte
	prov   provider
	down   time.Duration

	cid    farmem.ComputeID
	self   farmem.NodeID
	reg    *region
	srv    *srv
	ln     net.Listener
	addr   string
	watch  transport.Waiters
	token  uint64
	static bool

	ctx    context.Context // ends when the fabric closes or crashes
	cancel context.CancelFunc
	topo   atomic.Pointer[farmem.Topology]

	pmu         sync.RWMutex
	peers       map[farmem.NodeID]*peer
	members     []farmem.NodeID // compute nodes, ascending, self included
	lastRefresh time.Time       // of a refresh caused by an unknown compute node

	handlers *transport.Handlers[*client]
	inbox    *transport.Inbox // one-way messages to this node (send.go)
	clients  *transport.Registry[*client]
	crashed  atomic.Bool

	qmu  sync.Mutex
	live map[*tlink]struct{}
	// share: clients share one connection per memory node (Options.SharedConns);
	// shared holds those connections, under smu.
	share  bool
	smu    sync.Mutex
	shared map[farmem.NodeID]*tlink
	wg     sync.WaitGroup
	// bgMu orders starting a background goroutine (wg.Add) with Close's wg.Wait: none starts
	// once bgStopped is set.
	bgMu      sync.Mutex
	bgStopped bool

	adoptions atomic.Uint64 // see adopt.go
}

var _ farmem.Fabric = (*Fabric)(nil)

// peer is a remote node as this fabric knows it.
type peer struct {
	id   farmem.NodeID
	addr string
	size uint64

	mu     sync.Mutex
	key    uint32
	known  bool
	keyA   atomic.Uint64 // key | 1<<32 once known, for keyInfo without the lock (setKey)
	ready  chan struct{} // closed once the key is known
	warned bool
	ctl    *ctlConn
	log    *slog.Logger
	life   peerLife // incarnations and reachability (adopt.go)
}

func newPeer(id farmem.NodeID, addr string, size uint64, log *slog.Logger) *peer {
	return &peer{id: id, addr: addr, size: size, ready: make(chan struct{}), log: log}
}

// learn records what a Welcome says of the node. The region key is learned once: if the node
// restarts, its new key is not adopted, so this fabric's ops cannot land in the new
// incarnation's memory; the new incarnation fences the node (adopt.go) until Adopt.
// It returns the incarnation met before (0: none).
func (p *peer) learn(w wire.Welcome) (prev uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	prev = p.life.seen
	if p.meet(w) {
		return
	}
	if !p.known {
		p.setKey(w.Key)
		if p.size == 0 {
			p.size = w.Size
		}
		close(p.ready)
		return
	}
	if w.Key != p.key && !p.warned && p.log != nil {
		p.warned = true
		p.log.Warn("node restarted: its region key changed, so its memory is new; ops with the old key will be refused", "peer", p.id.String())
	}
	return prev
}

// setKey records the node's region key (p.mu held).
func (p *peer) setKey(key uint32) {
	p.key, p.known = key, true
	p.keyA.Store(uint64(key) | 1<<32)
}

func (p *peer) keyInfo() (uint32, bool) {
	v := p.keyA.Load()
	return uint32(v), v != 0
}

func (p *peer) regionSize() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.size
}

// control returns the peer's control connection.
func (p *peer) control(f *Fabric) *ctlConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctl == nil {
		p.ctl = &ctlConn{p: p, f: f, secret: f.secret, down: f.down}
	}
	return p.ctl
}

// Dial opens a fabric on cl: it authenticates to every memory node and learns its region,
// starts serving this process's compute region, and joins the cluster's compute membership
// (or takes its place among the compute nodes the cluster file lists).
func Dial(ctx context.Context, cl *Cluster, opts Options) (*Fabric, error) {
	if cl == nil {
		return nil, fmt.Errorf("rdma: nil cluster: %w", farmem.ErrInvalid)
	}
	c := *cl
	c.Memory, c.Compute = slices.Clone(cl.Memory), slices.Clone(cl.Compute)
	if err := c.fill(); err != nil {
		return nil, err
	}
	secret := opts.Secret
	if secret == nil {
		if c.SecretFile == "" {
			return nil, fmt.Errorf("rdma: no cluster secret: set Options.Secret or the cluster file's secret-file: %w", farmem.ErrInvalid)
		}
		var err error
		if secret, err = ReadSecret(c.SecretFile); err != nil {
			return nil, err
		}
	}
	if len(secret) < MinSecret {
		return nil, fmt.Errorf("rdma: cluster secret of %d bytes, want at least %d: %w", len(secret), MinSecret, farmem.ErrInvalid)
	}
	prov, err := lookupProvider(opts.Provider)
	if err != nil {
		return nil, err
	}
	if opts.MaxHandlers == 0 {
		opts.MaxHandlers = 8
	}
	if opts.MaxOutstanding == 0 {
		opts.MaxOutstanding = 256
	}
	if opts.Seed == 0 {
		opts.Seed = 1
	}
	if opts.MaxHandlers < 1 || c.ClientsPerNode <= opts.MaxHandlers || opts.MaxOutstanding < 1 || opts.DownTimeout < 0 {
		return nil, fmt.Errorf("rdma: %d client slots, %d handlers, %d outstanding: %w", c.ClientsPerNode, opts.MaxHandlers, opts.MaxOutstanding, farmem.ErrInvalid)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	down := c.DownTimeout
	if opts.DownTimeout > 0 {
		down = opts.DownTimeout
	}
	var tok [8]byte
	_, _ = rand.Read(tok[:])
	f := &Fabric{
		cl: c, opts: opts, log: log, rt: transport.NewWallRuntime(opts.Seed), secret: secret, prov: prov,
		down: down, peers: make(map[farmem.NodeID]*peer), handlers: transport.NewHandlers[*client](opts.MaxHandlers),
		clients: transport.NewRegistry[*client](c.ClientsPerNode, c.SliceSize, opts.MaxHandlers), live: make(map[*tlink]struct{}), share: opts.SharedConns,
		token: binary.LittleEndian.Uint64(tok[:]) | 1, static: len(c.Compute) > 0,
	}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	ok := false
	defer func() {
		if !ok {
			f.cancel()
			if f.ln != nil {
				_ = f.ln.Close()
			}
			f.closePeers()
		}
	}()
	for _, m := range c.Memory {
		f.peers[m.ID] = newPeer(m.ID, m.Addr, m.Size, log)
	}
	if err := f.contactMemory(ctx); err != nil {
		return nil, err
	}

	// This process's compute node: its id, its listener, its region.
	listen := opts.Listen
	if f.static {
		i := slices.IndexFunc(c.Compute, func(n NodeAddr) bool { return n.ID == opts.ComputeID.Node() })
		if opts.ComputeID == 0 || i < 0 {
			return nil, fmt.Errorf("rdma: the cluster lists its compute nodes; Options.ComputeID %d is not one of them: %w", opts.ComputeID, farmem.ErrInvalid)
		}
		if listen == "" {
			listen = c.Compute[i].Addr
		}
		f.cid = opts.ComputeID
		for _, cn := range c.Compute {
			if cn.ID != opts.ComputeID.Node() {
				f.peers[cn.ID] = newPeer(cn.ID, cn.Addr, c.ComputeSize(), log)
			}
			f.members = append(f.members, cn.ID)
		}
		slices.Sort(f.members)
	}
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	if f.ln, err = net.Listen("tcp", listen); err != nil {
		return nil, fmt.Errorf("rdma: compute listener: %w", err)
	}
	f.addr = f.ln.Addr().String()
	if opts.Advertise != "" {
		f.addr = opts.Advertise
	}
	f.reg = heapRegion(c.ComputeSize())
	f.srv = newSrv(0, f.reg, secret, log, limits{maxConns: 4096, maxOutstanding: 1024, maxFrame: wire.DefaultMaxFrame,
		handshake: 5 * time.Second, writeTimeout: 10 * time.Second})
	f.srv.provider = prov.name()
	if !f.static {
		if err := f.join(ctx, opts.ComputeID); err != nil {
			return nil, err
		}
	}
	f.self = f.cid.Node()
	f.log = log.With("compute", f.self.String())
	f.srv.node, f.srv.log = f.self, f.log
	f.srv.onWrite = f.watch.Notify
	f.srv.calls = f.serveCall
	f.srv.msgs = f.serveMessage
	f.inbox = transport.NewInbox(transport.InboxMessages, transport.InboxBytes, f.runMessage)
	f.srv.onCrash = func() { f.crash(errors.New("injected crash")) }
	if uint64(f.cid)*uint64(c.ClientsPerNode) > 0xffff {
		return nil, fmt.Errorf("rdma: compute id %d x %d clients exceeds 16-bit client ids: %w", f.cid, c.ClientsPerNode, farmem.ErrNoSpace)
	}
	for i := range opts.MaxHandlers {
		hc, err := f.openClient(c.ClientsPerNode-opts.MaxHandlers+i, true)
		if err != nil {
			return nil, err
		}
		f.handlers.AddClient(hc)
	}
	f.rebuildTopology()
	go f.srv.serve(f.ln)
	f.wg.Add(1)
	go f.monitor()
	if !f.static {
		f.wg.Add(1)
		go f.renewLoop()
	}
	f.log.Info("fabric open", "addr", f.addr, "memory_nodes", len(c.Memory), "provider", prov.name(), "down_timeout", down)
	ok = true
	return f, nil
}

// contactMemory authenticates to every memory node in parallel and learns its region.
func (f *Fabric) contactMemory(ctx context.Context) error {
	errs := make([]error, len(f.cl.Memory))
	var wg sync.WaitGroup
	for i, m := range f.cl.Memory {
		p := f.peers[m.ID]
		wg.Go(func() {
			var st NodeStatus
			err := p.control(f).rpc(ctx, wire.CtlInfo, struct{}{}, &st)
			switch {
			case err == nil:
			case errors.Is(err, ErrAuth) || errors.Is(err, ErrRefused):
				errs[i] = fmt.Errorf("rdma: memory node %v at %s: %w", m.ID, m.Addr, err)
			case p.regionSize() == 0:
				// err names the node and its address already.
				errs[i] = fmt.Errorf("rdma: memory node %v is unreachable and the cluster states no size for it: %w", m.ID, err)
			default:
				f.log.Warn("memory node unreachable at dial; using the size the cluster file states", "node", m.ID.String(), "err", err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// join claims a compute id from the registry and learns the members.
func (f *Fabric) join(ctx context.Context, want farmem.ComputeID) error {
	var rep joinReply
	req := joinReq{Compute: want, Addr: f.addr, Key: f.srv.key, Token: f.token, Lease: f.cl.Lease}
	if err := f.registry().rpc(ctx, wire.CtlJoin, req, &rep); err != nil {
		return fmt.Errorf("rdma: join the cluster at registry %v: %w", f.cl.Registry, err)
	}
	f.cid = rep.Compute
	f.setMembers(rep.Members)
	return nil
}

func (f *Fabric) registry() *ctlConn {
	f.pmu.RLock()
	p := f.peers[f.cl.Registry]
	f.pmu.RUnlock()
	return p.control(f)
}

// renewLoop renews the membership lease every third of it, learning the members each time.
func (f *Fabric) renewLoop() {
	defer f.wg.Done()
	t := time.NewTicker(f.cl.Lease / 3)
	defer t.Stop()
	for {
		select {
		case <-f.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(f.ctx, f.down)
		var rep joinReply
		req := joinReq{Compute: f.cid, Addr: f.addr, Key: f.srv.key, Token: f.token, Lease: f.cl.Lease}
		err := f.registry().rpc(ctx, wire.CtlRenew, req, &rep)
		if errors.Is(err, farmem.ErrClosed) {
			// The registry forgot the lease (it restarted, or the lease ran out while this
			// process was stopped): claim the same id again.
			err = f.registry().rpc(ctx, wire.CtlJoin, req, &rep)
			if errors.Is(err, farmem.ErrNoSpace) {
				cancel()
				f.log.Error("lost this process's compute id to another process; failing stop", "err", err)
				f.crash(err)
				return
			}
		}
		cancel()
		if err != nil {
			f.log.Warn("membership renewal failed", "err", err)
			continue
		}
		f.setMembers(rep.Members)
	}
}

// setMembers records the compute members the registry listed.
func (f *Fabric) setMembers(ms []member) {
	f.pmu.Lock()
	ids := make([]farmem.NodeID, 0, len(ms))
	for _, m := range ms {
		id := m.Compute.Node()
		ids = append(ids, id)
		if m.Compute == f.cid {
			continue
		}
		if p := f.peers[id]; p == nil || p.addr != m.Addr {
			p = newPeer(id, m.Addr, f.cl.ComputeSize(), f.log)
			p.learn(wire.Welcome{Key: m.Key, Size: f.cl.ComputeSize()})
			f.peers[id] = p
		}
	}
	f.members = ids
	f.pmu.Unlock()
	if f.self != 0 {
		f.rebuildTopology()
	}
}

// refreshMembers asks the registry for the members, at most once per quarter down timeout.
func (f *Fabric) refreshMembers(ctx context.Context) {
	if f.static {
		return
	}
	f.pmu.Lock()
	recent := time.Since(f.lastRefresh) < f.down/4
	if !recent {
		f.lastRefresh = time.Now()
	}
	f.pmu.Unlock()
	if recent {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, f.down)
	defer cancel()
	var rep joinReply
	if err := f.registry().rpc(ctx, wire.CtlList, struct{}{}, &rep); err != nil {
		f.log.Debug("membership refresh failed", "err", err)
		return
	}
	f.setMembers(rep.Members)
}

func (f *Fabric) rebuildTopology() {
	t := &farmem.Topology{ClientsPerNode: f.cl.ClientsPerNode, SliceSize: f.cl.SliceSize, DownTimeout: f.down}
	f.pmu.RLock()
	for _, m := range f.cl.Memory {
		t.Nodes = append(t.Nodes, farmem.NodeInfo{ID: m.ID, Role: farmem.RoleMemory, Size: f.peers[m.ID].regionSize()})
	}
	members := slices.Clone(f.members)
	f.pmu.RUnlock()
	if !slices.Contains(members, f.self) {
		members = append(members, f.self)
	}
	for _, id := range members {
		t.Nodes = append(t.Nodes, farmem.NodeInfo{ID: id, Role: farmem.RoleCompute, Size: f.cl.ComputeSize()})
	}
	slices.SortFunc(t.Nodes, func(a, b farmem.NodeInfo) int { return int(a.ID) - int(b.ID) })
	t.Nodes = slices.CompactFunc(t.Nodes, func(a, b farmem.NodeInfo) bool { return a.ID == b.ID })
	f.topo.Store(t)
}

// peer returns the remote node id as this fabric knows it, refreshing the membership once for
// an unknown compute node.
func (f *Fabric) peer(ctx context.Context, id farmem.NodeID) *peer {
	f.pmu.RLock()
	p := f.peers[id]
	f.pmu.RUnlock()
	if p == nil && id.IsCompute() && id != f.self {
		f.refreshMembers(ctx)
		f.pmu.RLock()
		p = f.peers[id]
		f.pmu.RUnlock()
	}
	return p
}

// sizeOf returns the region size of node id, or an error wrapping ErrOutOfRange if the fabric
// knows no such node.
func (f *Fabric) sizeOf(ctx context.Context, id farmem.NodeID) (uint64, error) {
	if id == f.self {
		return f.reg.size, nil
	}
	if p := f.peer(ctx, id); p != nil {
		return p.regionSize(), nil
	}
	return 0, fmt.Errorf("rdma: no node %v in the cluster: %w", id, farmem.ErrOutOfRange)
}

// monitor fails connections whose node stopped answering and pings quiet ones, every eighth of
// the down timeout.
func (f *Fabric) monitor() {
	defer f.wg.Done()
	tick := max(f.down/8, time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	var qs []*tlink
	for {
		select {
		case <-f.ctx.Done():
			return
		case <-t.C:
		}
		qs = qs[:0]
		f.qmu.Lock()
		for q := range f.live {
			qs = append(qs, q)
		}
		f.qmu.Unlock()
		syncWall()
		now := nanotime()
		for _, q := range qs {
			q.check(now, f.down)
		}
	}
}

// Topology implements farmem.Fabric. Compute nodes that join later appear in later calls.
func (f *Fabric) Topology() *farmem.Topology { return f.topo.Load() }

// Hosted implements farmem.Fabric: this process's one compute node.
func (f *Fabric) Hosted() []farmem.NodeID { return []farmem.NodeID{f.self} }

// ComputeID returns this process's compute id.
func (f *Fabric) ComputeID() farmem.ComputeID { return f.cid }

// Addr returns the address peers reach this process's region at.
func (f *Fabric) Addr() string { return f.addr }

// Runtime implements farmem.Fabric: the wall clock.
func (f *Fabric) Runtime() farmem.Runtime { return f.rt }

// Status asks a node for its health and counters over its control connection.
func (f *Fabric) Status(ctx context.Context, id farmem.NodeID) (NodeStatus, error) {
	if id == f.self {
		return f.srv.status(), nil
	}
	p := f.peer(ctx, id)
	if p == nil {
		return NodeStatus{}, fmt.Errorf("rdma: no node %v: %w", id, farmem.ErrInvalid)
	}
	var st NodeStatus
	err := p.control(f).rpc(ctx, wire.CtlInfo, struct{}{}, &st)
	return st, err
}

// Stats implements farmem.Fabric.
func (f *Fabric) Stats() farmem.Stats { return f.clients.Stats() }

// Open implements farmem.Fabric.
func (f *Fabric) Open(ctx context.Context, id farmem.NodeID) (farmem.Memory, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := f.hosts(id); err != nil {
		return nil, err
	}
	return f.openClient(-1, false)
}

// Handle implements farmem.Fabric.
func (f *Fabric) Handle(id farmem.NodeID, method uint16, h farmem.Handler) error {
	if err := f.hosts(id); err != nil {
		return err
	}
	return f.handlers.Set(method, h)
}

func (f *Fabric) hosts(id farmem.NodeID) error {
	switch {
	case f.clients.Closed():
		return fmt.Errorf("rdma: fabric: %w", farmem.ErrClosed)
	case id != f.self:
		return fmt.Errorf("rdma: %v is not hosted by this process (%v is): %w", id, f.self, farmem.ErrInvalid)
	case f.crashed.Load():
		return fmt.Errorf("rdma: %v crashed: %w", id, farmem.ErrNodeDown)
	}
	return nil
}

// openClient opens a client in slot (the first free application slot when slot < 0).
func (f *Fabric) openClient(slot int, handler bool) (*client, error) {
	c, err := f.clients.Open(f.self, slot, func(info farmem.ClientInfo) (*client, *transport.Counters) {
		c := &client{f: f, handler: handler, qps: make(map[farmem.NodeID]qp), lead: make(chan struct{}, 1)}
		c.Init(info, f.rt.Fork(), c.single, c.Post)
		return c, &c.Counters
	})
	if err != nil {
		return nil, err
	}
	// A new client starts from a clean slice.
	for off := c.ClientInfo.Slice.Offset(); off < c.ClientInfo.Slice.Offset()+c.ClientInfo.SliceSize; off += 8 {
		f.reg.mem.Store(off, 0)
	}
	return c, nil
}

func (f *Fabric) release(c *client) { f.clients.Release(c.ClientInfo.ID, c) }

func (f *Fabric) client(id farmem.ClientID) *client {
	c, _ := f.clients.Get(id)
	return c
}

// Close implements farmem.Fabric: it leaves the membership, closes every client, and stops
// serving the region. It is idempotent.
func (f *Fabric) Close() error {
	cs, first := f.clients.Close()
	if !first {
		return nil
	}
	if !f.static && !f.crashed.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), min(f.down, time.Second))
		req := joinReq{Compute: f.cid, Addr: f.addr, Token: f.token}
		if err := f.registry().rpc(ctx, wire.CtlLeave, req, nil); err != nil {
			f.log.Debug("leaving the membership failed", "err", err)
		}
		cancel()
	}
	for _, c := range cs {
		_ = c.Close()
	}
	f.closeShared(fmt.Errorf("rdma: fabric closed: %w", farmem.ErrClosed))
	f.cancel()
	f.inbox.Close()
	f.srv.shutdown()
	f.srv.wait()
	f.watch.WakeAll()
	f.closePeers()
	f.bgMu.Lock()
	f.bgStopped = true
	f.bgMu.Unlock()
	f.wg.Wait()
	f.log.Info("fabric closed")
	return nil
}

func (f *Fabric) closePeers() {
	f.pmu.RLock()
	defer f.pmu.RUnlock()
	for _, p := range f.peers {
		p.mu.Lock()
		ctl := p.ctl
		p.mu.Unlock()
		if ctl != nil {
			ctl.close()
		}
	}
}

// crash makes this compute node fail-stop: its listener and connections close, its clients,
// Waits and handlers end with ErrNodeDown, and it stops renewing its membership.
func (f *Fabric) crash(why error) {
	if f.crashed.Swap(true) {
		return
	}
	f.log.Warn("compute node down", "why", why)
	f.srv.crash()
	f.cancel()
	for _, c := range f.clients.Clients() {
		c.crash()
	}
	f.closeShared(fmt.Errorf("rdma: %v is down: %w", f.self, farmem.ErrNodeDown))
	f.watch.WakeAll()
}

// serveCall runs method's handler for a Call from client from, on one of the node's handler
// clients (at most MaxHandlers at once). A handler's own error comes back as *handlerError.
func (f *Fabric) serveCall(ctx context.Context, from farmem.ClientID, method uint16, req []byte) ([]byte, error) {
	reply, err := f.handlers.Serve(ctx, f.ctx, f.self, method, from, req)
	if he := (*transport.HandlerError)(nil); errors.As(err, &he) {
		return nil, &handlerError{he.Err}
	}
	return reply, err
}

// applyLocal applies a checked op to this node's own region.
func (f *Fabric) applyLocal(op *farmem.Op) uint64 {
	off := op.Addr.Offset()
	mem := f.reg.mem
	switch op.Kind {
	case farmem.OpRead:
		mem.ReadAt(op.Buf, off, nil)
		return 0
	case farmem.OpWrite:
		mem.WriteAt(op.Buf, off, nil)
		f.watch.Notify(off, uint64(len(op.Buf)))
		return 0
	}
	prev := mem.Atomic(op, off)
	f.watch.Notify(off, 8)
	return prev
}

func (f *Fabric) addLive(q *tlink) {
	f.qmu.Lock()
	f.live[q] = struct{}{}
	f.qmu.Unlock()
}

func (f *Fabric) removeLive(q *tlink) {
	f.qmu.Lock()
	delete(f.live, q)
	f.qmu.Unlock()
}

var epoch = time.Now()

// nanotime is a monotonic clock reading in nanoseconds.
func nanotime() int64 { return int64(time.Since(epoch)) }

// wallOffset is the wall clock (Unix nanoseconds) minus nanotime, so that a post stamps its
// requests' expiry, and a node checks one, with one clock read (wallAt, wallNow). It is
// refreshed at least every wallSync (by posts and wallNow) and at every look of a fabric's
// monitor: a step of the wall clock shifts the expiries stamped and checked until then, as a
// step between a client's and a node's clocks would.
var (
	wallOffset atomic.Int64
	wallSynced atomic.Int64 // nanotime of the last refresh
)

// wallSync is the longest wallOffset goes without a refresh while wallNow is called.
const wallSync = 100 * time.Millisecond

func init() { wallOffset.Store(epoch.UnixNano()) }

// wallAt returns the wall time (Unix nanoseconds) of the nanotime reading t.
func wallAt(t int64) int64 { return t + wallOffset.Load() }

// wallNow returns the wall time (Unix nanoseconds), reading one clock unless wallOffset is due
// for a refresh.
func wallNow() int64 {
	t := nanotime()
	if t-wallSynced.Load() > int64(wallSync) {
		syncWall()
		t = nanotime()
	}
	return wallAt(t)
}

// syncWall refreshes wallOffset.
func syncWall() {
	wall := time.Now().UnixNano()
	t := nanotime()
	wallOffset.Store(wall - t)
	wallSynced.Store(t)
}
