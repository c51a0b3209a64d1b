package rdma

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
	"github.com/farmem/farmem/internal/wire"
)

// tcpProvider is the pure-Go data path: authenticated TCP connections carrying Batch frames.
// A client's queue pair to a node (tcpQP) is a channel of a connection (tlink): a connection
// of its own (by default, and always to compute nodes), or, with Options.SharedConns, to a
// memory node, the connection the fabric shares among all its clients that use the node
// (wire.PurposeShared).
// A memory node applies a connection's frames one at a time in arrival order, which gives the
// contract's order: the ops of a batch in order, and one client's batches to one node in
// posting order. Each batch is one round trip; a batch too large for one frame goes as
// several consecutive frames.
type tcpProvider struct{}

func (tcpProvider) name() string { return "tcp" }

func (tcpProvider) connect(c *client, p *peer) qp {
	if c.f.share && !p.id.IsCompute() {
		if q := c.f.sharedQP(c, p); q != nil {
			return q
		}
	}
	return newTCPQP(c, p)
}

// Connection states.
const (
	qpConnecting = iota
	qpUp
	qpDead
)

// tlink is a connection to one node: the socket, its reader role and its output buffer, and
// the slots of the requests outstanding on it, which its channels (queue pairs) hold. An
// unshared link carries one client's channel (solo; the wire's request ids are the slots'); a
// shared one carries the channels of several clients of the fabric, each attached to the node
// with an Attach frame before its first request, the channel's number in the top 16 bits of
// its requests' ids.
type tlink struct {
	f      *Fabric
	p      *peer
	shared bool

	mu    sync.Mutex
	state int
	err   error
	conn  net.Conn
	inc   uint64 // the incarnation of the process at the other end (0: not connected yet)
	// want is the incarnation the fabric had adopted when the link was made (0: none met yet):
	// what is posted on it is posted to that incarnation's memory, so a handshake that meets
	// another one fails it, even if the fabric adopted the new one meanwhile.
	want   uint64
	slots  []qslot
	free   []uint32
	maxOut int               // the node's limit on outstanding requests per channel (Welcome)
	solo   *tcpQP            // unshared: the one channel
	chans  map[uint16]*tcpQP // shared: the live channels by number
	nextCh uint16            // shared: the last channel number given out
	deadCh chan struct{}
	upCh   chan struct{} // closed once the connection is set up (send.go waits for it)

	rmu     sync.Mutex // the reader role
	run     []runFrame // scratch of resultRun (l.rmu held)
	runSl   []qslot    // scratch of resultRun (l.rmu held)
	br      *bufio.Reader
	rc      syscall.RawConn // the socket, for rawRead (nil: read through the net.Conn)
	rr      rawReader
	rbuf    []byte
	rs      wire.Results
	up      atomic.Bool   // the connection is set up: br may be read
	reading atomic.Bool   // someone holds the reader role
	bgKick  chan struct{} // wakes the background reader
	dlMu    sync.Mutex    // read deadlines of canceled contexts
	dlOwner uint64

	wmu      sync.Mutex
	nc       net.Conn // set once the handshake is done; writes go here
	rw       *rawWriter
	wbuf     []byte
	pend     []byte // frames posted while connecting
	out      []byte // frames queued for the writer goroutine, or for the reader
	flushing bool   // the writer owns a flush: frames go to out
	// writing: a poster on a shared link is writing (writeShared); frames go to out, and it
	// writes them before it leaves. wdata is its buffer.
	writing bool
	wdata   []byte
	rflush  bool // a reader holds the role and writes out before it waits on the socket
	// outReplies counts the frames in out that hold a slot (their answer will come back).
	outReplies int32
	// outEager: out holds a frame that must not wait for its poster's next block (one posted
	// while a reader held the role, or not lazily); without it, every frame in out is lazy
	// (see writeLocked) and their channels are on their clients' lazy lists.
	outEager bool
	kick     chan struct{} // wakes the writer

	// followers are the lead channels of the clients waiting for an answer on a shared link
	// while another goroutine held the reader role: one is handed the role when it is left
	// with requests outstanding (handOff).
	fmu       sync.Mutex
	followers []chan struct{}

	dead        atomic.Bool
	nudged      atomic.Bool  // a nudge's read deadline is set (nudge)
	outstanding atomic.Int32 // requests outstanding, all channels
	lastRecv    atomic.Int64 // nanotime of the last frame received, or of going busy
	pinged      atomic.Bool
}

// tcpQP is one client's queue pair to one node: a channel of a link. Its window, order and
// failure are its own; a shared link's other channels go on when it fails.
type tcpQP struct {
	f  *Fabric
	c  *client
	p  *peer
	l  *tlink
	ch uint16 // its number on a shared link (0 on an unshared one)

	// Under l.mu:
	state     int // qpUp or qpDead (the link's state says whether it is connected)
	err       error
	limit     int
	n         atomic.Int32 // requests outstanding (written under l.mu)
	seq       uint64       // frames posted, the last one's number
	unsigSeq  uint64       // number of the last frame that held unsignaled ops
	confirmed uint64       // number of the last batch frame a Result answered
	deadCh    chan struct{}
	slotCh    chan struct{} // a slot freed, signaled while slotWaiters > 0
	// slotWaiters counts the goroutines in acquire, which may wait for a slot (l.mu): a
	// release signals slotCh only then, so freeing a slot costs no channel operation while
	// no one waits.
	slotWaiters int
	backlog     []deferred // sends waiting for the window, in posting order; drained by a goroutine while not empty

	// Under l.wmu:
	attached   bool // its Attach frame is in the stream (shared links)
	lazyListed bool // on the client's lazy list (client.flushLazy takes it off)

	dead    atomic.Bool
	lastAns atomic.Int64 // nanotime of its last answer received, or of going busy
}

// qslot is an outstanding request: part of a batch, or a Call.
type qslot struct {
	q      *tcpQP // the channel it is of
	gen    uint32
	busy   bool
	seq    uint64
	b      *farmem.Batch
	idx    []int
	lo, hi int
	sink   sink
	call   *callWait
	expiry int64 // a batch frame's expiry, Unix nanoseconds
	at     int64 // its post's time (nanotime), or 0: the clock is read when it takes its slot
}

type callWait struct {
	ch    chan struct{}
	reply []byte
	err   error
}

// newTCPQP connects a link of the client's own to p and returns its channel.
func newTCPQP(c *client, p *peer) *tcpQP {
	q := newQP(c, p)
	c.f.addLive(q.l)
	go q.l.connect(c.ClientInfo.ID)
	return q
}

// newQP returns the channel of a new unconnected link of c's own to p; connect (or attach)
// puts it on a connection.
func newQP(c *client, p *peer) *tcpQP {
	l := newLink(c.f, p, false)
	q := l.newChannel(c, 0)
	l.solo = q
	return q
}

func newLink(f *Fabric, p *peer, shared bool) *tlink {
	l := &tlink{f: f, p: p, shared: shared, maxOut: f.opts.MaxOutstanding, deadCh: make(chan struct{}), upCh: make(chan struct{}),
		kick: make(chan struct{}, 1), bgKick: make(chan struct{}, 1), want: p.adopted()}
	l.lastRecv.Store(nanotime())
	return l
}

// newChannel returns a channel of l for client c, numbered ch.
func (l *tlink) newChannel(c *client, ch uint16) *tcpQP {
	q := &tcpQP{f: l.f, c: c, p: l.p, l: l, ch: ch, state: qpUp, limit: min(l.f.opts.MaxOutstanding, l.maxOut),
		deadCh: make(chan struct{}), slotCh: make(chan struct{}, 1)}
	q.lastAns.Store(nanotime())
	return q
}

