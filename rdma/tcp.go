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

// tcpProvider is the pure-Go data path: one authenticated TCP connection per client and remote
// node, carrying Batch frames. A memory node applies a connection's frames one at a time in
// arrival order, which gives the contract's order: the ops of a batch in order, and one
// client's batches to one node in posting order. Each batch is one round trip; a batch too
// large for one frame goes as several consecutive frames.
type tcpProvider struct{}

func (tcpProvider) name() string { return "tcp" }

func (tcpProvider) connect(c *client, p *peer) qp { return newTCPQP(c, p) }

// Queue pair states.
const (
	qpConnecting = iota
	qpUp
	qpDead
)

// tcpQP is one client's connection to one node.
type tcpQP struct {
	f *Fabric
	c *client
	p *peer

	mu    sync.Mutex
	state int
	err   error
	conn  net.Conn
	inc   uint64 // the incarnation of the process at the other end (0: not connected yet)
	// want is the incarnation the fabric had adopted when the queue pair was made (0: none
	// met yet): what is posted on it is posted to that incarnation's memory, so a handshake
	// that meets another one fails it, even if the fabric adopted the new one meanwhile.
	want      uint64
	slots     []qslot
	free      []uint32
	limit     int
	seq       uint64 // frames posted, the last one's number
	unsigSeq  uint64 // number of the last frame that held unsignaled ops
	confirmed uint64 // number of the last batch frame a Result answered
	deadCh    chan struct{}
	upCh      chan struct{} // closed once the connection is set up (send.go waits for it)
	slotCh    chan struct{} // a slot freed, signaled while slotWaiters > 0
	// slotWaiters counts the goroutines in acquire, which may wait for a slot (q.mu): a
	// release signals slotCh only then, so freeing a slot costs no channel operation while
	// no one waits.
	slotWaiters int
	backlog     []deferred // sends waiting for the window, in posting order; drained by a goroutine while not empty

	rmu     sync.Mutex // the reader role
	run     []runFrame // scratch of resultRun (q.rmu held)
	runSl   []qslot    // scratch of resultRun (q.rmu held)
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
	rflush   bool   // a reader holds the role and writes out before it waits on the socket
	// outReplies counts the frames in out that hold a slot (their answer will come back).
	outReplies int32
	// outEager: out holds a frame that must not wait for its poster's next block (one posted
	// while a reader held the role, or not lazily); without it, every frame in out is lazy
	// (see writeLocked) and the queue pair is on its client's lazy list.
	outEager   bool
	lazyListed bool          // on the client's lazy list (client.flushLazy takes it off)
	kick       chan struct{} // wakes the writer

	dead        atomic.Bool
	outstanding atomic.Int32
	lastRecv    atomic.Int64 // nanotime of the last frame received, or of going busy
	pinged      atomic.Bool
}

