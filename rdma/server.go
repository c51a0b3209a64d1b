package rdma

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
	"github.com/farmem/farmem/internal/wire"
	"github.com/farmem/farmem/internal/wordmem"
)

// region is the memory a node serves.
type region struct {
	mem wordmem.Mem
	// mapped is the whole mapping when the region is mapped memory (what a NIC registers);
	// nil for a heap region.
	mapped  []byte
	size    uint64
	desc    string
	release func() error
}

// heapRegion is a region on the Go heap: a compute node's.
func heapRegion(size uint64) *region {
	words := make([]uint64, (size+7)/8)
	return &region{mem: wordmem.FromWords(words), size: size &^ 7, desc: "heap", release: func() error { return nil }}
}

// Fault states of a server.
const (
	stateUp int32 = iota
	stateHung
	stateCrashed
)

// srv serves one region over TCP: a memory node's (Server) or a compute node's (inside a
// Fabric). It authenticates each connection, applies Batches to the region in order, answers
// control requests, and on compute nodes dispatches Calls.
type srv struct {
	node   farmem.NodeID
	reg    *region
	key    uint32
	secret []byte
	log    *slog.Logger
	lim    limits
	// inc is the process's incarnation, sent in every Welcome (see adopt.go).
	inc uint64

	// onWrite is called after a write or atomic lands in the region (compute nodes: it wakes
	// Waits).
	onWrite func(off, n uint64)
	// calls dispatches Calls (compute nodes); nil on memory nodes.
	calls func(ctx context.Context, from farmem.ClientID, method uint16, req []byte) ([]byte, error)
	// msgs queues a one-way message (send.go), running done once it was handled or dropped;
	// nil on memory nodes.
	msgs func(from farmem.ClientID, method uint16, req []byte, done func())
	// members is the compute membership registry (memory nodes).
	members *registry
	// ctlOps are control ops providers add (CtlProvider and up).
	ctlOps map[wire.CtlOp]func(body []byte) (any, error)
	// onCrash runs once when a fault crashes the server.
	onCrash func()
	// pfaults extends fault injection to a provider's data path (nil for tcp).
	pfaults providerFaults
	// device names the RDMA device a provider uses ("": its default).
	device string

	provider    string
	started     time.Time
	allowFaults bool

	mu     sync.Mutex
	ln     net.Listener
	conns  map[*sconn]struct{}
	closed bool
	// unauth holds the connections still in their handshake (at most lim.maxUnauth); nAuth
	// counts the authenticated ones (at most lim.maxConns); seq numbers accepted connections.
	unauth   map[*sconn]struct{}
	nAuth    int
	seq      uint64
	done     chan struct{} // closed by shutdown
	faultCh  chan struct{} // closed and replaced at each fault change
	parts    map[farmem.ClientID]bool
	wg       sync.WaitGroup
	closeErr error

	state      atomic.Int32
	crashAfter atomic.Int64
	hasParts   atomic.Bool

	batches, ops, bytesIn, bytesOut, refused, violations atomic.Uint64

	// inBuf and outBuf are the node-wide budgets for large request payloads and large replies.
	inBuf, outBuf *budget
	// rl rate-limits the log lines strangers and misbehaving clients can cause.
	rl *rateLog
	// Counters the metrics report: refusals by reason, verbs and data bytes by kind, batches
	// refused whole, accept errors, and reply bytes being written.
	refusedBy     [numRefuse]atomic.Uint64
	kindOps       [farmem.NumOpKinds]atomic.Uint64
	kindBytes     [farmem.NumOpKinds]atomic.Uint64
	batchesBadOp  atomic.Uint64
	batchesTooBig atomic.Uint64
	batchesLate   atomic.Uint64 // refused for arriving after their expiry
	// batchesUnbound: refused for naming a channel not attached on its shared connection
	batchesUnbound atomic.Uint64
	acceptErrs     atomic.Uint64
	writing        atomic.Int64
	writeTimeouts  atomic.Uint64
	frameTimeouts  atomic.Uint64
}

type limits struct {
	maxConns       int
	maxOutstanding int
	maxFrame       uint32
	handshake      time.Duration
	writeTimeout   time.Duration
	// maxUnauth bounds the connections still in their handshake (default 256), apart from
	// maxConns; maxBuffer each of the node's input and output budgets (default 64 MiB, at least
	// one largest frame).
	maxUnauth int
	maxBuffer int64
}

// Defaults of the limits a zero value leaves open.
const (
	defaultMaxUnauth = 256
	defaultMaxBuffer = 64 << 20
	defaultHandshake = 2 * time.Second
)

// fill sets the defaults of the limits left zero, and raises maxBuffer to one largest frame.
func (l *limits) fill() {
	if l.maxUnauth <= 0 {
		l.maxUnauth = defaultMaxUnauth
	}
	if l.maxBuffer <= 0 {
		l.maxBuffer = defaultMaxBuffer
	}
	if min := int64(l.maxFrame) + wire.HeaderSize; l.maxBuffer < min {
		l.maxBuffer = min
	}
	if l.handshake <= 0 {
		l.handshake = defaultHandshake
	}
	if l.writeTimeout <= 0 {
		l.writeTimeout = 10 * time.Second
	}
}

func newSrv(node farmem.NodeID, reg *region, secret []byte, log *slog.Logger, lim limits) *srv {
	var k [4]byte
	_, _ = rand.Read(k[:])
	key := binary.LittleEndian.Uint32(k[:])
	if key == 0 {
		key = 1
	}
	lim.fill()
	s := &srv{node: node, reg: reg, key: key, secret: secret, log: log, lim: lim, started: time.Now(), inc: newIncarnation(),
		conns: make(map[*sconn]struct{}), faultCh: make(chan struct{}), parts: make(map[farmem.ClientID]bool),
		provider: "tcp", unauth: make(map[*sconn]struct{}), done: make(chan struct{}),
		inBuf: newBudget(lim.maxBuffer), outBuf: newBudget(lim.maxBuffer), rl: newRateLog(log, logEvery, logBurst)}
	s.crashAfter.Store(-1)
	return s
}

