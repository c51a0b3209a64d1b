package verbs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/internal/wordmem"
)

// FakeNet is an in-process network of fake RDMA devices, for testing the queue-pair logic and
// the provider without a NIC. Its devices complete work requests by applying them to the
// registered memory of the queue pair they are connected to, in posting order, like an RC
// queue pair; a request to a queue pair that is gone, broken or unreachable goes unanswered
// until RetryTimeout and then fails with StatusRetryExcErr.
//
// It checks what it is given, and records each breach in Violations:
//   - the send queue: a post that would hold more work requests than its depth (counting
//     those no polled completion has retired yet) fails, as on a NIC; a send queue full of
//     unsignaled work requests (which nothing can ever retire) and a completion queue that
//     could overflow are breaches too;
//   - fences: a work request that could overtake an earlier READ or atomic still in flight
//     (a WRITE or atomic after a READ or atomic, a READ after an atomic) without
//     IBV_SEND_FENCE on it or on a work request between them;
//   - buffers: a local buffer overlapping one still in flight, outside a registered region,
//     inline data beyond the queue pair's limit, a misaligned atomic, a work request id that
//     does not increase.
type FakeNet struct {
	// RetryTimeout is how long a request goes unanswered before its work request fails with
	// StatusRetryExcErr (default 10s: longer than a queue pair's down timeout, so tests see
	// the queue pair's own timer fire).
	RetryTimeout time.Duration
	// Latency delays the execution of each work request.
	Latency time.Duration
	// Record keeps every posted chain for Chains.
	Record bool

	mu         sync.Mutex
	devs       []*FakeDevice
	qps        map[fakeAddr]*FakeQP
	nextLID    uint16
	nextQPN    uint32
	violations []string
}

type fakeAddr struct {
	lid uint16
	qpn uint32
}

// NewFakeNet returns an empty fake network.
func NewFakeNet() *FakeNet {
	return &FakeNet{RetryTimeout: 10 * time.Second, qps: make(map[fakeAddr]*FakeQP), nextLID: 1, nextQPN: 0x100}
}

// Violations returns the breaches seen so far.
func (n *FakeNet) Violations() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.violations...)
}

func (n *FakeNet) violate(format string, args ...any) {
	n.mu.Lock()
	if len(n.violations) < 1000 {
		n.violations = append(n.violations, fmt.Sprintf(format, args...))
	}
	n.mu.Unlock()
}

// QPs returns the queue pairs created on the network, in creation order.
func (n *FakeNet) QPs() []*FakeQP {
	n.mu.Lock()
	defer n.mu.Unlock()
	var qs []*FakeQP
	for _, d := range n.devs {
		d.mu.Lock()
		qs = append(qs, d.qps...)
		d.mu.Unlock()
	}
	return qs
}

// FakeAttr is a fake device's default description: a ConnectX-like limit set.
var FakeAttr = Attr{Name: "fake0", MaxQPWR: 32768, MaxInline: 64, MaxRdAtomic: 16, Atomics: true}

// NewDevice adds a device (a port with its own LID) to the network.
func (n *FakeNet) NewDevice(attr Attr) *FakeDevice {
	n.mu.Lock()
	defer n.mu.Unlock()
	d := &FakeDevice{net: n, attr: attr, lid: n.nextLID, mrs: make(map[uint32]*fakeMR), nextKey: uint32(n.nextLID) << 16}
	n.nextLID++
	n.devs = append(n.devs, d)
	return d
}

// FakeDevice is a device on a FakeNet. It implements Device.
type FakeDevice struct {
	net  *FakeNet
	attr Attr
	lid  uint16

	mu       sync.Mutex
	mrs      map[uint32]*fakeMR
	nextKey  uint32
	qps      []*FakeQP
	down     bool
	failIn   int    // work requests to execute before the next fails
	failWith Status // its status (StatusSuccess: none)
	closed   bool
}

var _ Device = (*FakeDevice)(nil)