// qslot is an outstanding request: part of a batch, or a Call.
type qslot struct {
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

func newTCPQP(c *client, p *peer) *tcpQP {
	q := newQP(c, p)
	c.f.addLive(q)
	go q.connect()
	return q
}

// newQP returns an unconnected queue pair; connect (or attach) puts it on a connection.
func newQP(c *client, p *peer) *tcpQP {
	q := &tcpQP{f: c.f, c: c, p: p, limit: c.f.opts.MaxOutstanding, deadCh: make(chan struct{}), upCh: make(chan struct{}),
		slotCh: make(chan struct{}, 1), kick: make(chan struct{}, 1), bgKick: make(chan struct{}, 1), want: p.adopted()}
	q.lastRecv.Store(nanotime())
	return q
}

func (q *tcpQP) alive() bool { return !q.dead.Load() }

func (q *tcpQP) close(err error) { q.fail(err) }

// connect runs the handshake, sends what was posted meanwhile, and becomes the reader.
func (q *tcpQP) connect() {
	deadline := time.Now().Add(q.f.down)
	nc, br, w, err := dialNode(q.f.ctx, q.p.addr, q.p.id, q.c.ClientInfo.ID, wire.PurposeData, q.f.secret, deadline)
	if err != nil {
		q.f.noteDown(q.p, err)
		q.fail(err)
		return
	}
	q.f.learned(q.p, w)
	err = q.p.fenced()
	if err == nil && q.want != 0 && w.Incarnation != 0 && w.Incarnation != q.want {
		// The node restarted after this queue pair was made and the fabric has adopted its
		// new process since: what was posted here was meant for the old memory
		// (farmem.Restarts: a verb posted before an adoption never reaches the new memory).
		err = fmt.Errorf("rdma: %w", transport.LostError(q.p.id, q.want, w.Incarnation))
	}
	if err != nil {
		_ = nc.Close()
		q.fail(err)
		return
	}
	q.attach(nc, br, w)
}

// attachAsync attaches to a connection that needs no handshake (tests) in the background.
func (q *tcpQP) attachAsync(nc net.Conn) {
	go q.attach(nc, bufio.NewReader(nc), wire.Welcome{MaxOutstanding: uint32(q.limit)})
}

// attach puts the queue pair on an authenticated connection, sends what was posted meanwhile,
// and becomes the background reader.
func (q *tcpQP) attach(nc net.Conn, br *bufio.Reader, w wire.Welcome) {
	q.mu.Lock()
	if q.state == qpDead {
		q.mu.Unlock()
		_ = nc.Close()
		return
	}
	q.state, q.conn, q.inc = qpUp, nc, w.Incarnation
	q.limit = min(q.limit, int(w.MaxOutstanding))
	q.mu.Unlock()
	q.wmu.Lock()
	var werr error
	if len(q.pend) > 0 {
		_, werr = nc.Write(q.pend)
	}
	q.pend = nil
	q.nc, q.rw = nc, newRawWriter(nc)
	q.wmu.Unlock()
	go q.writer(nc)
	if werr != nil {
		q.fail(fmt.Errorf("rdma: write to %v: %w: %w", q.p.id, farmem.ErrNodeDown, werr))
		return
	}
	// The handshake's reader may hold bytes the node sent after its Welcome; they come first.
	var src io.Reader = nc
	if n := br.Buffered(); n > 0 {
		src = io.MultiReader(io.LimitReader(br, int64(n)), src)
	} else {
		q.rc = sockRaw(nc)
	}
	q.rmu.Lock()
	q.br = bufio.NewReaderSize(progressReader{src, q}, readBufSize)
	q.rbuf = make([]byte, 0, 16<<10)
	q.rmu.Unlock()
	q.up.Store(true)
	close(q.upCh)
	q.bgReader()
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
	q *tcpQP
}

func (p progressReader) Read(b []byte) (int, error) {
	var n int
	var err error
	if p.q.rc != nil {
		n, err = p.q.rawRead(b)
	} else {
		p.q.readerFlush(false, true)
		n, err = p.r.Read(b)
	}
	if n > 0 {
		p.q.lastRecv.Store(nanotime())
	}
	p.q.wmu.Lock()
	p.q.rflush = true
	p.q.wmu.Unlock()
	return n, err
}

// readerFlush is called by the holder of the reader role before it waits on the socket
// (holding false, all true) and as it leaves the role (both false): from then on posters hand
// their frames to the writer goroutine, and what was queued for the reader is written now, in
// one system call that does not wait (what the socket does not take goes to the writer
// goroutine). Leaving the role, it writes nothing if every frame queued is lazy: those wait for
// their poster's next block, or the next reader (writeLocked).
func (q *tcpQP) readerFlush(holding, all bool) {
	q.wmu.Lock()
	q.rflush = holding
	var err error
	if all || q.outEager {
		err = q.writeOutLocked()
	}
	q.wmu.Unlock()
	if err != nil {
		q.fail(err)
	}
}

// flushLazy writes the output buffer, for the client's flushLazy: the client is about to block.
func (q *tcpQP) flushLazy() {
	q.wmu.Lock()
	q.lazyListed = false
	err := q.writeOutLocked()
	q.wmu.Unlock()
	if err != nil {
		q.fail(err)
	}
}

// writeOutLocked writes the output buffer, if the writer goroutine does not own it, in one
// system call that does not wait; what the socket does not take goes to the writer goroutine
// (q.wmu held). It returns the connection's failure, for the caller to fail it once it has
// released q.wmu.
func (q *tcpQP) writeOutLocked() error {
	if len(q.out) == 0 || q.flushing || q.nc == nil || q.dead.Load() {
		return nil
	}
	n, ok, err := q.rw.try(q.out)
	q.outReplies, q.outEager = 0, false
	switch {
	case err != nil:
		q.out = q.out[:0]
		return fmt.Errorf("rdma: write to %v: %w: %w", q.p.id, farmem.ErrNodeDown, err)
	case ok && n == len(q.out):
		q.out = q.out[:0]
	default:
		q.out = q.out[:copy(q.out, q.out[n:])]
		q.flushing = true
		q.kick <- struct{}{}
	}
	return nil
}

// holdReader marks the reader role taken (q.rmu held): frames posted from now on wait in the
// output buffer for the reader to write them before it next waits on the socket.
func (q *tcpQP) holdReader() {
	q.reading.Store(true)
	q.wmu.Lock()
	q.rflush = true
	q.wmu.Unlock()
}

// dropReader marks the reader role free (q.rmu held) and writes what waits for the reader.
func (q *tcpQP) dropReader() {
	q.reading.Store(false)
	q.readerFlush(false, false)
}

// post implements qp: the background reader collects the answers.
func (q *tcpQP) post(ctx context.Context, b *farmem.Batch, idx []int, s sink) {
	q.send(ctx, b, idx, s, false)
	q.kickReader()
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
	if q.up.Load() && q.rmu.TryLock() {
		q.holdReader()
		q.send(ctx, b, nil, s, false)
		err := q.readFor(ctx, chanWaiter(done))
		q.dropReader()
		q.rmu.Unlock()
		return err
	}
	q.send(ctx, b, nil, s, false)
	return q.await(ctx, chanWaiter(done))
}

// send registers and sends the ops of b at idx, their frames lazy (writeLocked) if lazy. It
// never blocks on the window: frames that find this connection's window of outstanding requests
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
	q.mu.Lock()
	switch {
	case q.state == qpDead:
		err = q.err
	case len(q.backlog) > 0:
		full = true
	case signaled:
		var ok bool
		id, seq, ok = q.takeLocked(sl)
		full = !ok
	}
	q.mu.Unlock()
	return id, seq, full, err
}