// open returns a new channel of the shared link l for client c, or nil if l is dead or holds
// maxSharedClients channels.
func (l *tlink) open(c *client) *tcpQP {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state == qpDead || len(l.chans) >= maxSharedClients {
		return nil
	}
	ch := l.nextCh
	for {
		if ch++; ch != 0 && l.chans[ch] == nil {
			break
		}
	}
	l.nextCh = ch
	q := l.newChannel(c, ch)
	if l.chans == nil {
		l.chans = make(map[uint16]*tcpQP)
	}
	l.chans[ch] = q
	return q
}

// channelsLocked returns the link's live channels (l.mu held).
func (l *tlink) channelsLocked() []*tcpQP {
	if !l.shared {
		if l.solo != nil && l.solo.state != qpDead {
			return []*tcpQP{l.solo}
		}
		return nil
	}
	qs := make([]*tcpQP, 0, len(l.chans))
	for _, q := range l.chans {
		qs = append(qs, q)
	}
	return qs
}

// sharedQP returns a new channel for c on the fabric's shared link to the memory node p,
// dialing the link if there is none (or the last one died or reaches an incarnation the fabric
// no longer holds), or nil if the link has no room for another channel.
func (f *Fabric) sharedQP(c *client, p *peer) *tcpQP {
	f.smu.Lock()
	defer f.smu.Unlock()
	l := f.shared[p.id]
	if l == nil || l.dead.Load() || l.want != p.adopted() {
		if l != nil {
			defer l.retireIfEmpty(errRetired)
		}
		l = newLink(f, p, true)
		if f.shared == nil {
			f.shared = make(map[farmem.NodeID]*tlink)
		}
		f.shared[p.id] = l
		f.addLive(l)
		go l.connect(0)
	}
	return l.open(c)
}

// errRetired closes a shared link the fabric replaced (its node was adopted anew) once its
// last channel is gone.
var errRetired = fmt.Errorf("rdma: shared connection replaced: %w", farmem.ErrClosed)

// retireOrphan closes the shared link l, which has lost its last channel, if the fabric no
// longer gives it channels.
func (f *Fabric) retireOrphan(l *tlink) {
	f.smu.Lock()
	current := f.shared[l.p.id] == l
	f.smu.Unlock()
	if !current {
		l.retireIfEmpty(errRetired)
	}
}

// retireIfEmpty fails the link with err if it holds no channel.
func (l *tlink) retireIfEmpty(err error) {
	l.mu.Lock()
	empty := len(l.chans) == 0
	l.mu.Unlock()
	if empty {
		l.fail(err)
	}
}

// closeShared fails the fabric's shared links (closing or crashing).
func (f *Fabric) closeShared(err error) {
	f.smu.Lock()
	ls := make([]*tlink, 0, len(f.shared))
	for _, l := range f.shared {
		ls = append(ls, l)
	}
	clear(f.shared)
	f.smu.Unlock()
	for _, l := range ls {
		l.fail(err)
	}
}

func (q *tcpQP) alive() bool { return !q.dead.Load() && !q.l.dead.Load() }

// close implements qp: the channel fails with err; on a link of its own, the link closes.
func (q *tcpQP) close(err error) { q.fail(err) }

// connect runs the handshake, sends what was posted meanwhile, and becomes the reader. client
// is the unshared link's client (0 for a shared link).
func (l *tlink) connect(client farmem.ClientID) {
	deadline := time.Now().Add(l.f.down)
	purpose := wire.PurposeData
	if l.shared {
		purpose = wire.PurposeShared
	}
	nc, br, w, err := dialNode(l.f.ctx, l.p.addr, l.p.id, client, purpose, l.f.secret, deadline)
	if err != nil {
		l.f.noteDown(l.p, err)
		l.fail(err)
		return
	}
	l.f.learned(l.p, w)
	err = l.p.fenced()
	if err == nil && l.want != 0 && w.Incarnation != 0 && w.Incarnation != l.want {
		// The node restarted after this link was made and the fabric has adopted its new
		// process since: what was posted here was meant for the old memory
		// (farmem.Restarts: a verb posted before an adoption never reaches the new memory).
		err = fmt.Errorf("rdma: %w", transport.LostError(l.p.id, l.want, w.Incarnation))
	}
	if err != nil {
		_ = nc.Close()
		l.fail(err)
		return
	}
	l.attach(nc, br, w)
}

// attachAsync attaches q's link to a connection that needs no handshake (tests) in the
// background.
func (q *tcpQP) attachAsync(nc net.Conn) {
	go q.l.attach(nc, bufio.NewReader(nc), wire.Welcome{MaxOutstanding: uint32(q.limit)})
}

// attach puts the link on an authenticated connection, sends what was posted meanwhile, and
// becomes the background reader.
func (l *tlink) attach(nc net.Conn, br *bufio.Reader, w wire.Welcome) {
	l.mu.Lock()
	if l.state == qpDead {
		l.mu.Unlock()
		_ = nc.Close()
		return
	}
	l.state, l.conn, l.inc = qpUp, nc, w.Incarnation
	l.maxOut = min(l.maxOut, int(w.MaxOutstanding))
	for _, q := range l.channelsLocked() {
		q.limit = min(q.limit, l.maxOut)
	}
	l.mu.Unlock()
	l.wmu.Lock()
	var werr error
	if len(l.pend) > 0 {
		_, werr = nc.Write(l.pend)
	}
	l.pend = nil
	l.nc, l.rw = nc, newRawWriter(nc)
	l.wmu.Unlock()
	go l.writer(nc)
	if werr != nil {
		l.fail(fmt.Errorf("rdma: write to %v: %w: %w", l.p.id, farmem.ErrNodeDown, werr))
		return
	}
	// The handshake's reader may hold bytes the node sent after its Welcome; they come first.
	var src io.Reader = nc
	if n := br.Buffered(); n > 0 {
		src = io.MultiReader(io.LimitReader(br, int64(n)), src)
	} else {
		l.rc = sockRaw(nc)
	}
	l.rmu.Lock()
	l.br = bufio.NewReaderSize(progressReader{src, l}, readBufSize)
	l.rbuf = make([]byte, 0, 16<<10)
	l.rmu.Unlock()
	l.up.Store(true)
	close(l.upCh)
	l.bgReader()
}

// readBufSize is the read buffer of a connection; frames up to its size are read in a way a
// canceled context can interrupt between frames.
const readBufSize = 64 << 10

// progressReader is the socket under a connection's read buffer, read by the holder of the
// reader role when the buffer is empty. Before it reads (and may wait) it writes the frames
// posted meanwhile, all in one system call, as a pipelining client flushes before it blocks;
// and it notes every chunk received as a sign of life, so a long answer streaming in is not
// mistaken for a silent node.
type progressReader struct {
	r io.Reader
	l *tlink
}

func (p progressReader) Read(b []byte) (int, error) {
	var n int
	var err error
	if p.l.rc != nil {
		n, err = p.l.rawRead(b)
	} else {
		p.l.readerFlush(false, true)
		n, err = p.r.Read(b)
	}
	if n > 0 {
		p.l.lastRecv.Store(nanotime())
	}
	p.l.wmu.Lock()
	p.l.rflush = true
	p.l.wmu.Unlock()
	return n, err
}

// readerFlush is called by the holder of the reader role before it waits on the socket
// (holding false, all true) and as it leaves the role (both false): from then on posters hand
// their frames to the writer goroutine, and what was queued for the reader is written now, in
// one system call that does not wait (what the socket does not take goes to the writer
// goroutine). Leaving the role, it writes nothing if every frame queued is lazy: those wait for
// their poster's next block, or the next reader (writeLocked).
func (l *tlink) readerFlush(holding, all bool) {
	l.wmu.Lock()
	l.rflush = holding
	var err error
	if all || l.outEager {
		err = l.writeOutLocked()
	}
	l.wmu.Unlock()
	if err != nil {
		l.fail(err)
	}
}