// serve accepts connections on ln until the server closes.
func (s *srv) serve(ln net.Listener) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = ln.Close()
		return
	}
	s.ln = ln
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.isClosed() {
				return
			}
			if !acceptRetryable(err) {
				s.log.Error("accept failed; no longer serving", "err", err)
				return
			}
			// Out of file descriptors or kernel memory, or a transient error: serving goes
			// on once the pressure passes. The unauthenticated budget keeps strangers from
			// holding descriptors for long.
			s.acceptErrs.Add(1)
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.rl.warn("accept", "accept failed; retrying", "err", err, "retry_in", backoff)
			select {
			case <-time.After(backoff):
			case <-s.done:
				return
			}
			continue
		}
		backoff = 0
		c := &sconn{s: s, nc: nc}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = nc.Close()
			return
		}
		var victim *sconn
		if len(s.unauth) >= s.lim.maxUnauth {
			victim = s.evictVictimLocked()
			delete(s.unauth, victim)
			victim.evicted = true
		}
		s.seq++
		c.seq = s.seq
		s.unauth[c] = struct{}{}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		if victim != nil {
			s.refusedBy[refuseEvicted].Add(1)
			s.refused.Add(1)
			s.rl.warn("evict", "unauthenticated connection closed: the handshake budget is full and a newer connection arrived",
				"remote", victim.nc.RemoteAddr().String(), "budget", s.lim.maxUnauth)
			_ = victim.nc.Close()
		}
		go c.run()
	}
}

// acceptRetryable reports whether an Accept error is one the listener recovers from (running
// out of descriptors or buffers, a timeout), not a closed or broken listener.
func acceptRetryable(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED, syscall.EINTR} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func (s *srv) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// refuse tells a client why it is turned away, then closes.
func refuse(nc net.Conn, why wire.Reason, msg string, timeout time.Duration) {
	_ = nc.SetWriteDeadline(time.Now().Add(timeout))
	b, start := wire.BeginFrame(nil, wire.TypeRefused, 0, 0)
	b = wire.EndFrame(wire.AppendMessage(b, uint8(why), msg), start)
	_, _ = nc.Write(b)
	_ = nc.Close()
}

// shutdown stops the server: the listener and every connection close. It is idempotent.
func (s *srv) shutdown() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.done)
	ln := s.ln
	conns := make([]*sconn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	for _, c := range conns {
		c.abort()
	}
	s.faultChanged()
}

// wait blocks until every connection goroutine has ended.
func (s *srv) wait() { s.wg.Wait() }

func (s *srv) faultChanged() {
	s.mu.Lock()
	close(s.faultCh)
	s.faultCh = make(chan struct{})
	s.mu.Unlock()
}

func (s *srv) faultChan() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faultCh
}

// silent reports whether the server must not answer client right now (hung, or partitioned
// from it).
func (s *srv) silent(client farmem.ClientID) bool {
	if s.state.Load() == stateHung {
		return true
	}
	if client != 0 && s.hasParts.Load() {
		s.mu.Lock()
		p := s.parts[client]
		s.mu.Unlock()
		return p
	}
	return false
}

// sconn is one accepted connection.
type sconn struct {
	s      *srv
	nc     net.Conn
	br     *bufio.Reader
	hdr    [wire.HeaderSize]byte
	buf    []byte
	ops    []wire.Op
	client farmem.ClientID
	remote string

	// dropped: a frame was dropped while the server was silent to this connection; it is
	// closed when the silence ends, so nothing after the lost frames applies on it.
	dropped atomic.Bool
	calls   atomic.Int32
	// crashing: an injected crash-after-n fault fired in this connection's batch.
	crashing bool

	// seq orders connections by acceptance; stage is the handshake's progress (stageNew,
	// stageSilent, stageSpoke); evicted
	// and authed are set under s.mu (evicted: pushed out of the handshake budget; authed:
	// counted in s.nAuth).
	seq     uint64
	stage   atomic.Int32
	evicted bool
	authed  bool

	wmu sync.Mutex
	rw  *rawWriter // writes out without waiting (made at the first flush)
	out []byte
	// tally holds the counts of the batches served since the last flush, added to the node's
	// counters as the replies leave (c.wmu held): one atomic add per counter and flush rather
	// than per frame, and a client that has a batch's reply finds it counted in the metrics.
	tally tally
	// due: the last batch left the reply queue at outFlushAt or beyond (set by the serving
	// goroutine, read by it after the batch: other writers of the queue flush it themselves).
	due bool
	// clock, if not 0, is the node's wall clock read for the frames of the current read of the
	// socket (serveRaw): the batches served from one read check their expiry against one
	// clock reading, taken at the first of them. Only the serving goroutine uses it.
	clock int64

	// raw: the connection is served inside a raw read (serve_unix.go), which its own goroutine
	// must leave before the connection can be closed; aborted: it was told to close.
	raw, aborted atomic.Bool

	// shared: the connection carries several clients' verbs, each on a channel (wire's
	// PurposeShared); chans binds the attached channels to their clients and byClient the
	// other way (at most maxSharedClients of each), both under chmu.
	shared   bool
	chmu     sync.Mutex
	chans    map[uint16]*schan
	byClient map[farmem.ClientID]uint16
}

// maxSharedClients bounds the channels attached at once on one shared connection: an Attach
// beyond it binds nothing, and the channel's requests are answered Detached.
const maxSharedClients = 1024

// schan is a channel of a shared connection: the client its requests are for.
type schan struct {
	client farmem.ClientID
	// dropped: a frame of the channel was dropped while the server was silent to its client;
	// the channel is detached when the silence ends (endSilence).
	dropped atomic.Bool
}

// tally is a connection's counts of served batches not yet added to the node's counters.
type tally struct {
	batches, ops, bytesIn uint64
	kindOps, kindBytes    [farmem.NumOpKinds]uint64
}