// deferSend queues d in the backlog, starting the goroutine that drains it if it is idle.
func (q *tcpQP) deferSend(d deferred) {
	q.mu.Lock()
	q.backlog = append(q.backlog, d)
	start := len(q.backlog) == 1
	q.mu.Unlock()
	if start {
		go q.drainBacklog()
	}
}

// drainBacklog sends the backlog's frames in order, each waiting for a slot (the connection's
// death or the post's context ending fails the ops still waiting), until it is empty.
func (q *tcpQP) drainBacklog() {
	for {
		q.mu.Lock()
		d := q.backlog[0]
		q.mu.Unlock()
		q.sendFrom(d, true)
		q.mu.Lock()
		q.backlog[0] = deferred{}
		q.backlog = q.backlog[1:]
		empty := len(q.backlog) == 0
		if empty {
			q.backlog = nil
		}
		q.mu.Unlock()
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
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.err
}

// acquire registers an outstanding request, waiting for a free slot if the limit is reached,
// and returns its id and sequence number.
func (q *tcpQP) acquire(ctx context.Context, sl qslot) (id, seq uint64, err error) {
	defer func() {
		q.mu.Lock()
		q.slotWaiters--
		q.mu.Unlock()
	}()
	q.mu.Lock()
	q.slotWaiters++ // from here on, a slot's release signals slotCh
	q.mu.Unlock()
	for {
		q.mu.Lock()
		if q.state == qpDead {
			err := q.err
			q.mu.Unlock()
			return 0, 0, err
		}
		if id, seq, ok := q.takeLocked(sl); ok {
			q.mu.Unlock()
			return id, seq, nil
		}
		q.mu.Unlock()
		// The slots free up as their answers are read: with no verb's goroutine reading
		// (their posters may not wait for a while), the background reader must, or the
		// backlog would wait for the monitor's next look, past its frames' expiry.
		if !q.reading.Load() {
			q.kickReader()
		}
		select {
		case <-q.slotCh:
		case <-q.deadCh:
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		}
	}
}

// takeLocked registers sl in a free slot if the window has one (q.mu held).
func (q *tcpQP) takeLocked(sl qslot) (id, seq uint64, ok bool) {
	var i uint32
	switch {
	case len(q.free) > 0:
		i = q.free[len(q.free)-1]
		q.free = q.free[:len(q.free)-1]
	case len(q.slots) < q.limit:
		q.slots = append(q.slots, qslot{})
		i = uint32(len(q.slots) - 1)
	default:
		return 0, 0, false
	}
	sl.gen = q.slots[i].gen + 1
	sl.busy = true
	q.seq++
	sl.seq = q.seq
	q.slots[i] = sl
	if q.outstanding.Load() == 0 {
		at := sl.at
		if at == 0 {
			at = nanotime()
		}
		q.lastRecv.Store(at)
	}
	q.outstanding.Add(1)
	return uint64(sl.gen)<<32 | uint64(i), sl.seq, true
}

// release frees the slot a reply names, if it holds a request of the reply's kind (a Call or
// not), and returns what it held.
func (q *tcpQP) release(id uint64, call bool) (qslot, bool) {
	i, gen := uint32(id), uint32(id>>32)
	q.mu.Lock()
	if int(i) >= len(q.slots) || !q.slots[i].busy || q.slots[i].gen != gen || (q.slots[i].call != nil) != call {
		q.mu.Unlock()
		return qslot{}, false
	}
	sl := q.slots[i]
	q.slots[i] = qslot{gen: gen}
	q.free = append(q.free, i)
	q.outstanding.Add(-1)
	if sl.call == nil {
		// Batch frames are answered in order: this answer confirms every frame up to it.
		q.confirmed = max(q.confirmed, sl.seq)
	}
	wake := q.slotWaiters > 0
	q.mu.Unlock()
	if wake {
		select {
		case q.slotCh <- struct{}{}:
		default:
		}
	}
	return sl, true
}

// sendBatch encodes ops [lo, hi) as a Batch frame and writes it, or queues it while the
// connection is being set up.
func (q *tcpQP) sendBatch(id, seq uint64, b *farmem.Batch, at func(int) int, lo, hi int, key uint32, expiry int64, lazy bool) error {
	unsignaled := false
	for k := lo; k < hi && !unsignaled; k++ {
		unsignaled = b.Ops[at(k)].Unsignaled
	}
	if unsignaled {
		q.mu.Lock()
		if seq == 0 { // a frame of unsignaled ops only: it has no slot
			q.seq++
			seq = q.seq
		}
		q.unsigSeq = seq
		q.mu.Unlock()
	}
	q.wmu.Lock()
	buf, start := wire.BeginFrame(q.wbuf[:0], wire.TypeBatch, 0, id)
	buf = wire.AppendBatchHeader(buf, hi-lo, expiry)
	for k := lo; k < hi; k++ {
		buf = wire.AppendOp(buf, &b.Ops[at(k)], key)
	}
	buf = wire.EndFrame(buf, start)
	err := q.writeLocked(buf, id != 0, lazy && id != 0)
	q.wmu.Unlock()
	return err
}

// writeLocked sends a frame (q.wmu held). Frames leave in posting order, and pipelined frames
// share write calls, the way a pipelining client flushes its buffer only before it blocks:
//
//   - A lazy frame (a signaled batch to one node, which its poster will wait on) posted while
//     no one reads the connection is appended to the output buffer, and the queue pair put on
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
//     socket already, the writer goroutine writes it.
//   - Any other frame is written at once when nothing else is queued or in flight (the lowest
//     latency for a lone verb), else handed to the writer goroutine.
//
// buf is kept as the scratch buffer unless it grew large.
func (q *tcpQP) writeLocked(buf []byte, reply, lazy bool) error {
	var err error
	switch {
	case q.dead.Load():
		err = q.deadErr()
	case q.nc == nil:
		q.pend = append(q.pend, buf...)
	case lazy && !q.reading.Load() && !q.flushing:
		q.out = append(q.out, buf...)
		q.outReplies++
		if !q.lazyListed {
			q.lazyListed = true
			q.c.listLazy(q)
		}
	case !lazy && !q.flushing && !q.rflush && len(q.out) == 0 && q.outstanding.Load() <= 1:
		if _, werr := q.nc.Write(buf); werr != nil {
			err = fmt.Errorf("rdma: write to %v: %w: %w", q.p.id, farmem.ErrNodeDown, werr)
		}
	default:
		q.out = append(q.out, buf...)
		if reply {
			q.outReplies++
		}
		q.outEager = true
		if !q.flushing && !q.rflush {
			q.flushing = true
			q.kick <- struct{}{}
		}
	}
	if cap(buf) <= 1<<20 {
		q.wbuf = buf[:0]
	} else {
		q.wbuf = nil
	}
	if err != nil && !q.dead.Load() {
		go q.fail(err)
	}
	return err
}

// writer writes the output buffer whenever frames are queued in it, until the connection dies.
func (q *tcpQP) writer(nc net.Conn) {
	var spare []byte
	for {
		select {
		case <-q.kick:
		case <-q.deadCh:
			return
		}
		for {
			q.wmu.Lock()
			if len(q.out) == 0 {
				q.flushing = false
				q.wmu.Unlock()
				break
			}
			buf := q.out
			q.out, q.outReplies, q.outEager = spare[:0], 0, false
			q.wmu.Unlock()
			if _, err := nc.Write(buf); err != nil {
				q.fail(fmt.Errorf("rdma: write to %v: %w: %w", q.p.id, farmem.ErrNodeDown, err))
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

// call sends a Call and waits for its reply.
func (q *tcpQP) call(ctx context.Context, method uint16, from farmem.ClientID, req []byte) ([]byte, error) {
	cw := &callWait{ch: make(chan struct{}, 1)}
	id, _, err := q.acquire(ctx, qslot{call: cw})
	if err != nil {
		return nil, err
	}
	q.wmu.Lock()
	buf, start := wire.BeginFrame(q.wbuf[:0], wire.TypeCall, 0, id)
	buf = wire.EndFrame(wire.AppendCall(buf, method, from, req), start)
	err = q.writeLocked(buf, true, false)
	q.wmu.Unlock()
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
func (q *tcpQP) bgReader() {
	for {
		select {
		case <-q.bgKick:
		case <-q.deadCh:
			return
		}
		q.rmu.Lock()
		q.holdReader()
		for q.outstanding.Load() > 0 && !q.dead.Load() {
			if err := q.readOne(); err != nil {
				q.dropReader()
				q.rmu.Unlock()
				q.fail(err)
				return
			}
		}
		q.dropReader()
		q.rmu.Unlock()
	}
}

// kickReader makes sure outstanding requests have a reader.
func (q *tcpQP) kickReader() {
	select {
	case q.bgKick <- struct{}{}:
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
	if !q.up.Load() || !q.rmu.TryLock() {
		q.kickReader()
		return block(ctx, done)
	}
	q.holdReader()
	err := q.readFor(ctx, done)
	q.dropReader()
	q.rmu.Unlock()
	// Requests still outstanding are read by their own waiters, by the background reader if
	// post kicked it, or at the latest when the monitor finds them without a reader.
	return err
}

// readFor reads replies (q.rmu held) until done, ctx ends, or the connection fails.
func (q *tcpQP) readFor(ctx context.Context, done waiter) error {
	if ctx.Done() != nil {
		// A canceled context interrupts the read through a deadline; frames are only ever
		// consumed whole, so the next reader finds the stream intact.
		q.dlMu.Lock()
		q.dlOwner++
		tok := q.dlOwner
		q.dlMu.Unlock()
		stop := context.AfterFunc(ctx, func() {
			q.dlMu.Lock()
			if q.dlOwner == tok {
				_ = q.conn.SetReadDeadline(time.Unix(1, 0))
			}
			q.dlMu.Unlock()
		})
		defer func() {
			if !stop() {
				q.dlMu.Lock()
				q.dlOwner++
				_ = q.conn.SetReadDeadline(time.Time{})
				q.dlMu.Unlock()
			} else {
				q.dlMu.Lock()
				q.dlOwner++
				q.dlMu.Unlock()
			}
		}()
	}
	for {
		if done.fired() {
			q.readBuffered()
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err // (a large frame may have cleared the deadline)
		}
		if err := q.readOne(); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() != nil && !q.dead.Load() {
				return ctx.Err()
			}
			q.fail(err)
			_ = block(context.Background(), done) // fail completed it
			return nil
		}
	}
}

// readBuffered completes what the whole frames already in the read buffer answer (q.rmu held),
// so a reader leaving the role hands the batches that were answered in the same read of the
// socket their results, and their waiters find them done without taking the role in turn. It
// makes no system call; a connection failure it meets fails the connection.
func (q *tcpQP) readBuffered() {
	for {
		n := q.br.Buffered()
		if n < wire.HeaderSize {
			return
		}
		hb, _ := q.br.Peek(wire.HeaderSize)
		h, err := wire.ParseHeader(hb, wire.DefaultMaxFrame)
		if err != nil || wire.HeaderSize+int(h.Len) > n {
			return // (readOne reports a bad header to the next reader)
		}
		if err := q.readOne(); err != nil {
			q.fail(err)
			return
		}
	}
}

// readOne reads one frame and completes what it answers (q.rmu held).
func (q *tcpQP) readOne() error {
	hb, err := q.br.Peek(wire.HeaderSize)
	if err != nil {
		return q.readErr(err)
	}
	h, err := wire.ParseHeader(hb, wire.DefaultMaxFrame)
	if err != nil {
		return q.protoErr(err)
	}
	total := wire.HeaderSize + int(h.Len)
	var p []byte
	if total <= q.br.Size() {
		fb, err := q.br.Peek(total)
		if err != nil {
			return q.readErr(err)
		}
		if h.Type == wire.TypeResult && q.br.Buffered() > total {
			if done, err := q.resultRun(h, total); done {
				return err
			}
		}
		p = fb[wire.HeaderSize:]
		defer func() { _, _ = q.br.Discard(total) }()
	} else {
		// Too large to peek whole: it is read to the end whatever a context says.
		q.dlMu.Lock()
		q.dlOwner++
		_ = q.conn.SetReadDeadline(time.Time{})
		q.dlMu.Unlock()
		_, _ = q.br.Discard(wire.HeaderSize)
		if int(h.Len) <= cap(q.rbuf) {
			p = q.rbuf[:h.Len]
		} else {
			p = make([]byte, h.Len)
		}
		if _, err := io.ReadFull(q.br, p); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				err = io.ErrUnexpectedEOF // the stream is broken mid-frame
			}
			return q.readErr(err)
		}
	}
	// (lastRecv was set as the frame's bytes arrived: progressReader)
	q.pinged.Store(false)
	switch h.Type {
	case wire.TypeResult:
		err = q.result(h, p, &q.rs)
	case wire.TypeCallReply:
		err = q.callReply(h, p)
	case wire.TypePong:
	case wire.TypeError:
		_, msg, _ := wire.DecodeMessage(p)
		err = fmt.Errorf("rdma: %v closed the connection: %s: %w", q.p.id, msg, farmem.ErrNodeDown)
	default:
		err = fmt.Errorf("rdma: unexpected %v frame from %v: %w", h.Type, q.p.id, wire.ErrMalformed)
	}
	if errors.Is(err, wire.ErrMalformed) {
		return q.protoErr(err)
	}
	return err
}

func (q *tcpQP) readErr(err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	return fmt.Errorf("rdma: connection to %v: %w: %w", q.p.id, farmem.ErrNodeDown, err)
}

func (q *tcpQP) protoErr(err error) error {
	q.f.log.Warn("closing connection: protocol violation by the node", "peer", q.p.id.String(), "reason", err.Error())
	return fmt.Errorf("rdma: %v: %w: %w", q.p.id, farmem.ErrNodeDown, err)
}

// result completes the ops a Result frame answers.
func (q *tcpQP) result(h wire.Header, p []byte, rs *wire.Results) error {
	sl, ok := q.release(h.ID, false)
	if !ok {
		return errUnknownResult(h.ID)
	}
	q.c.Counters.ReceiveAhead(aheadIn(sl))
	return q.resultOf(sl, h, p, rs)
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
func (q *tcpQP) resultOf(sl qslot, h wire.Header, p []byte, rs *wire.Results) error {
	ctr := &q.c.Counters
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
				e = fmt.Errorf("rdma: %v went down in the middle of the batch: %w", q.p.id, farmem.ErrNodeDown)
			} else {
				e = fmt.Errorf("rdma: %v: %w: %w", q.p.id, farmem.ErrNodeDown, e)
			}
			complete(i, 0, e)
			continue
		}
		n--
		st, val, data, e := rs.Next(op.Kind, len(op.Buf))
		switch {
		case e != nil:
			err = e
			complete(i, 0, fmt.Errorf("rdma: %v: %w: %w", q.p.id, farmem.ErrNodeDown, e))
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
		err = fmt.Errorf("rdma: %v went down in the middle of a batch: %w", q.p.id, farmem.ErrNodeDown)
	}
	return err
}

// callReply completes a Call.
func (q *tcpQP) callReply(h wire.Header, p []byte) error {
	sl, ok := q.release(h.ID, true)
	if !ok {
		return fmt.Errorf("rdma: call reply for unknown request %#x: %w", h.ID, wire.ErrMalformed)
	}
	cw := sl.call
	st, body, msg, err := wire.DecodeReply(p)
	switch {
	case err != nil:
		cw.err = fmt.Errorf("rdma: call to %v: %w: %w", q.p.id, farmem.ErrNodeDown, err)
	case st == wire.StatusOK:
		cw.reply = append([]byte{}, body...)
	case st == wire.Status(transport.CodeRemote) && len(msg) > 0:
		cw.err = transport.RemoteError(transport.Code(msg[0]), msg[1:])
	default:
		cw.err = fmt.Errorf("rdma: call to %v: %s: %w", q.p.id, msg, st.Err())
	}
	cw.ch <- struct{}{}
	return err
}

// fail kills the connection: every outstanding request fails with err, and if unsignaled ops
// are unconfirmed and no failing op posted with or after them reports it, the client's next op
// to the node reports their possible loss. It is idempotent.
func (q *tcpQP) fail(err error) { q.failWith(err, false, 0) }

// failSilent is fail for a node the client gives up on while its side of the connection may
// still be open (silent past the down timeout): a paused node may yet read the requests in its
// socket, so each batch request is reported failed only from its expiry on, when the node
// refuses it. A connection the node closed or reset, or one that broke, fails at once: the node
// reads nothing more from it.
func (q *tcpQP) failSilent(err error) { q.failWith(err, true, 0) }

// failWith is fail (silent false) or failSilent; with idleOlder not 0 it fails the connection
// only if it is set up to another incarnation than idleOlder with nothing outstanding or
// waiting for the window (retireIdle), deciding under the same lock as posts take their slots.
func (q *tcpQP) failWith(err error, silent bool, idleOlder uint64) {
	q.mu.Lock()
	if q.state == qpDead || (idleOlder != 0 && (q.state != qpUp || q.inc == idleOlder || q.outstanding.Load() != 0 || len(q.backlog) > 0)) {
		q.mu.Unlock()
		return
	}
	q.state, q.err = qpDead, err
	q.dead.Store(true)
	// Unsignaled ops may be lost silently unless a signaled op posted with or after them fails
	// here and so tells the client.
	lost := q.unsigSeq > q.confirmed
	var busy []qslot
	for i := range q.slots {
		if q.slots[i].busy {
			if q.slots[i].call == nil && q.slots[i].seq >= q.unsigSeq {
				lost = false
			}
			busy = append(busy, q.slots[i])
			q.slots[i] = qslot{gen: q.slots[i].gen}
		}
	}
	q.free = q.free[:0]
	q.outstanding.Store(0)
	conn := q.conn
	q.mu.Unlock()
	close(q.deadCh)
	if conn != nil {
		_ = conn.Close()
	}
	q.f.removeLive(q)
	if lost && !errors.Is(err, farmem.ErrClosed) {
		q.c.markLost(q.p.id, err)
	}
	now := time.Now().UnixNano()
	for _, sl := range busy {
		if sl.call != nil {
			sl.call.err = err
			sl.call.ch <- struct{}{}
			continue
		}
		if wait := time.Duration(sl.expiry - now); wait > 0 && silent {
			// The frame may sit unread in a paused node's socket: it is reported failed only
			// once the node would refuse it (its expiry), so a failed op never applies later.
			time.AfterFunc(wait, func() { failOps(sl.b, sl.idx, sl.lo, sl.hi, sl.sink, err) })
			continue
		}
		failOps(sl.b, sl.idx, sl.lo, sl.hi, sl.sink, err)
	}
}

// check is the monitor's look at the connection: it makes sure outstanding requests have a
// reader, fails the connection if nothing came back for the down timeout, and pings it after
// a quarter of that.
func (q *tcpQP) check(now int64, down time.Duration) {
	if q.outstanding.Load() == 0 || q.dead.Load() {
		return
	}
	idle := time.Duration(now - q.lastRecv.Load())
	if !q.reading.Load() && idle >= max(down/8, time.Millisecond) {
		// Answers no one waits for (or lazy frames no one writes): nothing was read for a
		// look. A client that keeps batches in flight and reads their answers as it waits is
		// left alone: the background reader, once started, holds the role while requests are
		// outstanding, and its waiters would then be handed their answers across goroutines.
		q.kickReader()
	}
	if idle > down && q.up.Load() && readable(q.conn) {
		// An answer is waiting unread: the node is alive; this process is slow to read.
		q.lastRecv.Store(now)
		q.kickReader()
		return
	}
	if idle > down {
		q.failSilent(fmt.Errorf("rdma: %v did not answer for %v: %w", q.p.id, idle.Round(time.Millisecond), farmem.ErrNodeDown))
		return
	}
	if idle > down/4 && !q.pinged.Swap(true) {
		if q.wmu.TryLock() {
			if q.nc != nil {
				q.out = wire.AppendHeader(q.out, wire.Header{Type: wire.TypePing})
				if !q.flushing {
					q.flushing = true
					q.kick <- struct{}{}
				}
			}
			q.wmu.Unlock()
		}
	}
}
