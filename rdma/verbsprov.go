package rdma

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
	"github.com/farmem/farmem/internal/wire"
	"github.com/farmem/farmem/rdma/internal/verbs"
)

// The verbs providers' control ops, on the authenticated control connection to a memory node.
const (
	// ctlVerbsConnect: a client's queue pair endpoint in, the node's queue pair endpoint and
	// its region's address, key and size out.
	ctlVerbsConnect = wire.CtlProvider + iota
	// ctlVerbsDisconnect: the node destroys a client's queue pair.
	ctlVerbsDisconnect
)

// DeviceEnv names the environment variable whose value, when set, is the default RDMA device
// spec (NAME[:PORT[:GID-INDEX]]) of the ibverbs provider, for clients and memory nodes alike.
const DeviceEnv = "FARMEM_IBV_DEVICE"

// verbsConnectReq asks a memory node for a queue pair connected to a client's.
type verbsConnectReq struct {
	Client   farmem.ClientID `json:"client"`
	Endpoint verbs.Endpoint  `json:"endpoint"`
}

// verbsConnectReply is the node's side of a connected queue pair.
type verbsConnectReply struct {
	Endpoint verbs.Endpoint `json:"endpoint"`
	// Addr and RKey name offset 0 of the node's region; Size is its size; Key is the region
	// key of its tcp handshake, to tell a restarted node.
	Addr uint64 `json:"addr"`
	RKey uint32 `json:"rkey"`
	Size uint64 `json:"size"`
	Key  uint32 `json:"key"`
}

// verbsDisconnectReq asks a memory node to destroy the queue pair it connected to a client's
// queue pair QPN.
type verbsDisconnectReq struct {
	Client farmem.ClientID `json:"client"`
	QPN    uint32          `json:"qpn"`
}

// verbsProvider is a data path over RDMA queue pairs (package verbs), on a device its open
// function returns: ibverbs over libibverbs in an rdma build, a fake device in tests. Memory
// nodes register their mapped region with the device; each client gets an RC queue pair to
// each memory node it uses, set up through ctlVerbsConnect. Compute nodes' regions live on
// the Go heap, which is never registered: they stay on tcp.
type verbsProvider struct {
	pname string
	open  func(spec string) (verbs.Device, error)
	// qcfg are the client queue pairs' settings (Depth, SignalEvery, Staging...).
	qcfg verbs.Config

	mu   sync.Mutex
	devs map[string]verbs.Device
}

func newVerbsProvider(name string, open func(spec string) (verbs.Device, error), qcfg verbs.Config) *verbsProvider {
	if qcfg.Depth <= 0 {
		qcfg.Depth = 128
	}
	return &verbsProvider{pname: name, open: open, qcfg: qcfg, devs: make(map[string]verbs.Device)}
}

// register makes the provider and its memory-node half available by name.
func (p *verbsProvider) register() {
	providers[p.pname] = p
	serverProviders[p.pname] = func() serverProvider { return &verbsServer{prov: p, qps: make(map[farmem.ClientID]*serverQP)} }
}

func (p *verbsProvider) name() string { return p.pname }