// flushLazy writes the output buffer, for the client's flushLazy: the client is about to block.
func (q *tcpQP) flushLazy() {
	l := q.l
	l.wmu.Lock()
	q.lazyListed = false
	err := l.writeOutLocked()
	l.wmu.Unlock()
	if err != nil {
		l.fail(err)
	}
}

// writeOutLocked writes the output buffer, if the writer goroutine does not own it, in one
// system call that does not wait; what the socket does not take goes to the writer goroutine
// (l.wmu held). It returns the connection's failure, for the caller to fail it once it has
// released l.wmu.
func (l *tlink) writeOutLocked() error {
	if len(l.out) == 0 || l.flushing || l.writing || l.nc == nil || l.dead.Load() {
		return nil
	}
	n, ok, err := l.rw.try(l.out)
	l.outReplies, l.outEager = 0, false
	switch {
	case err != nil:
		l.out = l.out[:0]
		return fmt.Errorf("rdma: write to %v: %w: %w", l.p.id, farmem.ErrNodeDown, err)
	case ok && n == len(l.out):
		l.out = l.out[:0]
	default:
		l.out = l.out[:copy(l.out, l.out[n:])]
		l.flushing = true
		l.kick <- struct{}{}
	}
	return nil
}

// holdReader marks the reader role taken (l.rmu held): frames posted from now on wait in the
// output buffer for the reader to write them before it next waits on the socket.
func (l *tlink) holdReader() {
	l.reading.Store(true)
	l.wmu.Lock()
	l.rflush = true
	l.wmu.Unlock()
}

// dropReader marks the reader role free (l.rmu held) and writes what waits for the reader.
func (l *tlink) dropReader() {
	l.reading.Store(false)
	l.readerFlush(false, false)
}

// post implements qp: the background reader collects the answers.
func (q *tcpQP) post(ctx context.Context, b *farmem.Batch, idx []int, s sink) {
	q.send(ctx, b, idx, s, false)
	q.l.kickReader()
}

// parker implements qp: nil (post and a plain Parker). Client.Post gives a batch to a tcp queue
// pair with the state startPost makes, whose parker reads the connection as it waits.
func (q *tcpQP) parker() transport.Parker { return nil }

// postWaited implements qp: the answers are read by whoever waits on the batch's parker (or,
// if no one does, by the background reader at the monitor's next look), and the frame is
// lazy: while no one reads the connection it waits in the output buffer for the poster's next
// block (writeLocked).
func (q *tcpQP) postWaited(ctx context.Context, b *farmem.Batch, idx []int, s sink) {
	q.send(ctx, b, idx, s, true)
}

// waiter is what a goroutine waits for on a connection: fired reports whether it was signaled,
// consuming the signal, and ready returns a channel sent on when it is, for waiting without
// reading (a receive from it may also be a stale signal: waiters recheck their condition).
type waiter interface {
	fired() bool
	ready() <-chan struct{}
}

// chanWaiter is a waiter signaled by a send on a one-slot channel.
type chanWaiter chan struct{}

func (c chanWaiter) fired() bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func (c chanWaiter) ready() <-chan struct{} { return c }