// publishLocked adds the connection's tally to the node's counters and clears it (c.wmu held).
func (c *sconn) publishLocked() {
	t := &c.tally
	if t.batches == 0 {
		return
	}
	s := c.s
	s.batches.Add(t.batches)
	s.ops.Add(t.ops)
	s.bytesIn.Add(t.bytesIn)
	for k := range t.kindOps {
		if t.kindOps[k] != 0 {
			s.kindOps[k].Add(t.kindOps[k])
			s.kindBytes[k].Add(t.kindBytes[k])
		}
	}
	*t = tally{}
}

// abort closes the connection, from any goroutine (its own included, even in the middle of a
// frame). A connection served inside a raw read cannot be closed from within it (Close waits
// for the read to end), so it is woken with a past deadline and marked, and its goroutine
// closes it as it leaves the read; it serves nothing more meanwhile.
func (c *sconn) abort() {
	c.aborted.Store(true)
	if c.raw.Load() {
		_ = c.nc.SetDeadline(time.Unix(1, 0))
		return
	}
	_ = c.nc.Close()
}

func (c *sconn) run() {
	s := c.s
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		delete(s.unauth, c)
		if c.authed {
			s.nAuth--
		}
		s.mu.Unlock()
		c.wmu.Lock()
		c.publishLocked()
		c.wmu.Unlock()
		_ = c.nc.Close()
	}()
	c.remote = c.nc.RemoteAddr().String()
	c.br = bufio.NewReaderSize(c.nc, handshakeReadBuf)
	if !c.handshake() {
		return
	}
	if c.serveRaw() {
		return
	}
	// The handshake's small reader may hold bytes the client sent after its auth; the
	// connection's reader takes them first.
	var src io.Reader = c.nc
	if n := c.br.Buffered(); n > 0 {
		src = io.MultiReader(io.LimitReader(c.br, int64(n)), src)
	}
	c.br = bufio.NewReaderSize(src, connReadBuf)
	c.buf = make([]byte, 0, frameBuf)
	for {
		h, p, release, err := c.readFrame()
		if err != nil {
			c.readFailed(err)
			return
		}
		if !c.serveFrame(h, p, release, c.br.Buffered() == 0) {
			return
		}
	}
}

// serveFrame serves one request frame, then writes the queued replies if idle (nothing more of
// the client's is buffered) or if they reached outFlushAt. release returns the frame's buffer.
// It reports whether the connection goes on.
func (c *sconn) serveFrame(h wire.Header, p []byte, release func(), idle bool) bool {
	s := c.s
	client, sch, unbound := c.client, (*schan)(nil), false
	if c.shared {
		switch h.Type {
		case wire.TypeBatch:
			if sch = c.channel(wire.ChannelOf(h.ID)); sch != nil {
				client = sch.client
			} else {
				unbound = true
			}
		case wire.TypeCall, wire.TypeMsg:
			release()
			c.violation(fmt.Errorf("a %v frame on a shared connection", h.Type))
			return false
		}
	}
	if sch != nil && sch.dropped.Load() && !s.silent(client) {
		// The channel lost frames to a silence that has ended (endSilence is detaching it):
		// nothing after a lost frame applies.
		c.detach(wire.ChannelOf(h.ID), sch)
		unbound = true
	}
	switch st := s.state.Load(); {
	case st == stateCrashed:
		release()
		return false
	case unbound:
	case !c.shared && c.dropped.Load() && !s.silent(client):
		// The connection lost frames to a silence that has ended (endSilence is closing it).
		release()
		return false
	case (h.Type == wire.TypeAttach || h.Type == wire.TypeDetach) && c.shared:
		// Binding channels applies nothing to the region: it is served whatever the silence.
	case s.silent(client):
		release()
		switch {
		case sch != nil:
			sch.dropped.Store(true)
		case !c.shared:
			c.dropped.Store(true)
		}
		// (a shared connection's dropped Ping applies nothing: losing it orders nothing)
		return true
	}
	var err error
	if unbound {
		// A request for a channel that is not bound: refused, the connection goes on.
		s.batches.Add(1)
		s.batchesUnbound.Add(1)
		s.bytesIn.Add(uint64(wire.HeaderSize + len(p)))
		c.detached(h.ID, "the channel is not attached to a client on this connection")
	} else {
		err = c.handle(h, p)
	}
	release()
	if err != nil {
		if errors.Is(err, errWrite) {
			s.log.Debug("write failed; closing", "remote", c.remote, "client", c.client, "err", err)
			return false
		}
		c.violation(err)
		return false
	}
	if c.crashing {
		// The node is crashed before the partial batch's reply leaves: a request the client
		// sends once it has the reply is never served.
		s.crashThen(func() { _ = c.flush() })
		return false
	}
	// Replies are written when the client has nothing more queued, and whenever they reach
	// outFlushAt: a client that sends without reading meets a full socket here, and the
	// connection stops reading its requests until it drains its replies.
	if idle || (h.Type == wire.TypeBatch && c.due) || (h.Type != wire.TypeBatch && c.queued() >= outFlushAt) {
		if err := c.flush(); err != nil {
			s.log.Debug("write failed; closing", "remote", c.remote, "client", c.client, "err", err)
			return false
		}
	}
	return s.state.Load() != stateCrashed
}

// errWrite marks a failure to write a reply (the client does not read, or is gone).
var errWrite = errors.New("rdma: write to client failed")