// device returns the device spec names (default: the DeviceEnv variable), opened once per process
// and kept open: queue pairs and registrations come and go, the device stays.
func (p *verbsProvider) device(spec string) (verbs.Device, error) {
	if spec == "" {
		spec = os.Getenv(DeviceEnv)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if d := p.devs[spec]; d != nil {
		return d, nil
	}
	d, err := p.open(spec)
	if err != nil {
		return nil, fmt.Errorf("rdma: %s device %q: %w", p.pname, spec, err)
	}
	p.devs[spec] = d
	return d, nil
}

func (p *verbsProvider) connect(c *client, pe *peer) qp {
	if pe.id.IsCompute() {
		return newTCPQP(c, pe)
	}
	q := newVerbsQP(p, c, pe)
	go q.setup()
	return q
}

// newVerbsQP makes a queue pair to memory node pe whose setup has not started, bound to the
// region key the fabric knows of pe now: what is posted to it before setup connects is meant
// for that incarnation's memory.
func newVerbsQP(p *verbsProvider, c *client, pe *peer) *verbsQP {
	cfg := p.qcfg
	cfg.Name = pe.id.String()
	cfg.DownTimeout = c.f.down
	cfg.OnExtraRoundTrip = func() { c.Counters.AddRoundTrips(1) }
	cfg.OnLost = func(err error) { c.markLost(pe.id, err) }
	q := &verbsQP{prov: p, c: c, p: pe, e: verbs.New(cfg)}
	q.wantKey, q.wantKnown = pe.keyInfo()
	return q
}

// verbsQP is a client's queue pair to a memory node: the engine, and its setup.
type verbsQP struct {
	prov *verbsProvider
	c    *client
	p    *peer
	e    *verbs.QP
	// wantKey is the node's region key the fabric knew when the queue pair was made (if
	// wantKnown): setup refuses a node with another one, even one the fabric has adopted since,
	// since the verbs posted meanwhile were meant for the old memory (farmem.Restarts).
	wantKey   uint32
	wantKnown bool

	mu        sync.Mutex
	qpn       uint32 // this side's queue pair number, once the node connected one to it
	connected bool   // the node holds a queue pair for it
	closed    bool
}

var _ qp = (*verbsQP)(nil)

// setup opens the device, creates the queue pair, has the node connect one to it over the
// control connection, connects it, and starts the engine: all within the down timeout.
func (q *verbsQP) setup() {
	f := q.c.f
	dev, err := q.prov.device(f.opts.Device)
	if err != nil {
		q.e.Fail(err)
		return
	}
	dq, err := dev.CreateQP(verbs.QPConfig{Depth: q.prov.qcfg.Depth, MaxInline: dev.Attr().MaxInline, Timeout: f.down})
	if err != nil {
		q.e.Fail(fmt.Errorf("rdma: queue pair to %v: %w", q.p.id, err))
		return
	}
	ep := dq.Endpoint()
	ctx, cancel := context.WithTimeout(f.ctx, f.down)
	var rep verbsConnectReply
	req := verbsConnectReq{Client: q.c.ClientInfo.ID, Endpoint: ep}
	err = q.p.control(f).rpc(ctx, ctlVerbsConnect, req, &rep)
	if errors.Is(err, farmem.ErrNodeDown) && ctx.Err() == nil {
		// The control connection may have died with an earlier incarnation of the node: the
		// failed request closed it, and a second one dials afresh, in what is left of the
		// down timeout.
		err = q.p.control(f).rpc(ctx, ctlVerbsConnect, req, &rep)
	}
	cancel()
	if err != nil {
		_ = dq.Close()
		q.e.Fail(fmt.Errorf("rdma: connect a queue pair to %v: %w", q.p.id, err))
		return
	}
	q.mu.Lock()
	q.qpn, q.connected = ep.QPN, true
	closed := q.closed
	q.mu.Unlock()
	if closed {
		_ = dq.Close()
		q.disconnect()
		return
	}
	key, known := q.p.keyInfo()
	if q.wantKnown {
		// The key the queue pair was made for, not the fabric's now: an adoption since then
		// (through another client) does not make what was posted here reach the new memory.
		key, known = q.wantKey, true
	}
	if known && key != rep.Key {
		_ = dq.Close()
		lost := q.p.fenced()
		if lost == nil {
			lost = fmt.Errorf("rdma: %v restarted since this queue pair was made (its memory is new): %w", q.p.id, farmem.ErrNodeLost)
		}
		q.e.Fail(lost)
		q.disconnect()
		return
	}
	if size := q.p.regionSize(); rep.Size < size {
		_ = dq.Close()
		q.e.Fail(fmt.Errorf("rdma: %v registered %d bytes, not its region's %d: %w", q.p.id, rep.Size, size, farmem.ErrNodeDown))
		q.disconnect()
		return
	}
	if err := dq.Connect(rep.Endpoint); err != nil {
		_ = dq.Close()
		q.e.Fail(fmt.Errorf("rdma: connect the queue pair to %v: %w: %w", q.p.id, farmem.ErrNodeDown, err))
		q.disconnect()
		return
	}
	if q.e.Start(dev, dq, verbs.Remote{Addr: rep.Addr, RKey: rep.RKey}) != nil {
		q.disconnect()
	}
}

// disconnect asks the node, in the background, to destroy its side of the queue pair.
func (q *verbsQP) disconnect() {
	q.mu.Lock()
	if !q.connected {
		q.mu.Unlock()
		return
	}
	q.connected = false
	req := verbsDisconnectReq{Client: q.c.ClientInfo.ID, QPN: q.qpn}
	q.mu.Unlock()
	f := q.c.f
	go func() {
		ctx, cancel := context.WithTimeout(f.ctx, f.down)
		defer cancel()
		if err := q.p.control(f).rpc(ctx, ctlVerbsDisconnect, req, nil); err != nil {
			f.log.Debug("disconnecting a queue pair failed", "peer", q.p.id.String(), "err", err)
		}
	}()
}

func (q *verbsQP) post(ctx context.Context, b *farmem.Batch, idx []int, s sink) {
	q.e.Post(ctx, b, idx, verbsSink(s))
}

func (q *verbsQP) parker() transport.Parker {
	return &verbsParker{e: q.e, ch: make(chan struct{}, 1)}
}

func (q *verbsQP) postWaited(ctx context.Context, b *farmem.Batch, idx []int, s sink) {
	q.e.Post(ctx, b, idx, verbsSink(s))
}

func (q *verbsQP) do(ctx context.Context, b *farmem.Batch, s sink, done chan struct{}) error {
	q.e.Post(ctx, b, nil, verbsSink(s))
	return q.e.Await(ctx, done)
}

func (q *verbsQP) alive() bool { return q.e.Alive() }

// close fails the queue pair's work with err and, unless the node is down, has the node
// destroy its side.
func (q *verbsQP) close(err error) {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.e.Fail(err)
	if !errors.Is(err, farmem.ErrNodeDown) {
		q.disconnect()
	}
}

// verbsSink hands a sink to the engine.
func verbsSink(s sink) verbs.Sink {
	if vs, ok := s.(verbs.Sink); ok {
		return vs
	}
	return sinkFunc{s}
}

type sinkFunc struct{ s sink }

func (f sinkFunc) Complete(i int, val uint64, err error) { f.s.complete(i, val, err) }

// verbsParker parks a batch's waiter by polling the queue pair's completions itself.
type verbsParker struct {
	e  *verbs.QP
	ch chan struct{}
}

func (p *verbsParker) Park(ctx context.Context) error { return p.e.Await(ctx, p.ch) }

func (p *verbsParker) Unpark() {
	select {
	case p.ch <- struct{}{}:
	default:
	}
}

// verbsServer is a memory node's half: its region registered with the device, and one queue
// pair per client connected to the client's. The device serves verbs without the node's CPU.
type verbsServer struct {
	prov *verbsProvider
	s    *srv
	dev  verbs.Device
	mr   *verbs.Region

	mu     sync.Mutex
	qps    map[farmem.ClientID]*serverQP
	closed bool
}

// serverQP is the node's queue pair for a client's queue pair peerQPN.
type serverQP struct {
	dq      verbs.DevQP
	peerQPN uint32
}

var (
	_ serverProvider = (*verbsServer)(nil)
	_ providerFaults = (*verbsServer)(nil)
)

// attach registers the server's mapped region with the device and adds the connect and
// disconnect control ops.
func (v *verbsServer) attach(s *srv) error {
	if s.reg.mapped == nil {
		return fmt.Errorf("rdma: %s needs a mapped region, not %s: %w", v.prov.pname, s.reg.desc, farmem.ErrNotSupported)
	}
	dev, err := v.prov.device(s.device)
	if err != nil {
		return err
	}
	mr, err := dev.Register(s.reg.mapped)
	if err != nil {
		return fmt.Errorf("rdma: register the region with %s: %w", dev.Attr().Name, err)
	}
	v.s, v.dev, v.mr = s, dev, mr
	if s.ctlOps == nil {
		s.ctlOps = make(map[wire.CtlOp]func([]byte) (any, error))
	}
	s.ctlOps[ctlVerbsConnect] = v.connect
	s.ctlOps[ctlVerbsDisconnect] = v.disconnect
	s.pfaults = v
	s.log.Info("region registered with the RDMA device", "provider", v.prov.pname, "device", dev.Attr().Name, "bytes", len(s.reg.mapped))
	return nil
}

// connect creates a queue pair connected to a client's and says how to reach the region.
func (v *verbsServer) connect(body []byte) (any, error) {
	var req verbsConnectReq
	if err := wire.DecodeJSON(body, &req); err != nil {
		return nil, err
	}
	if req.Client == 0 {
		return nil, fmt.Errorf("rdma: queue pair for client 0: %w", farmem.ErrInvalid)
	}
	if v.s.state.Load() != stateUp || v.s.silent(req.Client) {
		return nil, fmt.Errorf("rdma: %v does not answer client %d: %w", v.s.node, req.Client, farmem.ErrNodeDown)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return nil, fmt.Errorf("rdma: %v is closing: %w", v.s.node, farmem.ErrNodeDown)
	}
	old := v.qps[req.Client]
	if old == nil && len(v.qps) >= v.s.lim.maxConns {
		return nil, fmt.Errorf("rdma: %v holds %d queue pairs: %w", v.s.node, len(v.qps), farmem.ErrNoSpace)
	}
	dq, err := v.dev.CreateQP(verbs.QPConfig{Depth: 1, Timeout: time.Second})
	if err != nil {
		return nil, fmt.Errorf("rdma: %v: %w: %w", v.s.node, farmem.ErrNoSpace, err)
	}
	if err := dq.Connect(req.Endpoint); err != nil {
		_ = dq.Close()
		return nil, fmt.Errorf("rdma: %v: connect to client %d: %w", v.s.node, req.Client, err)
	}
	// A client has one queue pair to a node at a time: a new one replaces the last.
	if old != nil {
		_ = old.dq.Close()
	}
	v.qps[req.Client] = &serverQP{dq: dq, peerQPN: req.Endpoint.QPN}
	return verbsConnectReply{Endpoint: dq.Endpoint(), Addr: v.mr.Addr, RKey: v.mr.RKey, Size: v.s.reg.size, Key: v.s.key}, nil
}

// disconnect destroys a client's queue pair, if it is still the one named.
func (v *verbsServer) disconnect(body []byte) (any, error) {
	var req verbsDisconnectReq
	if err := wire.DecodeJSON(body, &req); err != nil {
		return nil, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if q := v.qps[req.Client]; q != nil && q.peerQPN == req.QPN {
		_ = q.dq.Close()
		delete(v.qps, req.Client)
	}
	return struct{}{}, nil
}

// queuePairs reports how many client queue pairs the node holds.
func (v *verbsServer) queuePairs() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.qps)
}

func (v *verbsServer) closeAll() {
	for id, q := range v.qps {
		_ = q.dq.Close()
		delete(v.qps, id)
	}
}

// detach destroys every queue pair and deregisters the region (before the server unmaps it).
func (v *verbsServer) detach() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.closed = true
	v.closeAll()
	if v.mr != nil {
		err := v.mr.Release()
		v.mr = nil
		return err
	}
	return nil
}

// crash destroys every queue pair: clients' work goes unanswered until their down timeout.
func (v *verbsServer) crash() {
	v.mu.Lock()
	v.closed = true
	v.closeAll()
	v.mu.Unlock()
}

// silence breaks the queue pairs of client (all when 0): work on them goes unanswered, as a
// hung node's, and they stay broken; the client connects a new one once the silence ends.
func (v *verbsServer) silence(client farmem.ClientID, on bool) {
	if !on {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for id, q := range v.qps {
		if client == 0 || id == client {
			_ = q.dq.Break()
		}
	}
}

func (v *verbsServer) crashAfter(int) error {
	return fmt.Errorf("rdma: %s: the NIC applies verbs without the node's CPU, which cannot stop it after n ops: %w", v.prov.pname, farmem.ErrNotSupported)
}