// block waits for w without reading, until ctx ends.
func block(ctx context.Context, w waiter) error {
	ch := w.ready()
	if w.fired() {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// clientParker is a Pending's parker that no reader of a queue pair serves (a batch to several
// nodes, or one posted while its connection had a reader): before it blocks, the waiting
// client writes the lazy frames it left on its connections.
type clientParker struct {
	c  *client
	ch chan struct{}
}

func (p *clientParker) Park(ctx context.Context) error {
	p.c.flushLazy(nil)
	select {
	case <-p.ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *clientParker) Unpark() {
	select {
	case p.ch <- struct{}{}:
	default:
	}
}

// do implements qp: the caller reads the answer itself if no one else is reading. Taking the
// reader role before it sends, it hands its frame to its own read of the socket, which writes
// it and then waits for the answer without a read that would find nothing (rawRead).
func (q *tcpQP) do(ctx context.Context, b *farmem.Batch, s sink, done chan struct{}) error {
	q.c.flushLazy(q)
	if l := q.l; l.up.Load() && l.rmu.TryLock() {
		l.holdReader()
		q.send(ctx, b, nil, s, false)
		err := l.readFor(ctx, chanWaiter(done))
		l.leave()
		return err
	}
	q.send(ctx, b, nil, s, false)
	return q.await(ctx, chanWaiter(done))
}

// send registers and sends the ops of b at idx, their frames lazy (writeLocked) if lazy. It
// never blocks on the window: frames that find this channel's window of outstanding requests
// full (a hung node) wait in its backlog, sent in order by a goroutine as slots free, so the
// client goes on posting to other nodes.
func (q *tcpQP) send(ctx context.Context, b *farmem.Batch, idx []int, s sink, lazy bool) {
	at := nanotime() // one clock read: the post's monotonic time, and the expiry's wall time
	if at-wallSynced.Load() > int64(wallSync) {
		syncWall()
	}
	q.sendFrom(deferred{ctx: ctx, b: b, idx: idx, s: s, expiry: wallAt(at) + int64(q.f.down), at: at, lazy: lazy}, false)
}

// deferred is the rest of a send, from its op lo on, waiting in a queue pair's backlog.
type deferred struct {
	ctx    context.Context
	b      *farmem.Batch
	idx    []int
	s      sink
	lo     int
	expiry int64 // the requests' expiry (wire.AppendBatchHeader), from the post's time
	at     int64 // the post's time (nanotime)
	lazy   bool  // its frames are lazy, if its poster sends them (not the backlog's goroutine)
}

// sendFrom sends d's ops from d.lo on. With drain false (the poster) it defers the rest to the
// backlog when the window is full or the backlog is not empty; with drain true (the backlog's
// goroutine) it waits for slots.
func (q *tcpQP) sendFrom(d deferred, drain bool) {
	b, idx, s := d.b, d.idx, d.s
	n := len(b.Ops)
	if idx != nil {
		n = len(idx)
	}
	at := func(k int) int {
		if idx == nil {
			return k
		}
		return idx[k]
	}
	failFrom := func(lo int, err error) { failOps(b, idx, lo, n, s, err) }
	key, ok := q.p.keyInfo()
	if !ok {
		// The node's region key is learned from its first handshake.
		var err error
		if key, err = q.awaitKey(d.ctx); err != nil {
			failFrom(d.lo, err)
			return
		}
	}
	for lo := d.lo; lo < n; {
		// A frame holds as many ops as fit, counting their results too.
		req, res, hi, signaled := wire.BatchHeaderSize, 2, lo, false
		for hi < n {
			op := &b.Ops[at(hi)]
			r, a := wire.OpSize(op), wire.ResultSize(op)
			if hi > lo && (req+r > wire.DefaultMaxFrame || res+a > wire.DefaultMaxFrame) {
				break
			}
			req, res = req+r, res+a
			signaled = signaled || !op.Unsignaled
			hi++
		}
		var id, seq uint64
		sl := qslot{b: b, idx: idx, lo: lo, hi: hi, sink: s, expiry: d.expiry, at: d.at}
		if drain {
			sl.at = 0 // it takes its slot now, long after its post
			if signaled {
				var err error
				if id, seq, err = q.acquire(d.ctx, sl); err != nil {
					failFrom(lo, err)
					return
				}
			}
		} else {
			var full bool
			var err error
			if id, seq, full, err = q.tryAcquire(sl, signaled); err != nil {
				failFrom(lo, err)
				return
			}
			if full {
				d.lo = lo
				q.deferSend(d)
				return
			}
		}
		if err := q.sendBatch(id, seq, b, at, lo, hi, key, d.expiry, d.lazy && !drain); err != nil {
			failFrom(hi, err) // the frame's own ops are failed with its slot
			return
		}
		lo = hi
	}
}

// tryAcquire is acquire without waiting, for a frame that needs a slot (signaled) or not: it
// reports full, taking nothing, when the window is full or frames already wait in the backlog
// (which they must not be overtaken by).
func (q *tcpQP) tryAcquire(sl qslot, signaled bool) (id, seq uint64, full bool, err error) {
	l := q.l
	l.mu.Lock()
	switch {
	case q.state == qpDead:
		err = q.err
	case len(q.backlog) > 0:
		full = true
	case signaled:
		var ok bool
		id, seq, ok = l.takeLocked(q, sl)
		full = !ok
	}
	l.mu.Unlock()
	return id, seq, full, err
}

// deferSend queues d in the backlog, starting the goroutine that drains it if it is idle.
func (q *tcpQP) deferSend(d deferred) {
	q.l.mu.Lock()
	q.backlog = append(q.backlog, d)
	start := len(q.backlog) == 1
	q.l.mu.Unlock()
	if start {
		go q.drainBacklog()
	}
}

// drainBacklog sends the backlog's frames in order, each waiting for a slot (the channel's
// death or the post's context ending fails the ops still waiting), until it is empty.
func (q *tcpQP) drainBacklog() {
	l := q.l
	for {
		l.mu.Lock()
		d := q.backlog[0]
		l.mu.Unlock()
		q.sendFrom(d, true)
		l.mu.Lock()
		q.backlog[0] = deferred{}
		q.backlog = q.backlog[1:]
		empty := len(q.backlog) == 0
		if empty {
			q.backlog = nil
		}
		l.mu.Unlock()
		if empty {
			return
		}
	}
}

// awaitKey waits for the node's first handshake to tell its region key.
func (q *tcpQP) awaitKey(ctx context.Context) (uint32, error) {
	t := time.NewTimer(q.f.down)
	defer t.Stop()
	select {
	case <-q.p.ready:
		key, _ := q.p.keyInfo()
		return key, nil
	case <-q.deadCh:
		return 0, q.deadErr()
	case <-t.C:
		return 0, fmt.Errorf("rdma: %v did not answer for %v: %w", q.p.id, q.f.down, farmem.ErrNodeDown)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func (q *tcpQP) deadErr() error {
	q.l.mu.Lock()
	defer q.l.mu.Unlock()
	return q.err
}

func (l *tlink) deadErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// acquire registers an outstanding request, waiting for a free slot if the limit is reached,
// and returns its id and sequence number.
func (q *tcpQP) acquire(ctx context.Context, sl qslot) (id, seq uint64, err error) {
	l := q.l
	defer func() {
		l.mu.Lock()
		q.slotWaiters--
		l.mu.Unlock()
	}()
	l.mu.Lock()
	q.slotWaiters++ // from here on, a slot's release signals slotCh
	l.mu.Unlock()
	for {
		l.mu.Lock()
		if q.state == qpDead {
			err := q.err
			l.mu.Unlock()
			return 0, 0, err
		}
		if id, seq, ok := l.takeLocked(q, sl); ok {
			l.mu.Unlock()
			return id, seq, nil
		}
		l.mu.Unlock()
		// The slots free up as their answers are read: with no verb's goroutine reading
		// (their posters may not wait for a while), the background reader must, or the
		// backlog would wait for the monitor's next look, past its frames' expiry.
		if !l.reading.Load() {
			l.kickReader()
		}
		select {
		case <-q.slotCh:
		case <-q.deadCh:
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		}
	}
}

// takeLocked registers sl in a free slot of the link for channel q, if q's window has room
// (l.mu held).
func (l *tlink) takeLocked(q *tcpQP, sl qslot) (id, seq uint64, ok bool) {
	if int(q.n.Load()) >= q.limit {
		return 0, 0, false
	}
	var i uint32
	if k := len(l.free); k > 0 {
		i = l.free[k-1]
		l.free = l.free[:k-1]
	} else {
		l.slots = append(l.slots, qslot{})
		i = uint32(len(l.slots) - 1)
	}
	sl.q = q
	sl.gen = l.slots[i].gen + 1
	sl.busy = true
	q.seq++
	sl.seq = q.seq
	l.slots[i] = sl
	n := q.n.Load()
	if n == 0 || l.outstanding.Load() == 0 {
		at := sl.at
		if at == 0 {
			at = nanotime()
		}
		if n == 0 {
			q.lastAns.Store(at)
		}
		if l.outstanding.Load() == 0 {
			l.lastRecv.Store(at)
		}
	}
	q.n.Store(n + 1)
	l.outstanding.Add(1)
	return l.slotID(i, sl), sl.seq, true
}

// slotID is the request id of slot i holding sl: on a shared link, the channel's number, the
// slot's generation (16 bits) and i; on an unshared one, the generation (32 bits) and i.
func (l *tlink) slotID(i uint32, sl qslot) uint64 {
	if l.shared {
		return wire.ChannelID(sl.q.ch) | uint64(uint16(sl.gen))<<32 | uint64(i)
	}
	return uint64(sl.gen)<<32 | uint64(i)
}

// slotOf returns the index of the busy slot id names, if it holds a request of the reply's
// kind (a Call or not) (l.mu held).
func (l *tlink) slotOf(id uint64, call bool) (uint32, bool) {
	i := uint32(id)
	if int(i) >= len(l.slots) {
		return 0, false
	}
	sl := &l.slots[i]
	if !sl.busy || l.slotID(i, *sl) != id || (sl.call != nil) != call {
		return 0, false
	}
	return i, true
}

// takeOutLocked empties slot i, answered, and returns what it held; wake reports whether its
// channel has a goroutine waiting for a slot (l.mu held).
func (l *tlink) takeOutLocked(i uint32, recv int64) (sl qslot, wake bool) {
	sl = l.slots[i]
	l.slots[i] = qslot{gen: sl.gen}
	l.free = append(l.free, i)
	q := sl.q
	q.n.Add(-1)
	if sl.call == nil {
		// Batch frames are answered in order: this answer confirms every frame up to it.
		q.confirmed = max(q.confirmed, sl.seq)
	}
	if q.lastAns.Load() != recv {
		q.lastAns.Store(recv)
	}
	return sl, q.slotWaiters > 0
}

// release frees the slot a reply names, if it holds a request of the reply's kind (a Call or
// not), and returns what it held.
func (l *tlink) release(id uint64, call bool) (qslot, bool) {
	recv := l.lastRecv.Load()
	l.mu.Lock()
	i, ok := l.slotOf(id, call)
	if !ok {
		l.mu.Unlock()
		return qslot{}, false
	}
	sl, wake := l.takeOutLocked(i, recv)
	l.outstanding.Add(-1)
	l.mu.Unlock()
	if wake {
		select {
		case sl.q.slotCh <- struct{}{}:
		default:
		}
	}
	return sl, true
}

// sendBatch encodes ops [lo, hi) as a Batch frame and writes it, or queues it while the
// connection is being set up. id is the frame's slot's (0: a frame of unsignaled ops only).
func (q *tcpQP) sendBatch(id, seq uint64, b *farmem.Batch, at func(int) int, lo, hi int, key uint32, expiry int64, lazy bool) error {
	l := q.l
	unsignaled := false
	for k := lo; k < hi && !unsignaled; k++ {
		unsignaled = b.Ops[at(k)].Unsignaled
	}
	if unsignaled {
		l.mu.Lock()
		if seq == 0 { // a frame of unsignaled ops only: it has no slot
			q.seq++
			seq = q.seq
		}
		q.unsigSeq = seq
		l.mu.Unlock()
	}
	slotted := id != 0
	if !slotted {
		id = wire.ChannelID(q.ch) // (0 on an unshared link)
	}
	l.wmu.Lock()
	buf := q.attachLocked(l.wbuf[:0])
	buf, start := wire.BeginFrame(buf, wire.TypeBatch, 0, id)
	buf = wire.AppendBatchHeader(buf, hi-lo, expiry)
	for k := lo; k < hi; k++ {
		buf = wire.AppendOp(buf, &b.Ops[at(k)], key)
	}
	buf = wire.EndFrame(buf, start)
	err := l.writeLocked(q, buf, slotted, lazy && slotted)
	l.wmu.Unlock()
	return err
}

// attachLocked appends the channel's Attach frame to buf if it has not gone into the stream
// yet, on a shared link, so that it goes before the channel's first request (l.wmu held).
func (q *tcpQP) attachLocked(buf []byte) []byte {
	if q.l.shared && !q.attached {
		q.attached = true
		buf = wire.AppendAttach(buf, q.ch, q.c.ClientInfo.ID)
	}
	return buf
}

// writeLocked sends a frame of channel q (nil: of the link itself) (l.wmu held). Frames leave
// in posting order, and pipelined frames share write calls, the way a pipelining client flushes
// its buffer only before it blocks; on a shared link, frames of several clients share them too:
//
//   - A lazy frame (a signaled batch to one node, which its poster will wait on) posted while
//     no one reads the connection is appended to the output buffer, and the channel put on
//     its client's lazy list: the buffer is written by the first of the client's next block in
//     the fabric (a wait on any batch, verb, Call or word: client.flushLazy; the poster's own
//     wait writes it inside its read of the socket, and then waits for the answer without a
//     read that finds nothing), the next reader of the connection (before it waits on the
//     socket), or any other frame's write. Posting thus costs no system call and wakes no
//     goroutine. A frame nobody waits for is written once a look of the monitor (every eighth
//     of the down timeout) finds nothing read on the connection since the previous one: within
//     a quarter of the down timeout.
//   - A frame posted while a reader holds the role waits for that reader to write the buffer
//     before it next waits on the socket, or as it leaves the role; if it is waiting on the
//     socket already, the writer goroutine writes it, with every frame queued meanwhile.
//   - Any other frame is written at once when nothing else is queued or in flight (the lowest
//     latency for a lone verb), else handed to the writer goroutine: whoever finds the writer
//     busy appends its frame and leaves, and the writer's next write carries it.
//
// buf is kept as the scratch buffer unless it grew large.
func (l *tlink) writeLocked(q *tcpQP, buf []byte, reply, lazy bool) error {
	var err error
	switch {
	case l.dead.Load():
		err = l.deadErr()
	case l.nc == nil:
		l.pend = append(l.pend, buf...)
	case lazy && !l.reading.Load() && !l.flushing:
		l.out = append(l.out, buf...)
		l.outReplies++
		if !q.lazyListed {
			q.lazyListed = true
			q.c.listLazy(q)
		}
	case !l.shared && !lazy && !l.flushing && !l.rflush && len(l.out) == 0 && l.outstanding.Load() <= 1:
		if _, werr := l.nc.Write(buf); werr != nil {
			err = fmt.Errorf("rdma: write to %v: %w: %w", l.p.id, farmem.ErrNodeDown, werr)
		}
	case l.shared && q != nil && !lazy && !l.flushing && !l.rflush && q.n.Load() <= 1:
		// A client's lone request on a shared link: its poster writes it, with whatever
		// other clients queued, unless another poster is writing, which then writes it.
		if l.writing {
			l.out = append(l.out, buf...)
			if reply {
				l.outReplies++
			}
			l.outEager = true
			break
		}
		l.out = append(l.out, buf...)
		err = l.writeShared()
	default:
		l.out = append(l.out, buf...)
		if reply {
			l.outReplies++
		}
		l.outEager = true
		if !l.flushing && !l.rflush && !l.writing {
			l.flushing = true
			l.kick <- struct{}{}
		}
	}
	if cap(buf) <= 1<<20 {
		l.wbuf = buf[:0]
	} else {
		l.wbuf = nil
	}
	if err != nil && !l.dead.Load() {
		go l.fail(err)
	}
	return err
}

// writeShared writes the output buffer from the poster's goroutine (l.wmu held; released
// during each write): while it writes, other posters append their frames to the buffer and
// leave, and it writes what they appended, in one more write per round, before it leaves.
// No timer and no hand-off: a lone client's frame is written at once, by its own goroutine.
func (l *tlink) writeShared() error {
	l.writing = true
	defer func() { l.writing = false }()
	data := l.wdata[:0]
	var err error
	for len(l.out) > 0 && err == nil && !l.dead.Load() {
		data = append(data[:0], l.out...)
		l.out, l.outReplies, l.outEager = l.out[:0], 0, false
		nc, rw := l.nc, l.rw
		l.wmu.Unlock()
		// (a raw write first, as the reader's: it does not enter the scheduler)
		n, ok, werr := rw.try(data)
		if werr == nil && (!ok || n < len(data)) {
			_, werr = nc.Write(data[n:])
		}
		l.wmu.Lock()
		if werr != nil {
			err = fmt.Errorf("rdma: write to %v: %w: %w", l.p.id, farmem.ErrNodeDown, werr)
		}
	}
	if cap(data) <= 1<<20 {
		l.wdata = data[:0]
	} else {
		l.wdata = nil
	}
	return err
}

// writer writes the output buffer whenever frames are queued in it, until the connection dies.
func (l *tlink) writer(nc net.Conn) {
	var spare []byte
	for {
		select {
		case <-l.kick:
		case <-l.deadCh:
			return
		}
		for {
			l.wmu.Lock()
			if len(l.out) == 0 {
				l.flushing = false
				l.wmu.Unlock()
				break
			}
			buf := l.out
			l.out, l.outReplies, l.outEager = spare[:0], 0, false
			l.wmu.Unlock()
			if _, err := nc.Write(buf); err != nil {
				l.fail(fmt.Errorf("rdma: write to %v: %w: %w", l.p.id, farmem.ErrNodeDown, err))
				return
			}
			if cap(buf) <= 1<<20 {
				spare = buf[:0]
			} else {
				spare = nil
			}
		}
	}
}

// call sends a Call and waits for its reply (unshared links: Calls go to compute nodes).
func (q *tcpQP) call(ctx context.Context, method uint16, from farmem.ClientID, req []byte) ([]byte, error) {
	if q.l.shared {
		return nil, fmt.Errorf("rdma: call on a shared connection to %v: %w", q.p.id, farmem.ErrNotSupported)
	}
	cw := &callWait{ch: make(chan struct{}, 1)}
	id, _, err := q.acquire(ctx, qslot{call: cw})
	if err != nil {
		return nil, err
	}
	l := q.l
	l.wmu.Lock()
	buf, start := wire.BeginFrame(l.wbuf[:0], wire.TypeCall, 0, id)
	buf = wire.EndFrame(wire.AppendCall(buf, method, from, req), start)
	err = l.writeLocked(q, buf, true, false)
	l.wmu.Unlock()
	if err != nil {
		q.fail(err)
	}
	if err := q.await(ctx, chanWaiter(cw.ch)); err != nil {
		return nil, err
	}
	return cw.reply, cw.err
}

// Reading replies is a role, held with rmu: a verb's own goroutine takes it when it is free
// and reads until its answer is in (a lone verb then costs no goroutine hand-off, about a third
// of a loopback round trip), and otherwise the connection's background reader holds it while
// requests are outstanding. Whoever reads completes every request its frames answer.

// bgReader reads replies whenever requests are outstanding and no verb's goroutine is reading,
// until the connection dies.
func (l *tlink) bgReader() {
	for {
		select {
		case <-l.bgKick:
		case <-l.deadCh:
			return
		}
		l.rmu.Lock()
		l.holdReader()
		for l.outstanding.Load() > 0 && !l.dead.Load() {
			if err := l.readOne(); err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) && l.unnudge() {
					continue
				}
				l.dropReader()
				l.rmu.Unlock()
				l.fail(err)
				return
			}
		}
		l.dropReader()
		l.rmu.Unlock()
	}
}

// kickReader makes sure outstanding requests have a reader.
func (l *tlink) kickReader() {
	select {
	case l.bgKick <- struct{}{}:
	default:
	}
}

// await waits for done: it reads replies itself if no one else does, else lets the background
// reader deliver. It returns ctx's error if ctx ends first.
func (q *tcpQP) await(ctx context.Context, done waiter) error {
	q.c.flushLazy(q)
	if done.fired() {
		return nil
	}
	l := q.l
	if l.shared && q.c.lead != nil {
		return q.follow(ctx, done)
	}
	if !l.up.Load() || !l.rmu.TryLock() {
		l.kickReader()
		return block(ctx, done)
	}
	l.holdReader()
	err := l.readFor(ctx, done)
	l.dropReader()
	l.rmu.Unlock()
	// Requests still outstanding are read by their own waiters, by the background reader if
	// post kicked it, or at the latest when the monitor finds them without a reader.
	return err
}

// follow is await on a shared link: it reads the answers itself when the reader role is free,
// else waits for its answer, or for the role, which a reader leaving it with requests
// outstanding hands to one of the waiting clients (handOff) rather than to the background
// reader: the client woken is one whose answer is on its way, so the hand-off costs no
// goroutine beyond those the answers wake anyway.
func (q *tcpQP) follow(ctx context.Context, done waiter) error {
	l, lead := q.l, q.c.lead
	for {
		if l.up.Load() && l.rmu.TryLock() {
			l.holdReader()
			err := l.readFor(ctx, done)
			l.leave()
			return err
		}
		if !l.up.Load() {
			l.kickReader() // (the link's own goroutine reads once it is set up)
			return block(ctx, done)
		}
		l.fmu.Lock()
		l.followers = append(l.followers, lead)
		l.fmu.Unlock()
		ch := done.ready()
		if done.fired() {
			l.unfollow(lead)
			return nil
		}
		// The reader may have left before this client was listed, handing the role to no one.
		if !l.reading.Load() && l.rmu.TryLock() {
			l.unfollow(lead)
			l.holdReader()
			err := l.readFor(ctx, done)
			l.leave()
			return err
		}
		select {
		case <-ch:
			l.unfollow(lead)
			return nil
		case <-lead:
			// Handed the role (and taken off the list): read, unless the answer came.
			if done.fired() {
				l.handOff()
				return nil
			}
		case <-l.deadCh:
			l.unfollow(lead)
			return block(ctx, done) // (the link's failure completes it)
		case <-ctx.Done():
			l.unfollow(lead)
			return ctx.Err()
		}
	}
}

// unfollow takes lead off the followers, and drops a hand-off it may have been sent meanwhile,
// passing it on.
func (l *tlink) unfollow(lead chan struct{}) {
	l.fmu.Lock()
	for i, f := range l.followers {
		if f == lead {
			l.followers = append(l.followers[:i], l.followers[i+1:]...)
			break
		}
	}
	l.fmu.Unlock()
	select {
	case <-lead:
		l.handOff()
	default:
	}
}

// leave gives up the reader role (l.rmu held) and hands it on if requests are outstanding.
func (l *tlink) leave() {
	l.dropReader()
	l.rmu.Unlock()
	l.handOff()
}

// handOff gives the reader role to a waiting client if requests are outstanding and no one
// reads.
func (l *tlink) handOff() {
	if l.outstanding.Load() == 0 || l.reading.Load() {
		return
	}
	l.fmu.Lock()
	if len(l.followers) == 0 {
		l.fmu.Unlock()
		return
	}
	lead := l.followers[0]
	l.followers = append(l.followers[:0], l.followers[1:]...)
	// (sent under l.fmu: a follower that takes itself off the list then finds it, and
	// passes it on, unfollow)
	select {
	case lead <- struct{}{}:
	default:
	}
	l.fmu.Unlock()
}

// readFor reads replies (l.rmu held) until done, ctx ends, or the connection fails.
func (l *tlink) readFor(ctx context.Context, done waiter) error {
	if ctx.Done() != nil {
		// A canceled context interrupts the read through a deadline; frames are only ever
		// consumed whole, so the next reader finds the stream intact.
		l.dlMu.Lock()
		l.dlOwner++
		tok := l.dlOwner
		l.dlMu.Unlock()
		stop := context.AfterFunc(ctx, func() {
			l.dlMu.Lock()
			if l.dlOwner == tok {
				_ = l.conn.SetReadDeadline(time.Unix(1, 0))
			}
			l.dlMu.Unlock()
		})
		defer func() {
			if !stop() {
				l.dlMu.Lock()
				l.dlOwner++
				_ = l.conn.SetReadDeadline(time.Time{})
				l.dlMu.Unlock()
			} else {
				l.dlMu.Lock()
				l.dlOwner++
				l.dlMu.Unlock()
			}
		}()
	}
	for {
		if done.fired() {
			l.readBuffered()
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err // (a large frame may have cleared the deadline)
		}
		if err := l.readOne(); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() != nil && !l.dead.Load() {
				return ctx.Err()
			}
			if errors.Is(err, os.ErrDeadlineExceeded) && l.unnudge() {
				continue
			}
			l.fail(err)
			_ = block(context.Background(), done) // fail completed it
			return nil
		}
	}
}

// nudge makes the reader of a shared link, if it waits on the socket, look again at what it
// waits for (a read deadline in the past interrupts its read): a channel failed alone, and the
// reader may wait for an answer of it that will never come, on a connection that stays open.
func (l *tlink) nudge() {
	if !l.reading.Load() || !l.up.Load() {
		return // (a reader checks what it waits for before it reads)
	}
	l.nudged.Store(true)
	l.dlMu.Lock()
	_ = l.conn.SetReadDeadline(time.Unix(1, 0))
	l.dlMu.Unlock()
}

// unnudge clears a nudge's deadline after it interrupted a read; it reports whether a nudge
// was pending (else the deadline was a canceled context's).
func (l *tlink) unnudge() bool {
	if !l.nudged.Swap(false) {
		return false
	}
	l.dlMu.Lock()
	_ = l.conn.SetReadDeadline(time.Time{})
	l.dlMu.Unlock()
	return true
}

// readBuffered completes what the whole frames already in the read buffer answer (l.rmu held),
// so a reader leaving the role hands the batches that were answered in the same read of the
// socket their results, and their waiters find them done without taking the role in turn. It
// makes no system call; a connection failure it meets fails the connection.
func (l *tlink) readBuffered() {
	for {
		n := l.br.Buffered()
		if n < wire.HeaderSize {
			return
		}
		hb, _ := l.br.Peek(wire.HeaderSize)
		h, err := wire.ParseHeader(hb, wire.DefaultMaxFrame)
		if err != nil || wire.HeaderSize+int(h.Len) > n {
			return // (readOne reports a bad header to the next reader)
		}
		if err := l.readOne(); err != nil {
			l.fail(err)
			return
		}
	}
}

// readOne reads one frame and completes what it answers (l.rmu held).
func (l *tlink) readOne() error {
	hb, err := l.br.Peek(wire.HeaderSize)
	if err != nil {
		return l.readErr(err)
	}
	h, err := wire.ParseHeader(hb, wire.DefaultMaxFrame)
	if err != nil {
		return l.protoErr(err)
	}
	total := wire.HeaderSize + int(h.Len)
	var p []byte
	if total <= l.br.Size() {
		fb, err := l.br.Peek(total)
		if err != nil {
			return l.readErr(err)
		}
		if h.Type == wire.TypeResult && l.br.Buffered() > total {
			if done, err := l.resultRun(h, total); done {
				return err
			}
		}
		p = fb[wire.HeaderSize:]
		defer func() { _, _ = l.br.Discard(total) }()
	} else {
		// Too large to peek whole: it is read to the end whatever a context says.
		l.dlMu.Lock()
		l.dlOwner++
		_ = l.conn.SetReadDeadline(time.Time{})
		l.dlMu.Unlock()
		_, _ = l.br.Discard(wire.HeaderSize)
		if int(h.Len) <= cap(l.rbuf) {
			p = l.rbuf[:h.Len]
		} else {
			p = make([]byte, h.Len)
		}
		if _, err := io.ReadFull(l.br, p); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				err = io.ErrUnexpectedEOF // the stream is broken mid-frame
			}
			return l.readErr(err)
		}
	}
	// (lastRecv was set as the frame's bytes arrived: progressReader)
	l.pinged.Store(false)
	switch h.Type {
	case wire.TypeResult:
		err = l.result(h, p, &l.rs)
	case wire.TypeCallReply:
		err = l.callReply(h, p)
	case wire.TypePong:
	case wire.TypeDetached:
		err = l.detached(h, p)
	case wire.TypeError:
		_, msg, _ := wire.DecodeMessage(p)
		err = fmt.Errorf("rdma: %v closed the connection: %s: %w", l.p.id, msg, farmem.ErrNodeDown)
	default:
		err = fmt.Errorf("rdma: unexpected %v frame from %v: %w", h.Type, l.p.id, wire.ErrMalformed)
	}
	if errors.Is(err, wire.ErrMalformed) {
		return l.protoErr(err)
	}
	return err
}