type fakeMR struct {
	mu       sync.RWMutex // held shared while the device accesses the memory
	r        *Region
	remote   bool
	mem      wordmem.Mem
	released bool
}

// Attr implements Device.
func (d *FakeDevice) Attr() Attr { return d.attr }

// LID returns the device's port LID.
func (d *FakeDevice) LID() uint16 { return d.lid }

// SetDown makes the device unreachable (true) or reachable again: requests to and from its
// queue pairs go unanswered meanwhile.
func (d *FakeDevice) SetDown(down bool) {
	d.mu.Lock()
	d.down = down
	d.mu.Unlock()
}

// FailAfter lets the device's queue pairs execute n more work requests and makes the next one
// fail with status st, which moves its queue pair to the error state, as a NIC does.
func (d *FakeDevice) FailAfter(n int, st Status) {
	d.mu.Lock()
	d.failIn, d.failWith = n, st
	d.mu.Unlock()
}

// Regions reports how many registered regions the device holds.
func (d *FakeDevice) Regions() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.mrs)
}

// Alloc implements Device. The fake uses the Go heap; a real device maps memory.
func (d *FakeDevice) Alloc(n int) (*Region, error) {
	if n <= 0 {
		return nil, fmt.Errorf("verbs: fake alloc of %d bytes: %w", n, farmem.ErrInvalid)
	}
	words := make([]uint64, (n+7)/8)
	b := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)
	return d.register(b, false)
}

// Register implements Device.
func (d *FakeDevice) Register(mem []byte) (*Region, error) {
	if len(mem) == 0 || uintptr(unsafe.Pointer(&mem[0]))%8 != 0 {
		return nil, fmt.Errorf("verbs: fake register of %d bytes: %w", len(mem), farmem.ErrInvalid)
	}
	return d.register(mem, true)
}

func (d *FakeDevice) register(b []byte, remote bool) (*Region, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("verbs: fake device closed: %w", farmem.ErrClosed)
	}
	d.nextKey++
	key := d.nextKey
	mr := &fakeMR{remote: remote, mem: wordmem.FromPointer(unsafe.Pointer(&b[0]), uint64(len(b)))}
	r := &Region{Bytes: b, Addr: uint64(uintptr(unsafe.Pointer(&b[0]))), LKey: key, RKey: key}
	r.Release = func() error {
		mr.mu.Lock()
		defer mr.mu.Unlock()
		if mr.released {
			return nil
		}
		mr.released = true
		d.mu.Lock()
		delete(d.mrs, key)
		d.mu.Unlock()
		return nil
	}
	mr.r = r
	d.mrs[key] = mr
	return r, nil
}

// lookup returns the registered region holding [addr, addr+n) under key, shared-locked, or nil.
func (d *FakeDevice) lookup(key uint32, addr uint64, n uint32, remote bool) (*fakeMR, uint64) {
	d.mu.Lock()
	mr := d.mrs[key]
	d.mu.Unlock()
	if mr == nil {
		return nil, 0
	}
	mr.mu.RLock()
	size := uint64(len(mr.r.Bytes))
	if mr.released || (remote && !mr.remote) || addr < mr.r.Addr || addr-mr.r.Addr > size || uint64(n) > size-(addr-mr.r.Addr) {
		mr.mu.RUnlock()
		return nil, 0
	}
	return mr, addr - mr.r.Addr
}

// CreateQP implements Device.
func (d *FakeDevice) CreateQP(cfg QPConfig) (DevQP, error) {
	if cfg.Depth <= 0 || cfg.Depth > d.attr.MaxQPWR {
		return nil, fmt.Errorf("verbs: fake queue pair of depth %d (max %d): %w", cfg.Depth, d.attr.MaxQPWR, farmem.ErrInvalid)
	}
	d.net.mu.Lock()
	d.net.nextQPN++
	qpn := d.net.nextQPN
	d.net.mu.Unlock()
	q := &FakeQP{dev: d, depth: cfg.Depth, inline: min(cfg.MaxInline, d.attr.MaxInline),
		ep:     Endpoint{QPN: qpn, PSN: qpn * 7919 & 0xffffff, LID: d.lid, MTU: 5},
		notify: make(chan struct{}, 1), wake: make(chan struct{}, 1), closeCh: make(chan struct{})}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, fmt.Errorf("verbs: fake device closed: %w", farmem.ErrClosed)
	}
	d.qps = append(d.qps, q)
	d.mu.Unlock()
	d.net.mu.Lock()
	d.net.qps[fakeAddr{d.lid, qpn}] = q
	d.net.mu.Unlock()
	go q.worker()
	return q, nil
}