// readFrame reads the next request frame. A payload that fits the connection's frame buffer is
// read into it; a larger one is first charged to the node's input budget (waiting, and reading
// nothing meanwhile, while the budget is spent) and must then arrive within the write timeout.
// release returns the charge once the frame is handled.
func (c *sconn) readFrame() (wire.Header, []byte, func(), error) {
	s := c.s
	nop := func() {}
	if _, err := io.ReadFull(c.br, c.hdr[:]); err != nil {
		return wire.Header{}, nil, nop, err
	}
	h, err := wire.ParseHeader(c.hdr[:], s.lim.maxFrame)
	if err != nil {
		return wire.Header{}, nil, nop, err
	}
	if int(h.Len) <= cap(c.buf) {
		p := c.buf[:h.Len]
		if _, err := io.ReadFull(c.br, p); err != nil {
			return wire.Header{}, nil, nop, unexpectedEOF(err)
		}
		return h, p, nop, nil
	}
	big, ok := s.inBuf.get(int(h.Len), s.done)
	if !ok {
		return wire.Header{}, nil, nop, net.ErrClosed
	}
	release := func() { s.inBuf.put(big) }
	p := big[:h.Len]
	_ = c.nc.SetReadDeadline(time.Now().Add(s.lim.writeTimeout))
	_, err = io.ReadFull(c.br, p)
	_ = c.nc.SetReadDeadline(time.Time{})
	if err != nil {
		release()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			s.frameTimeouts.Add(1)
			err = fmt.Errorf("a %d-byte %v frame did not arrive within %v: %w", h.Len, h.Type, s.lim.writeTimeout, err)
		}
		return wire.Header{}, nil, nop, unexpectedEOF(err)
	}
	return h, p, release, nil
}

func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// queued returns the bytes of replies waiting in the connection's queue.
func (c *sconn) queued() int {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return len(c.out)
}

// readFailed logs why the connection's input ended.
func (c *sconn) readFailed(err error) {
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || c.s.isClosed() {
		return
	}
	if errors.Is(err, wire.ErrMalformed) {
		c.violation(err)
		return
	}
	c.s.log.Debug("connection ended", "remote", c.remote, "client", c.client, "err", err)
}

// violation closes the connection for a protocol error, saying why to the peer and the log.
func (c *sconn) violation(err error) {
	c.s.violations.Add(1)
	c.s.rl.warn("violation", "closing connection: protocol violation", "remote", c.remote, "client", c.client, "reason", err.Error())
	c.wmu.Lock()
	c.out = c.out[:0]
	b, start := wire.BeginFrame(c.out, wire.TypeError, 0, 0)
	c.out = wire.EndFrame(wire.AppendMessage(b, uint8(wire.StatusOf(farmem.ErrInvalid)), err.Error()), start)
	c.wmu.Unlock()
	_ = c.flush()
}

func (c *sconn) flush() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.flushLocked(nil)
}

// flushLocked writes the queued replies, then extra (a large reply built apart), within the
// write timeout. c.wmu is held.
func (c *sconn) flushLocked(extra []byte) error {
	c.publishLocked()
	if len(c.out) == 0 && len(extra) == 0 {
		return nil
	}
	s := c.s
	pending := int64(len(c.out) + len(extra))
	s.writing.Add(pending)
	defer s.writing.Add(-pending)
	out := c.out
	if len(extra) == 0 {
		// First one write that does not wait: the socket takes a queue of this size at once
		// unless the client has stopped reading, and then no deadline timer is armed for it.
		if c.rw == nil {
			c.rw = newRawWriter(c.nc)
		}
		n, ok, err := c.rw.try(out)
		s.bytesOut.Add(uint64(n))
		switch {
		case err != nil:
			return c.flushed(err)
		case ok && n == len(out):
			return c.flushed(nil)
		}
		out = out[n:]
	}
	_ = c.nc.SetWriteDeadline(time.Now().Add(s.lim.writeTimeout))
	var err error
	if len(extra) == 0 {
		var n int
		n, err = c.nc.Write(out)
		s.bytesOut.Add(uint64(n))
	} else {
		// One writev for the queue and the large reply.
		bufs := net.Buffers{c.out, extra}
		var n int64
		n, err = bufs.WriteTo(c.nc)
		s.bytesOut.Add(uint64(n))
	}
	if err == nil {
		// The no-wait write of a later flush must not meet this deadline once it is past.
		_ = c.nc.SetWriteDeadline(time.Time{})
	}
	return c.flushed(err)
}

// flushed empties the reply queue after a flush that ended with err (c.wmu held), and
// returns err marked as a failure to write.
func (c *sconn) flushed(err error) error {
	s := c.s
	if cap(c.out) > maxSmallQueue {
		c.out = nil
	} else {
		c.out = c.out[:0]
	}
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			s.writeTimeouts.Add(1)
			s.rl.warn("write-timeout", "closing connection: the client did not read its replies within the write timeout",
				"remote", c.remote, "client", c.client, "timeout", s.lim.writeTimeout)
		}
		return fmt.Errorf("%w: %w", errWrite, err)
	}
	return nil
}

// awaitVoice blocks while the server is silent to client; it reports false if the server
// crashed or closed meanwhile.
func (c *sconn) awaitVoice() bool {
	for {
		ch := c.s.faultChan()
		if c.s.state.Load() == stateCrashed || c.s.isClosed() {
			return false
		}
		if !c.s.silent(c.client) {
			return true
		}
		<-ch
	}
}

// wasEvicted reports whether the connection was pushed out of the handshake budget.
func (c *sconn) wasEvicted() bool {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	return c.evicted
}