func (l *tlink) readErr(err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	return fmt.Errorf("rdma: connection to %v: %w: %w", l.p.id, farmem.ErrNodeDown, err)
}

func (l *tlink) protoErr(err error) error {
	l.f.log.Warn("closing connection: protocol violation by the node", "peer", l.p.id.String(), "reason", err.Error())
	return fmt.Errorf("rdma: %v: %w: %w", l.p.id, farmem.ErrNodeDown, err)
}

// result completes the ops a Result frame answers. On a shared link, a Result that answers no
// outstanding request is dropped: it answers a request of a channel that failed (its client
// closed it, or gave up on it) while the request was in flight.
func (l *tlink) result(h wire.Header, p []byte, rs *wire.Results) error {
	sl, ok := l.release(h.ID, false)
	if !ok {
		if l.shared {
			return nil
		}
		return errUnknownResult(h.ID)
	}
	sl.q.c.Counters.ReceiveAhead(aheadIn(sl))
	return l.resultOf(sl, h, p, rs)
}

// detached takes a Detached frame: the node no longer serves the channel it names (it lost
// frames of the channel's client while silent to it, or refused to attach it), so the channel
// fails, at once (the node applies nothing more of it), and its client's next op opens another.
func (l *tlink) detached(h wire.Header, p []byte) error {
	_, msg, err := wire.DecodeMessage(p)
	if err != nil || !l.shared || wire.ChannelOf(h.ID) == 0 {
		return fmt.Errorf("rdma: bad detached frame from %v: %w", l.p.id, wire.ErrMalformed)
	}
	l.mu.Lock()
	q := l.chans[wire.ChannelOf(h.ID)]
	l.mu.Unlock()
	if q != nil {
		q.failChan(fmt.Errorf("rdma: %v detached client %d: %s: %w", l.p.id, q.c.ClientInfo.ID, msg, farmem.ErrNodeDown), false, true)
	}
	return nil
}