// Close implements Device.
func (d *FakeDevice) Close() error {
	d.mu.Lock()
	d.closed = true
	qs := append([]*FakeQP(nil), d.qps...)
	d.mu.Unlock()
	for _, q := range qs {
		_ = q.Close()
	}
	return nil
}

// Fake queue pair states.
const (
	fakeInit = iota
	fakeRTS
	fakeErr
	fakeClosed
)

// FakeQP is a queue pair of a FakeDevice. It implements DevQP and Notifier.
type FakeQP struct {
	dev    *FakeDevice
	depth  int
	inline int
	ep     Endpoint

	execMu sync.Mutex // held while a work request touches memory

	mu       sync.Mutex
	state    int
	remote   fakeAddr
	sq       []fakeWR // posted, not yet executed
	cq       []WC
	inflight []fakeWR // posted, not yet retired by a polled completion
	lastID   uint64
	run      int // unsignaled work requests since the last signaled one
	stats    FakeStats
	chains   [][]WR

	notify  chan struct{}
	wake    chan struct{}
	closeCh chan struct{}
}

var (
	_ DevQP    = (*FakeQP)(nil)
	_ Notifier = (*FakeQP)(nil)
)

type fakeWR struct {
	WR
	inlineData []byte
}

// FakeStats counts what a fake queue pair was given.
type FakeStats struct {
	Posts       int // Post calls (doorbells)
	WRs         int // work requests posted
	Signaled    int
	Fenced      int
	Inline      int
	MaxRun      int // the longest run of unsignaled work requests
	MaxInflight int // the most work requests in flight at once
	Polls       int // Poll calls
	Completions int // completions polled
}

// Stats returns the queue pair's counts.
func (q *FakeQP) Stats() FakeStats {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.stats
}

// Chains returns every chain posted, if the network records them.
func (q *FakeQP) Chains() [][]WR {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([][]WR(nil), q.chains...)
}

// Device returns the queue pair's device.
func (q *FakeQP) Device() *FakeDevice { return q.dev }

// Endpoint implements DevQP.
func (q *FakeQP) Endpoint() Endpoint { return q.ep }

// MaxInline implements DevQP.
func (q *FakeQP) MaxInline() int { return q.inline }

// Notify implements Notifier.
func (q *FakeQP) Notify() <-chan struct{} { return q.notify }

// Connect implements DevQP.
func (q *FakeQP) Connect(remote Endpoint) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state != fakeInit {
		return fmt.Errorf("verbs: fake connect in state %d: %w", q.state, farmem.ErrInvalid)
	}
	if remote.MTU < 1 || remote.MTU > 5 || remote.QPN == 0 {
		return fmt.Errorf("verbs: fake connect to %+v: %w", remote, farmem.ErrInvalid)
	}
	q.remote, q.state = fakeAddr{remote.LID, remote.QPN}, fakeRTS
	return nil
}

// Break implements DevQP.
func (q *FakeQP) Break() error {
	q.mu.Lock()
	if q.state == fakeInit || q.state == fakeRTS {
		q.state = fakeErr
	}
	q.mu.Unlock()
	q.kickWorker()
	return nil
}

// Close implements DevQP: nothing of the queue pair touches memory after it returns.
func (q *FakeQP) Close() error {
	q.mu.Lock()
	if q.state == fakeClosed {
		q.mu.Unlock()
		return nil
	}
	q.state = fakeClosed
	q.sq = nil
	close(q.closeCh)
	q.mu.Unlock()
	q.dev.net.mu.Lock()
	delete(q.dev.net.qps, fakeAddr{q.dev.lid, q.ep.QPN})
	q.dev.net.mu.Unlock()
	q.execMu.Lock()
	defer q.execMu.Unlock()
	return nil
}