// handshake authenticates the client within the handshake deadline; it reports whether the
// connection may go on.
func (c *sconn) handshake() bool {
	s := c.s
	var err error
	// Has the client spoken yet? A client that holds the secret sends its hello as it
	// connects, so it is usually there already; a connection with nothing to read is the
	// first the handshake budget pushes out.
	// (A deadline already past would fail before even trying the socket.)
	_ = c.nc.SetReadDeadline(time.Now().Add(time.Millisecond))
	if _, err := c.br.Peek(1); err != nil {
		c.stage.CompareAndSwap(stageNew, stageSilent)
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(s.lim.handshake))
	fail := func(why wire.Reason, msg string, attrs ...any) bool {
		if c.wasEvicted() {
			return false // counted and logged at the eviction
		}
		r := refuseProtocol
		switch why {
		case wire.ReasonAuth:
			r = refuseAuth
		case wire.ReasonNode:
			r = refuseNode
		case wire.ReasonBusy:
			r = refuseBusy
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			r = refuseTimeout
		}
		s.refused.Add(1)
		s.refusedBy[r].Add(1)
		s.rl.warn("refused-"+refuseNames[r], "connection refused: "+msg, append([]any{"remote", c.remote, "reason", why.String()}, attrs...)...)
		refuse(c.nc, why, msg, s.lim.handshake)
		return false
	}
	var h wire.Header
	var hp []byte
	h, hp, err = wire.ReadFrame(c.br, &c.hdr, nil, 256)
	if err != nil || h.Type != wire.TypeHello {
		if err == nil {
			err = fmt.Errorf("%v frame before hello", h.Type)
		}
		return fail(wire.ReasonProtocol, "bad hello: "+err.Error())
	}
	c.stage.Store(stageSpoke)
	hello, err := wire.DecodeHello(hp)
	if err != nil {
		return fail(wire.ReasonProtocol, "bad hello: "+err.Error())
	}
	c.client = hello.Client
	c.shared = hello.Purpose == wire.PurposeShared
	if c.shared && c.client != 0 {
		return fail(wire.ReasonProtocol, "bad hello: a shared connection names no client")
	}
	if hello.Node != 0 && hello.Node != s.node {
		return fail(wire.ReasonNode, fmt.Sprintf("this is node %v, not %v", s.node, hello.Node))
	}
	if !c.awaitVoice() {
		return false
	}
	ch := wire.Challenge{Node: s.node, Role: transport.RoleOf(s.node)}
	_, _ = rand.Read(ch.Nonce[:])
	cp := ch.Append(nil)
	b, start := wire.BeginFrame(nil, wire.TypeChallenge, 0, 0)
	b = wire.EndFrame(append(b, cp...), start)
	_ = c.nc.SetWriteDeadline(time.Now().Add(s.lim.handshake))
	if _, err := c.nc.Write(b); err != nil {
		return false
	}
	var ap []byte
	h, ap, err = wire.ReadFrame(c.br, &c.hdr, nil, 256)
	if err != nil || h.Type != wire.TypeAuth {
		if err == nil {
			err = fmt.Errorf("%v frame instead of auth", h.Type)
		}
		return fail(wire.ReasonProtocol, "bad auth: "+err.Error())
	}
	mac, err := wire.DecodeAuth(ap)
	if err != nil {
		return fail(wire.ReasonProtocol, "bad auth: "+err.Error())
	}
	if !wire.CheckMAC(mac, wire.MAC(s.secret, "client", hp, cp)) {
		return fail(wire.ReasonAuth, "authentication failed: the client does not hold the cluster secret", "client", hello.Client)
	}
	if !c.awaitVoice() {
		return false
	}
	// Authenticated: the connection leaves the handshake budget for the connection limit.
	s.mu.Lock()
	evicted, busy := c.evicted, s.nAuth >= s.lim.maxConns
	delete(s.unauth, c)
	if !evicted && !busy {
		s.nAuth++
		c.authed = true
	}
	s.mu.Unlock()
	if evicted {
		return false
	}
	if busy {
		return fail(wire.ReasonBusy, "too many connections", "limit", s.lim.maxConns)
	}
	w := wire.Welcome{MAC: wire.MAC(s.secret, "server", hp, cp), Node: s.node, Role: transport.RoleOf(s.node),
		Size: s.reg.size, Key: s.key, MaxFrame: s.lim.maxFrame, MaxOutstanding: uint32(s.lim.maxOutstanding), Incarnation: s.inc}
	b, start = wire.BeginFrame(b[:0], wire.TypeWelcome, 0, 0)
	b = wire.EndFrame(w.Append(b), start)
	if _, err := c.nc.Write(b); err != nil {
		return false
	}
	_ = c.nc.SetDeadline(time.Time{})
	s.log.Debug("connection authenticated", "remote", c.remote, "client", hello.Client, "purpose", hello.Purpose)
	return true
}

// handle serves one frame after the handshake. An error is a protocol violation.
func (c *sconn) handle(h wire.Header, p []byte) error {
	if h.Type == wire.TypeBatch {
		return c.batch(h, p) // (it counts its bytes)
	}
	c.s.bytesIn.Add(uint64(wire.HeaderSize + len(p)))
	switch h.Type {
	case wire.TypePing:
		c.wmu.Lock()
		c.out = wire.AppendHeader(c.out, wire.Header{Type: wire.TypePong, ID: h.ID})
		c.wmu.Unlock()
		return nil
	case wire.TypeCtl:
		return c.ctl(h, p)
	case wire.TypeCall:
		return c.call(h, p)
	case wire.TypeMsg:
		return c.msg(h, p)
	case wire.TypeAttach:
		if c.shared {
			return c.attach(h, p)
		}
	case wire.TypeDetach:
		if c.shared && len(p) == 0 {
			c.detach(wire.ChannelOf(h.ID), nil)
			return nil
		}
	}
	return fmt.Errorf("unexpected %v frame from a client", h.Type)
}

// channel returns the client bound to channel ch of a shared connection, or nil.
func (c *sconn) channel(ch uint16) *schan {
	c.chmu.Lock()
	sch := c.chans[ch]
	c.chmu.Unlock()
	return sch
}

// attach binds an Attach frame's channel to its client. A channel bound already is a protocol
// violation; a client bound on another channel, or a connection with maxSharedClients channels,
// binds nothing (the channel's requests are answered Detached).
func (c *sconn) attach(h wire.Header, p []byte) error {
	ch := wire.ChannelOf(h.ID)
	client, err := wire.DecodeAttach(p)
	if err != nil {
		return err
	}
	if ch == 0 || uint64(h.ID)<<16 != 0 {
		return fmt.Errorf("attach of channel %d with request bits %#x", ch, h.ID&(1<<48-1))
	}
	c.chmu.Lock()
	defer c.chmu.Unlock()
	if c.chans[ch] != nil {
		return fmt.Errorf("channel %d attached twice", ch)
	}
	if _, dup := c.byClient[client]; dup || len(c.chans) >= maxSharedClients {
		c.s.rl.warn("attach", "channel not attached", "remote", c.remote, "client", client, "channel", ch,
			"bound_already", dup, "channels", len(c.chans), "limit", maxSharedClients)
		return nil
	}
	if c.chans == nil {
		c.chans, c.byClient = make(map[uint16]*schan), make(map[farmem.ClientID]uint16)
	}
	c.chans[ch] = &schan{client: client}
	c.byClient[client] = ch
	return nil
}