// aheadIn is the bytes the signaled ops of the released slot sl receive if all succeed
// (transport.ResultBytes), which the reader counts before it completes them.
func aheadIn(sl qslot) uint64 {
	var n uint64
	for k := sl.lo; k < sl.hi; k++ {
		n += transport.ResultBytes(&sl.b.Ops[opAt(sl.idx, k)])
	}
	return n
}

func errUnknownResult(id uint64) error {
	return fmt.Errorf("rdma: result for unknown request %#x: %w", id, wire.ErrMalformed)
}

// resultOf completes the ops of the released slot sl with the Result frame (h, p) that
// answered it. The caller has counted the bytes they receive if all succeed (aheadIn); each
// op's outcome is counted against that before it is completed.
func (l *tlink) resultOf(sl qslot, h wire.Header, p []byte, rs *wire.Results) error {
	ctr := &sl.q.c.Counters
	complete := func(i int, val uint64, err error) {
		ctr.CountResultAhead(&sl.b.Ops[i], val, err)
		sl.sink.counted(i, val, err)
	}
	b := sl.b
	at := func(k int) int {
		if sl.idx == nil {
			return k
		}
		return sl.idx[k]
	}
	signaled, last := 0, -1
	for k := sl.lo; k < sl.hi; k++ {
		if !b.Ops[at(k)].Unsignaled {
			signaled++
			last = k
		}
	}
	partial := h.Flags&wire.FlagPartial != 0
	n, err := rs.Reset(p)
	if err == nil && (n > signaled || (n < signaled && !partial)) {
		err = fmt.Errorf("rdma: %d results for %d signaled ops: %w", n, signaled, wire.ErrMalformed)
	}
	// After the last signaled op is completed the batch may be reused: b is not touched again.
	for k := sl.lo; k <= last; k++ {
		i := at(k)
		op := &b.Ops[i]
		if op.Unsignaled {
			continue
		}
		if err != nil || n == 0 {
			e := err
			if e == nil {
				e = fmt.Errorf("rdma: %v went down in the middle of the batch: %w", l.p.id, farmem.ErrNodeDown)
			} else {
				e = fmt.Errorf("rdma: %v: %w: %w", l.p.id, farmem.ErrNodeDown, e)
			}
			complete(i, 0, e)
			continue
		}
		n--
		st, val, data, e := rs.Next(op.Kind, len(op.Buf))
		switch {
		case e != nil:
			err = e
			complete(i, 0, fmt.Errorf("rdma: %v: %w: %w", l.p.id, farmem.ErrNodeDown, e))
		case st != wire.StatusOK:
			complete(i, 0, fmt.Errorf("rdma: %s of %d bytes at %v: %w", op.Kind, transport.OpLen(op), op.Addr, st.Err()))
		default:
			if op.Kind == farmem.OpRead {
				copy(op.Buf, data)
			}
			complete(i, val, nil)
		}
	}
	if err == nil {
		err = rs.End()
	}
	if partial && err == nil {
		err = fmt.Errorf("rdma: %v went down in the middle of a batch: %w", l.p.id, farmem.ErrNodeDown)
	}
	return err
}