var errFakeFull = errors.New("verbs: fake send queue full (ENOMEM)")

// Post implements DevQP, checking each work request before it is queued.
func (q *FakeQP) Post(wrs []WR) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := q.dev.net
	if q.state == fakeInit || q.state == fakeClosed {
		return 0, fmt.Errorf("verbs: fake post in state %d: %w", q.state, farmem.ErrInvalid)
	}
	q.stats.Posts++
	if n.Record {
		q.chains = append(q.chains, append([]WR(nil), wrs...))
	}
	for k := range wrs {
		w := wrs[k]
		if len(q.inflight) >= q.depth {
			n.violate("qp %d: work request %d posted to a full send queue (%d in flight)", q.ep.QPN, w.ID, len(q.inflight))
			return k, errFakeFull
		}
		q.check(&w)
		fw := fakeWR{WR: w}
		if w.Flags&FlagInline != 0 {
			if mr, off := q.dev.lookup(w.LKey, w.LAddr, w.Len, false); mr != nil {
				fw.inlineData = append([]byte(nil), mr.r.Bytes[off:off+uint64(w.Len)]...)
				mr.mu.RUnlock()
			}
		}
		q.lastID = w.ID
		q.inflight = append(q.inflight, fw)
		q.sq = append(q.sq, fw)
		q.stats.WRs++
		if w.Signaled() {
			q.stats.Signaled++
			q.run = 0
		} else {
			q.run++
			q.stats.MaxRun = max(q.stats.MaxRun, q.run)
		}
		if w.Fenced() {
			q.stats.Fenced++
		}
		if w.Flags&FlagInline != 0 {
			q.stats.Inline++
		}
		q.stats.MaxInflight = max(q.stats.MaxInflight, len(q.inflight))
	}
	if len(q.inflight) == q.depth {
		sig := false
		for i := range q.inflight {
			sig = sig || q.inflight[i].Signaled()
		}
		if !sig {
			n.violate("qp %d: the send queue is full of unsignaled work requests: nothing can retire them", q.ep.QPN)
		}
	}
	signaled := 0
	for i := range q.inflight {
		if q.inflight[i].Signaled() {
			signaled++
		}
	}
	if signaled+len(q.cq) > q.depth {
		n.violate("qp %d: %d completions could be pending on a completion queue of %d", q.ep.QPN, signaled+len(q.cq), q.depth)
	}
	q.kickWorker()
	return len(wrs), nil
}

// check records the breaches w commits against what is in flight (q.mu held).
func (q *FakeQP) check(w *WR) {
	n := q.dev.net
	if w.ID <= q.lastID {
		n.violate("qp %d: work request id %d after %d", q.ep.QPN, w.ID, q.lastID)
	}
	switch w.Opcode {
	case OpRead, OpWrite:
	case OpCAS, OpFAA:
		if w.Len != 8 || w.RAddr%8 != 0 {
			n.violate("qp %d: wr %d: atomic of %d bytes at remote %#x", q.ep.QPN, w.ID, w.Len, w.RAddr)
		}
	default:
		n.violate("qp %d: wr %d: opcode %v", q.ep.QPN, w.ID, w.Opcode)
	}
	if w.Flags&FlagInline != 0 && (w.Opcode != OpWrite || int(w.Len) > q.inline) {
		n.violate("qp %d: wr %d: inline %v of %d bytes (limit %d)", q.ep.QPN, w.ID, w.Opcode, w.Len, q.inline)
	}
	if w.Len > 0 {
		if mr, _ := q.dev.lookup(w.LKey, w.LAddr, w.Len, false); mr == nil {
			n.violate("qp %d: wr %d: local buffer %#x+%d is not registered under key %#x", q.ep.QPN, w.ID, w.LAddr, w.Len, w.LKey)
		} else {
			mr.mu.RUnlock()
		}
	}
	// Fences and buffers, against the work requests in flight, newest first.
	fenced := w.Fenced()
	for i := len(q.inflight) - 1; i >= 0; i-- {
		e := &q.inflight[i]
		if !fenced && (e.Opcode.IsAtomic() || (e.Opcode == OpRead && w.Opcode != OpRead)) {
			n.violate("qp %d: wr %d (%v) may overtake wr %d (%v) still in flight: no fence", q.ep.QPN, w.ID, w.Opcode, e.ID, e.Opcode)
			fenced = true // one report per work request
		}
		if e.Fenced() {
			fenced = true
		}
		if w.Len > 0 && e.Len > 0 && e.Flags&FlagInline == 0 && w.LAddr < e.LAddr+uint64(e.Len) && e.LAddr < w.LAddr+uint64(w.Len) {
			n.violate("qp %d: wr %d reuses the local buffer of wr %d still in flight", q.ep.QPN, w.ID, e.ID)
		}
	}
}