// detach unbinds channel ch if it is still sch (any channel ch when sch is nil); it reports
// whether it did.
func (c *sconn) detach(ch uint16, sch *schan) bool {
	c.chmu.Lock()
	defer c.chmu.Unlock()
	cur := c.chans[ch]
	if cur == nil || (sch != nil && cur != sch) {
		return false
	}
	delete(c.chans, ch)
	delete(c.byClient, cur.client)
	return true
}

// detached queues a Detached frame for id saying why.
func (c *sconn) detached(id uint64, why string) {
	c.wmu.Lock()
	b, start := wire.BeginFrame(c.out, wire.TypeDetached, 0, id)
	c.out = wire.EndFrame(wire.AppendMessage(b, uint8(wire.StatusOf(farmem.ErrNodeDown)), why), start)
	c.wmu.Unlock()
}

// batch applies a Batch frame. Every op is checked first; if any fails its check, nothing is
// applied and the others fail with ErrAborted. A batch whose results would not fit one frame of
// the node's limit is refused the same way: the ops past the limit fail with
// wire.ErrReplyTooLarge, the rest with ErrAborted, so no reply is ever built larger than the
// limit. A reply up to smallReply bytes joins the connection's queue; a larger one is charged
// to the node's output budget, built apart, and written before the next frame is read.
func (c *sconn) batch(h wire.Header, p []byte) error {
	s := c.s
	c.due = false
	ops, expiry, err := wire.DecodeBatchExpiry(p, c.ops)
	c.ops = ops
	if len(p) > frameBuf {
		// The ops' data point into p, a budget's buffer that goes back to the budget once the
		// batch is handled: kept in c.ops, the connection would hold it alive outside the
		// budget until its next batch.
		defer clear(ops)
	}
	if err != nil {
		s.bytesIn.Add(uint64(wire.HeaderSize + len(p)))
		return err
	}
	signaled, bad := 0, false
	for i := range ops {
		if !ops[i].Unsignaled {
			signaled++
		}
		if ops[i].Check(s.reg.size, s.key) != nil {
			bad = true
		}
	}
	if expiry != 0 {
		now := c.clock
		if now == 0 {
			now = wallNow()
			if c.raw.Load() {
				c.clock = now
			}
		}
		if now > expiry {
			// Its client has reported it failed (or is about to): it must not take effect now.
			s.countRefused(len(p), len(ops))
			return c.expireBatch(h, ops, signaled, expiry)
		}
	}
	size := wire.ResultsSize(ops)
	tooBig := size > uint64(s.lim.maxFrame)
	if bad || tooBig {
		s.countRefused(len(p), len(ops))
		return c.refuseBatch(h, ops, signaled, tooBig)
	}
	limit, partial := len(ops), false
	if s.crashAfter.Load() >= 0 {
		if k := s.crashAfter.Swap(-1); k >= 0 && int(k) < len(ops) {
			limit, partial = int(k), true
		}
	}
	answer := signaled > 0 || partial
	large := answer && wire.HeaderSize+size > smallReply
	var big []byte
	if large {
		var ok bool
		if big, ok = s.outBuf.get(int(wire.HeaderSize+size), s.done); !ok {
			return fmt.Errorf("%w: %w", errWrite, net.ErrClosed)
		}
		defer func() { s.outBuf.put(big) }()
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.tally.batches++
	c.tally.ops += uint64(len(ops))
	c.tally.bytesIn += uint64(wire.HeaderSize + len(p))
	b := c.out
	if large {
		b = big
	}
	start, countAt, answered := 0, 0, 0
	if answer {
		var flags uint8
		if partial {
			flags = wire.FlagPartial
		}
		b, start = wire.BeginFrame(b, wire.TypeResult, flags, h.ID)
		countAt = len(b)
		b = wire.AppendResultCount(b, 0)
	}
	var kops, kbytes [farmem.NumOpKinds]uint64
	mem := s.reg.mem
	for i := range ops[:limit] {
		o := &ops[i]
		kops[o.Kind]++
		switch o.Kind {
		case farmem.OpRead:
			if o.Unsignaled {
				continue
			}
			kbytes[o.Kind] += uint64(o.Len)
			var dst []byte
			b, dst = wire.AppendRead(b, int(o.Len))
			readWords(mem, dst, o.Off)
		case farmem.OpWrite:
			kbytes[o.Kind] += uint64(o.Len)
			mem.WriteAt(o.Data, o.Off, nil)
			if s.onWrite != nil {
				s.onWrite(o.Off, uint64(o.Len))
			}
			if !o.Unsignaled {
				b = wire.AppendWriteOK(b)
			}
		default:
			kbytes[o.Kind] += 8
			fo := o.Atomic()
			prev := mem.Atomic(&fo, o.Off)
			if s.onWrite != nil {
				s.onWrite(o.Off, 8)
			}
			if !o.Unsignaled {
				b = wire.AppendWord(b, prev)
			}
		}
		if !o.Unsignaled {
			answered++
		}
	}
	for k := range kops {
		c.tally.kindOps[k] += kops[k]
		c.tally.kindBytes[k] += kbytes[k]
	}
	if answer {
		binary.LittleEndian.PutUint16(b[countAt:], uint16(answered))
		b = wire.EndFrame(b, start)
	}
	if partial {
		s.log.Warn("injected fault: crashing in the middle of a batch", "applied", limit, "of", len(ops))
		c.crashing = true
	}
	if !large {
		c.out = b
		c.due = len(b) >= outFlushAt
		return nil
	}
	c.due = false
	// The queue first, so replies stay in request order; the connection reads nothing more
	// until the client has taken the large reply (or the write timeout closes it).
	return c.flushLocked(b)
}

// countRefused counts a batch frame of n payload bytes and ops ops refused whole.
func (s *srv) countRefused(n, ops int) {
	s.batches.Add(1)
	s.ops.Add(uint64(ops))
	s.bytesIn.Add(uint64(wire.HeaderSize + n))
}

// refuseBatch answers a batch refused whole: each signaled op gets its own failure, or
// ErrAborted if it had none. tooBig: the results would exceed the frame limit, and the ops
// from the first whose result crosses it fail with wire.ErrReplyTooLarge. The answer holds a
// status byte per signaled op, always a small reply.
func (c *sconn) refuseBatch(h wire.Header, ops []wire.Op, signaled int, tooBig bool) error {
	s := c.s
	if tooBig {
		s.batchesTooBig.Add(1)
		s.rl.warn("reply-too-large", "refused a batch: its results exceed the frame limit", "remote", c.remote,
			"client", c.client, "ops", len(ops), "bytes", wire.ResultsSize(ops), "limit", s.lim.maxFrame)
	} else {
		s.batchesBadOp.Add(1)
	}
	if signaled == 0 {
		s.log.Debug("refused an unsignaled batch", "client", c.client, "ops", len(ops))
		return nil
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	b, start := wire.BeginFrame(c.out, wire.TypeResult, 0, h.ID)
	b = wire.AppendResultCount(b, signaled)
	total := uint64(2)
	for i := range ops {
		total += wire.ResultsSize(ops[i:i+1]) - 2
		if ops[i].Unsignaled {
			continue
		}
		st := wire.StatusOf(ops[i].Check(s.reg.size, s.key))
		if st == wire.StatusOK {
			st = wire.StatusOf(farmem.ErrAborted)
			if tooBig && total > uint64(s.lim.maxFrame) {
				st = wire.StatusTooLarge
			}
		}
		b = wire.AppendStatus(b, st)
	}
	c.out = wire.EndFrame(b, start)
	c.due = len(c.out) >= outFlushAt
	return nil
}

// expireBatch refuses a batch that arrived after its expiry: nothing of it is applied, and each
// signaled op fails with wire.StatusExpired.
func (c *sconn) expireBatch(h wire.Header, ops []wire.Op, signaled int, expiry int64) error {
	s := c.s
	s.batchesLate.Add(1)
	s.rl.warn("expired", "refused a batch that arrived after its expiry", "remote", c.remote, "client", c.client,
		"ops", len(ops), "late", time.Duration(time.Now().UnixNano()-expiry).String())
	if signaled == 0 {
		return nil
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	b, start := wire.BeginFrame(c.out, wire.TypeResult, 0, h.ID)
	b = wire.AppendResultCount(b, signaled)
	for i := range ops {
		if !ops[i].Unsignaled {
			b = wire.AppendStatus(b, wire.StatusExpired)
		}
	}
	c.out = wire.EndFrame(b, start)
	c.due = len(c.out) >= outFlushAt
	return nil
}

// ctl answers a control request.
func (c *sconn) ctl(h wire.Header, p []byte) error {
	op, body, err := wire.DecodeCtl(p)
	if err != nil {
		return err
	}
	var reply any
	switch op {
	case wire.CtlInfo:
		reply = c.s.status()
	case wire.CtlFault:
		reply, err = c.s.fault(body)
	case wire.CtlJoin, wire.CtlRenew, wire.CtlLeave, wire.CtlList:
		if c.s.members == nil {
			err = fmt.Errorf("rdma: %v keeps no membership: %w", c.s.node, farmem.ErrNotSupported)
		} else {
			reply, err = c.s.members.handle(op, body)
		}
	default:
		if fn := c.s.ctlOps[op]; fn != nil {
			reply, err = fn(body)
		} else {
			err = fmt.Errorf("rdma: unknown control op %d: %w", op, farmem.ErrNotSupported)
		}
	}
	if errors.Is(err, wire.ErrMalformed) {
		return err
	}
	var j []byte
	if err == nil {
		j, err = json.Marshal(reply)
	}
	c.wmu.Lock()
	b, start := wire.BeginFrame(c.out, wire.TypeCtlReply, 0, h.ID)
	if err != nil {
		b = wire.AppendReply(b, wire.StatusOf(err), []byte(err.Error()))
	} else {
		b = wire.AppendReply(b, wire.StatusOK, j)
	}
	c.out = wire.EndFrame(b, start)
	var werr error
	if len(c.out) > maxSmallQueue {
		// A large control reply (a long member list) is written at once, so the queue stays
		// within its bound.
		werr = c.flushLocked(nil)
	}
	c.wmu.Unlock()
	return werr
}

// call dispatches a Call to the compute node's handlers in its own goroutine; the reply is
// written when the handler returns.
func (c *sconn) call(h wire.Header, p []byte) error {
	method, from, req, err := wire.DecodeCall(p)
	if err != nil {
		return err
	}
	if c.s.calls == nil {
		c.reply(h.ID, fmt.Errorf("rdma: call to memory node %v: %w", c.s.node, farmem.ErrInvalid), nil)
		return nil
	}
	if int(c.calls.Add(1)) > c.s.lim.maxOutstanding {
		return fmt.Errorf("more than %d calls outstanding", c.s.lim.maxOutstanding)
	}
	req = append([]byte(nil), req...) // the frame buffer is reused
	go func() {
		reply, err := c.s.calls(context.Background(), from, method, req)
		c.calls.Add(-1)
		if c.s.silent(c.client) || c.s.state.Load() == stateCrashed {
			return
		}
		c.reply(h.ID, err, reply)
		if err := c.flush(); err != nil {
			c.abort()
		}
	}()
	return nil
}

// reply queues a CallReply. A handler's error travels as CodeRemote with the handler error's
// own code as the message's first byte; the transport's own errors (no handler, bad target)
// travel as their codes.
func (c *sconn) reply(id uint64, err error, reply []byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	b, start := wire.BeginFrame(c.out, wire.TypeCallReply, 0, id)
	var he *handlerError
	switch {
	case err == nil:
		b = wire.AppendReply(b, wire.StatusOK, reply)
	case errors.As(err, &he):
		b = wire.AppendReply(b, wire.Status(transport.CodeRemote), append([]byte{byte(transport.CodeOf(he.err))}, he.err.Error()...))
	default:
		b = wire.AppendReply(b, wire.StatusOf(err), []byte(err.Error()))
	}
	c.out = wire.EndFrame(b, start)
}

// handlerError marks an error a Call handler returned.
type handlerError struct{ err error }

func (e *handlerError) Error() string { return e.err.Error() }
func (e *handlerError) Unwrap() error { return e.err }

// crash makes the server fail-stop, as a fault: it closes like shutdown, and its owner learns.
func (s *srv) crash() { s.crashThen(nil) }

// crashThen is crash with last run (if not nil) after the node stops serving and before its
// connections close.
func (s *srv) crashThen(last func()) {
	if s.state.Swap(stateCrashed) == stateCrashed {
		return
	}
	if last != nil {
		last()
	}
	s.shutdown()
	if s.pfaults != nil {
		s.pfaults.crash()
	}
	if s.onCrash != nil {
		s.onCrash()
	}
}

// setSilence changes the hang state or a partition; when a silence ends, connections that
// dropped frames during it are closed, so nothing posted after the lost frames applies on them.
func (s *srv) endSilence() {
	s.mu.Lock()
	var stale []*sconn
	type lost struct {
		c   *sconn
		ch  uint16
		sch *schan
	}
	var chans []lost
	for c := range s.conns {
		if c.dropped.Load() && !s.silentLocked(c.client) {
			stale = append(stale, c)
		}
		if c.shared {
			c.chmu.Lock()
			for ch, sch := range c.chans {
				if sch.dropped.Load() && !s.silentLocked(sch.client) {
					chans = append(chans, lost{c, ch, sch})
				}
			}
			c.chmu.Unlock()
		}
	}
	s.mu.Unlock()
	for _, c := range stale {
		c.abort()
	}
	// A shared connection's channels that lost frames are detached, and their clients told, so
	// nothing posted after the lost frames applies; the connection's other channels go on.
	for _, l := range chans {
		if l.c.detach(l.ch, l.sch) {
			l.c.detached(wire.ChannelID(l.ch), "frames of the channel were dropped while the node was silent to its client")
			if err := l.c.flush(); err != nil {
				l.c.abort()
			}
		}
	}
	s.faultChanged()
}

func (s *srv) silentLocked(client farmem.ClientID) bool {
	return s.state.Load() == stateHung || (client != 0 && s.parts[client])
}

func (s *srv) hang() error {
	if !s.state.CompareAndSwap(stateUp, stateHung) && s.state.Load() == stateCrashed {
		return fmt.Errorf("rdma: hang %v: crashed: %w", s.node, farmem.ErrNodeDown)
	}
	if s.pfaults != nil {
		s.pfaults.silence(0, true)
	}
	s.faultChanged()
	return nil
}

func (s *srv) resume() error {
	if !s.state.CompareAndSwap(stateHung, stateUp) && s.state.Load() == stateCrashed {
		return fmt.Errorf("rdma: resume %v: crashed: %w", s.node, farmem.ErrNodeDown)
	}
	if s.pfaults != nil {
		s.pfaults.silence(0, false)
	}
	s.endSilence()
	return nil
}

func (s *srv) partition(client farmem.ClientID, on bool) {
	s.mu.Lock()
	if on {
		s.parts[client] = true
	} else {
		delete(s.parts, client)
	}
	s.hasParts.Store(len(s.parts) > 0)
	s.mu.Unlock()
	if s.pfaults != nil {
		s.pfaults.silence(client, on)
	}
	if on {
		s.faultChanged()
	} else {
		s.endSilence()
	}
}

func (s *srv) armCrashAfter(n int) error {
	if n < 0 {
		return fmt.Errorf("rdma: crash after %d ops: %w", n, farmem.ErrInvalid)
	}
	if s.pfaults != nil {
		if err := s.pfaults.crashAfter(n); err != nil {
			return err
		}
	}
	s.crashAfter.Store(int64(n))
	return nil
}

// status reports the server's health and counters.
func (s *srv) status() NodeStatus {
	s.mu.Lock()
	conns := len(s.conns)
	s.mu.Unlock()
	st := NodeStatus{
		Node: s.node, Role: transport.RoleOf(s.node).String(), Size: s.reg.size, Backing: s.reg.desc,
		Provider: s.provider, Protocol: wire.Version, Started: s.started, Uptime: time.Since(s.started),
		Conns: conns, Batches: s.batches.Load(), Ops: s.ops.Load(), BytesIn: s.bytesIn.Load(),
		BytesOut: s.bytesOut.Load(), Refused: s.refused.Load(), Violations: s.violations.Load(),
		Healthy: s.state.Load() == stateUp, Incarnation: s.inc,
	}
	if s.members != nil {
		st.Members = len(s.members.list())
	}
	return st
}

// NodeStatus is a node's answer to the health/info request.
type NodeStatus struct {
	Node     farmem.NodeID `json:"node"`
	Role     string        `json:"role"`
	Size     uint64        `json:"size"`
	Backing  string        `json:"backing"`
	Provider string        `json:"provider"`
	Protocol int           `json:"protocol"`
	Started  time.Time     `json:"started"`
	Uptime   time.Duration `json:"uptime_ns"`
	// Conns is the number of open connections.
	Conns int `json:"conns"`
	// Batches and Ops count the batches and verbs served; BytesIn and BytesOut the traffic.
	Batches  uint64 `json:"batches"`
	Ops      uint64 `json:"ops"`
	BytesIn  uint64 `json:"bytes_in"`
	BytesOut uint64 `json:"bytes_out"`
	// Refused counts connections turned away; Violations connections closed for protocol
	// errors.
	Refused    uint64 `json:"refused"`
	Violations uint64 `json:"violations"`
	// Members is the number of compute nodes holding a lease (the registry only).
	Members int  `json:"members"`
	Healthy bool `json:"healthy"`
	// Incarnation is the node process's random id, drawn at its start (a restarted node has a
	// new one, and its memory is new).
	Incarnation uint64 `json:"incarnation"`
}