// callReply completes a Call.
func (l *tlink) callReply(h wire.Header, p []byte) error {
	sl, ok := l.release(h.ID, true)
	if !ok {
		return fmt.Errorf("rdma: call reply for unknown request %#x: %w", h.ID, wire.ErrMalformed)
	}
	cw := sl.call
	st, body, msg, err := wire.DecodeReply(p)
	switch {
	case err != nil:
		cw.err = fmt.Errorf("rdma: call to %v: %w: %w", l.p.id, farmem.ErrNodeDown, err)
	case st == wire.StatusOK:
		cw.reply = append([]byte{}, body...)
	case st == wire.Status(transport.CodeRemote) && len(msg) > 0:
		cw.err = transport.RemoteError(transport.Code(msg[0]), msg[1:])
	default:
		cw.err = fmt.Errorf("rdma: call to %v: %s: %w", l.p.id, msg, st.Err())
	}
	cw.ch <- struct{}{}
	return err
}

// fail fails the channel: every request outstanding on it fails with err, and if unsignaled
// ops are unconfirmed and no failing op posted with or after them reports it, the client's next
// op to the node reports their possible loss. On a link of its own the link closes with it; a
// shared link goes on serving its other channels. It is idempotent.
func (q *tcpQP) fail(err error) {
	if !q.l.shared {
		q.l.fail(err)
		return
	}
	q.failChan(err, false, false)
}