// Poll implements DevQP.
func (q *FakeQP) Poll(wcs []WC) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state == fakeClosed {
		return 0, fmt.Errorf("verbs: fake poll after close: %w", farmem.ErrClosed)
	}
	q.stats.Polls++
	k := copy(wcs, q.cq)
	q.cq = q.cq[:copy(q.cq, q.cq[k:])]
	for _, wc := range wcs[:k] {
		// A completion retires every work request up to it.
		j := 0
		for j < len(q.inflight) && q.inflight[j].ID <= wc.ID {
			j++
		}
		q.inflight = q.inflight[:copy(q.inflight, q.inflight[j:])]
	}
	q.stats.Completions += k
	return k, nil
}

func (q *FakeQP) kickWorker() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// complete queues a completion (q.mu held).
func (q *FakeQP) complete(id uint64, st Status) {
	if len(q.cq) >= q.depth {
		q.dev.net.violate("qp %d: completion queue overflow at wr %d", q.ep.QPN, id)
		q.state = fakeErr
		return
	}
	q.cq = append(q.cq, WC{ID: id, Status: st})
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// worker executes posted work requests in order.
func (q *FakeQP) worker() {
	for {
		q.mu.Lock()
		for len(q.sq) == 0 && q.state != fakeClosed {
			q.mu.Unlock()
			select {
			case <-q.wake:
			case <-q.closeCh:
			}
			q.mu.Lock()
		}
		if q.state == fakeClosed {
			q.mu.Unlock()
			return
		}
		w := q.sq[0]
		q.sq = q.sq[1:]
		if q.state == fakeErr {
			// Flushed.
			if w.Signaled() {
				q.complete(w.ID, StatusWRFlushErr)
			}
			q.mu.Unlock()
			continue
		}
		remote := q.remote
		q.mu.Unlock()
		if d := q.dev.net.Latency; d > 0 {
			time.Sleep(d)
		}
		st := q.await(remote)
		q.execMu.Lock()
		q.mu.Lock()
		if q.state == fakeClosed {
			q.mu.Unlock()
			q.execMu.Unlock()
			return
		}
		q.mu.Unlock()
		if st == StatusSuccess {
			st = q.execute(&w, remote)
		}
		q.mu.Lock()
		switch {
		case q.state == fakeErr:
			if w.Signaled() {
				q.complete(w.ID, StatusWRFlushErr)
			}
		case st != StatusSuccess:
			q.complete(w.ID, st) // an error completes even an unsignaled request
			q.state = fakeErr
		case w.Signaled():
			q.complete(w.ID, StatusSuccess)
		}
		q.mu.Unlock()
		q.execMu.Unlock()
	}
}

// await waits until the path to remote answers, or returns StatusRetryExcErr after the
// network's retry timeout (StatusWRFlushErr if this queue pair breaks meanwhile).
func (q *FakeQP) await(remote fakeAddr) Status {
	deadline := time.Now().Add(q.dev.net.RetryTimeout)
	for {
		if q.reachable(remote) {
			return StatusSuccess
		}
		q.mu.Lock()
		st := q.state
		q.mu.Unlock()
		if st != fakeRTS {
			return StatusWRFlushErr
		}
		if !time.Now().Before(deadline) {
			return StatusRetryExcErr
		}
		select {
		case <-q.closeCh:
			return StatusWRFlushErr
		case <-time.After(time.Millisecond):
		}
	}
}

// qp returns the queue pair at a, or nil.
func (n *FakeNet) qp(a fakeAddr) *FakeQP {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.qps[a]
}

// reachable reports whether a request to remote would be answered.
func (q *FakeQP) reachable(remote fakeAddr) bool {
	r := q.dev.net.qp(remote)
	if r == nil {
		return false
	}
	for _, d := range []*FakeDevice{q.dev, r.dev} {
		d.mu.Lock()
		down := d.down || d.closed
		d.mu.Unlock()
		if down {
			return false
		}
	}
	r.mu.Lock()
	ok := r.state == fakeRTS && r.remote == fakeAddr{q.dev.lid, q.ep.QPN}
	r.mu.Unlock()
	return ok
}

// execute applies w at remote's device (q.execMu held).
func (q *FakeQP) execute(w *fakeWR, remote fakeAddr) Status {
	q.dev.mu.Lock()
	if st := q.dev.failWith; st != StatusSuccess {
		if q.dev.failIn == 0 {
			q.dev.failWith = StatusSuccess
			q.dev.mu.Unlock()
			return st
		}
		q.dev.failIn--
	}
	q.dev.mu.Unlock()
	r := q.dev.net.qp(remote)
	if r == nil {
		return StatusRetryExcErr
	}
	if w.Opcode.IsAtomic() && (w.RAddr%8 != 0 || w.Len != 8) {
		return StatusRemInvReqErr
	}
	rmr, roff := r.dev.lookup(w.RKey, w.RAddr, w.Len, true)
	if rmr == nil {
		return StatusRemAccessErr
	}
	var tmp [8]byte
	var data []byte
	switch w.Opcode {
	case OpRead:
		data = make([]byte, w.Len)
		rmr.mem.ReadAt(data, roff, nil)
	case OpWrite:
		if w.inlineData != nil {
			data = w.inlineData
		}
	case OpCAS:
		prev := rmr.mem.Atomic(&farmem.Op{Kind: farmem.OpCAS, Cmp: w.Compare, Swap: w.Swap}, roff)
		binary.LittleEndian.PutUint64(tmp[:], prev)
		data = tmp[:]
	case OpFAA:
		prev := rmr.mem.Atomic(&farmem.Op{Kind: farmem.OpFAA, Swap: w.Compare}, roff)
		binary.LittleEndian.PutUint64(tmp[:], prev)
		data = tmp[:]
	}
	rmr.mu.RUnlock()
	if w.Len == 0 || (w.Opcode == OpWrite && w.inlineData != nil) {
		if w.Opcode == OpWrite && w.Len > 0 {
			return q.writeRemote(r, w, data)
		}
		return StatusSuccess
	}
	lmr, loff := q.dev.lookup(w.LKey, w.LAddr, w.Len, false)
	if lmr == nil {
		return StatusLocProtErr
	}
	local := lmr.r.Bytes[loff : loff+uint64(w.Len)]
	if w.Opcode == OpWrite {
		data = append([]byte(nil), local...)
		lmr.mu.RUnlock()
		return q.writeRemote(r, w, data)
	}
	copy(local, data)
	lmr.mu.RUnlock()
	return StatusSuccess
}

func (q *FakeQP) writeRemote(r *FakeQP, w *fakeWR, data []byte) Status {
	rmr, roff := r.dev.lookup(w.RKey, w.RAddr, w.Len, true)
	if rmr == nil {
		return StatusRemAccessErr
	}
	rmr.mem.WriteAt(data, roff, nil)
	rmr.mu.RUnlock()
	return StatusSuccess
}