// failSilent is fail for a node the client gives up on while its side of the connection may
// still be open (silent past the down timeout): a paused node may yet read the requests in its
// socket, so each batch request is reported failed only from its expiry on, when the node
// refuses it. A connection the node closed or reset, or one that broke, fails at once: the node
// reads nothing more from it.
func (q *tcpQP) failSilent(err error) {
	if !q.l.shared {
		q.l.failSilent(err)
		return
	}
	q.failChan(err, true, false)
}

// fail kills the link, failing every channel on it (tcpQP.fail). It is idempotent.
func (l *tlink) fail(err error) { l.failWith(err, false, 0) }

// failSilent is fail for a node that went silent (tcpQP.failSilent).
func (l *tlink) failSilent(err error) { l.failWith(err, true, 0) }

// chanFailure is what failing a channel leaves to do once the link's lock is released.
type chanFailure struct {
	q    *tcpQP
	busy []qslot
	lost bool
}

// failLocked marks channel q dead with err and takes its outstanding requests out of the
// link's slots (l.mu held).
func (l *tlink) failLocked(q *tcpQP, err error) chanFailure {
	q.state, q.err = qpDead, err
	q.dead.Store(true)
	// Unsignaled ops may be lost silently unless a signaled op posted with or after them fails
	// here and so tells the client.
	f := chanFailure{q: q, lost: q.unsigSeq > q.confirmed}
	if q.n.Load() > 0 {
		for i := range l.slots {
			if sl := &l.slots[i]; sl.busy && sl.q == q {
				if sl.call == nil && sl.seq >= q.unsigSeq {
					f.lost = false
				}
				f.busy = append(f.busy, *sl)
				*sl = qslot{gen: sl.gen}
				l.free = append(l.free, uint32(i))
			}
		}
		l.outstanding.Add(-q.n.Load())
		q.n.Store(0)
	}
	if l.shared && l.chans[q.ch] == q {
		delete(l.chans, q.ch)
	}
	return f
}

// finish fails what failLocked took, with err (l.mu released): silent, each batch request only
// from its expiry on.
func (f chanFailure) finish(err error, silent bool, now int64) {
	q := f.q
	close(q.deadCh)
	if f.lost && !errors.Is(err, farmem.ErrClosed) {
		q.c.markLost(q.p.id, err)
	}
	for _, sl := range f.busy {
		if sl.call != nil {
			sl.call.err = err
			sl.call.ch <- struct{}{}
			continue
		}
		if wait := time.Duration(sl.expiry - now); wait > 0 && silent {
			// The frame may sit unread in a paused node's socket: it is reported failed only
			// once the node would refuse it (its expiry), so a failed op never applies later.
			time.AfterFunc(wait, func() {
				failOps(sl.b, sl.idx, sl.lo, sl.hi, sl.sink, err)
				f.nudge()
			})
			continue
		}
		failOps(sl.b, sl.idx, sl.lo, sl.hi, sl.sink, err)
	}
	f.nudge()
}

// nudge wakes the reader of a shared link the failure leaves open (nudge).
func (f chanFailure) nudge() {
	if l := f.q.l; l.shared && !l.dead.Load() {
		l.nudge()
	}
}

// failChan fails channel q of a shared link alone (see fail; silent as failSilent). Unless the
// node told it so (told: a Detached frame), the channel is detached with a Detach frame that
// follows its requests, so the node forgets it; requests of its that the node still answers
// are dropped (result).
func (q *tcpQP) failChan(err error, silent, told bool) {
	l := q.l
	l.mu.Lock()
	if q.state == qpDead {
		l.mu.Unlock()
		return
	}
	f := l.failLocked(q, err)
	orphan := len(l.chans) == 0
	l.mu.Unlock()
	if orphan {
		l.f.retireOrphan(l)
	}
	if !told {
		l.wmu.Lock()
		if q.attached && !l.dead.Load() {
			_ = l.writeLocked(nil, wire.AppendDetach(l.wbuf[:0], q.ch), false, false)
		}
		l.wmu.Unlock()
	}
	f.finish(err, silent, time.Now().UnixNano())
}

// failWith is fail (silent false) or failSilent; with idleOlder not 0 it fails the link only
// if it is set up to another incarnation than idleOlder with nothing outstanding or waiting
// for a window (retireIdle), deciding under the same lock as posts take their slots.
func (l *tlink) failWith(err error, silent bool, idleOlder uint64) {
	l.mu.Lock()
	if l.state == qpDead || (idleOlder != 0 && (l.state != qpUp || l.inc == idleOlder || l.outstanding.Load() != 0 || l.backlogLocked())) {
		l.mu.Unlock()
		return
	}
	l.state, l.err = qpDead, err
	l.dead.Store(true)
	qs := l.channelsLocked()
	fs := make([]chanFailure, 0, len(qs))
	for _, q := range qs {
		fs = append(fs, l.failLocked(q, err))
	}
	conn := l.conn
	l.mu.Unlock()
	close(l.deadCh)
	if conn != nil {
		_ = conn.Close()
	}
	l.f.removeLive(l)
	now := time.Now().UnixNano()
	for _, f := range fs {
		f.finish(err, silent, now)
	}
}

// backlogLocked reports whether a channel of the link has sends waiting for its window (l.mu
// held).
func (l *tlink) backlogLocked() bool {
	for _, q := range l.channelsLocked() {
		if len(q.backlog) > 0 {
			return true
		}
	}
	return false
}

// check is the monitor's look at the connection: it makes sure outstanding requests have a
// reader, fails the connection if nothing came back for the down timeout, and pings it after
// a quarter of that.
func (l *tlink) check(now int64, down time.Duration) {
	if l.outstanding.Load() == 0 || l.dead.Load() {
		return
	}
	idle := time.Duration(now - l.lastRecv.Load())
	if !l.reading.Load() && idle >= max(down/8, time.Millisecond) {
		// Answers no one waits for (or lazy frames no one writes): nothing was read for a
		// look. A client that keeps batches in flight and reads their answers as it waits is
		// left alone: the background reader, once started, holds the role while requests are
		// outstanding, and its waiters would then be handed their answers across goroutines.
		l.kickReader()
	}
	if idle > down && l.up.Load() && readable(l.conn) {
		// An answer is waiting unread: the node is alive; this process is slow to read.
		l.lastRecv.Store(now)
		l.kickReader()
		return
	}
	if idle > down {
		l.failSilent(fmt.Errorf("rdma: %v did not answer for %v: %w", l.p.id, idle.Round(time.Millisecond), farmem.ErrNodeDown))
		return
	}
	if l.shared && idle <= down/2 {
		l.checkChannels(now, down)
	}
	if idle > down/4 && !l.pinged.Swap(true) {
		if l.wmu.TryLock() {
			if l.nc != nil {
				l.out = wire.AppendHeader(l.out, wire.Header{Type: wire.TypePing})
				if !l.flushing && !l.writing {
					l.flushing = true
					l.kick <- struct{}{}
				}
			}
			l.wmu.Unlock()
		}
	}
}

// checkChannels fails, each alone, the channels of a shared link that got no answer for the
// down timeout while the node answered the link (the check saw it answer within half of it): a
// partition of their clients from the node, as the node drops their frames. As for a silent
// node, their requests are reported failed from their expiry on.
func (l *tlink) checkChannels(now int64, down time.Duration) {
	var cut []*tcpQP
	l.mu.Lock()
	for _, q := range l.chans {
		if q.n.Load() > 0 && time.Duration(now-q.lastAns.Load()) > down {
			cut = append(cut, q)
		}
	}
	l.mu.Unlock()
	for _, q := range cut {
		idle := time.Duration(now - q.lastAns.Load())
		q.failChan(fmt.Errorf("rdma: %v did not answer client %d for %v: %w", l.p.id, q.c.ClientInfo.ID, idle.Round(time.Millisecond), farmem.ErrNodeDown), true, false)
	}
}
