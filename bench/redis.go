package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/farmem/farmem/farmem"
)

// Redis is a redis-server peer: each session is one TCP connection speaking RESP (no client
// library), GET for reads, SET ... NX for inserts and SET ... XX for updates (so that inserting
// an existing key and updating a missing one fail, as they do in the other stores). It counts
// no costs. With RedisOptions.Index (or DialRedisIndexed) it also keeps a sorted-set index of
// its keys, as YCSB's redis binding does, and its sessions are Scanners (see RedisIndexKey).
type Redis struct {
	addr  string
	name  string
	index bool

	cmd    *exec.Cmd // the server StartRedis started, or nil
	exited chan struct{}
	out    *limitedBuffer
	dir    string

	closeOnce sync.Once
	closeErr  error
}

// RedisOptions configure StartRedis.
type RedisOptions struct {
	// Binary is the redis-server executable (default: "redis-server" on the PATH).
	Binary string
	// StartTimeout bounds the wait for the server to answer PING (default 10s).
	StartTimeout time.Duration
	// Index keeps a sorted-set index of the keys, so that sessions scan (workload E); the
	// store is then named "redis/zset". Inserts cost a ZADD more (in the same round trip).
	Index bool
}

// StartRedis starts redis-server on a free loopback port with persistence off (--save ”
// --appendonly no), waits until it answers PING, and returns it as a Store; Close stops it.
// If redis-server is not installed, it returns an error wrapping ErrRedisNotInstalled.
func StartRedis(ctx context.Context, o RedisOptions) (*Redis, error) {
	bin := o.Binary
	if bin == "" {
		bin = "redis-server"
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("%w (%w): install it (apt-get install redis-server) to compare with redis", ErrRedisNotInstalled, err)
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 10 * time.Second
	}
	var lastErr error
	for range 3 { // a port found free may be taken before the server binds it
		r, err := startRedis(ctx, path, o.StartTimeout)
		if err == nil {
			if o.Index {
				r.index, r.name = true, redisIndexedName
			}
			return r, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func startRedis(ctx context.Context, path string, timeout time.Duration) (*Redis, error) {
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("bench: redis: finding a free port: %w", err)
	}
	dir, err := os.MkdirTemp("", "farmem-bench-redis-")
	if err != nil {
		return nil, fmt.Errorf("bench: redis: %w", err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cmd := exec.Command(path, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--protected-mode", "yes", "--daemonize", "no",
		"--dir", dir, "--logfile", "")
	out := &limitedBuffer{max: 16 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("bench: starting %s: %w", path, err)
	}
	r := &Redis{addr: addr, name: "redis", cmd: cmd, exited: make(chan struct{}), out: out, dir: dir}
	go func() { _ = cmd.Wait(); close(r.exited) }()

	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		err := r.ping(wctx)
		if err == nil {
			return r, nil
		}
		select {
		case <-r.exited:
			r.Close()
			return nil, fmt.Errorf("bench: redis-server exited before answering on %s: %s", addr, bytes.TrimSpace(out.Bytes()))
		case <-wctx.Done():
			r.Close()
			return nil, fmt.Errorf("bench: redis-server did not answer PING on %s: %w (last: %v)", addr, wctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// DialRedis returns a Store for a redis server already running at addr; Close leaves the
// server running.
func DialRedis(addr string) *Redis { return &Redis{addr: addr, name: "redis"} }

// DialRedisIndexed is DialRedis with the sorted-set index (RedisOptions.Index). The server's
// index is only as complete as the inserts made through indexed sessions.
func DialRedisIndexed(addr string) *Redis {
	return &Redis{addr: addr, name: redisIndexedName, index: true}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (r *Redis) ping(ctx context.Context) error {
	s, err := r.dial(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	rep, err := s.do(ctx, []byte("PING"))
	if err != nil {
		return err
	}
	if rep.kind != '+' || string(rep.str) != "PONG" {
		return fmt.Errorf("bench: redis PING answered %q", rep.str)
	}
	return nil
}

// Name returns "redis", or "redis/zset" with the sorted-set index.
func (r *Redis) Name() string { return r.name }

// Addr returns the server's address.
func (r *Redis) Addr() string { return r.addr }

// Open connects a new session.
func (r *Redis) Open(ctx context.Context) (Session, error) {
	if r.exited != nil {
		select {
		case <-r.exited:
			return nil, fmt.Errorf("bench: redis-server has exited: %w", farmem.ErrClosed)
		default:
		}
	}
	s, err := r.dial(ctx)
	if err != nil || !r.index {
		return s, err
	}
	return &redisIndexSession{s}, nil
}

func (r *Redis) dial(ctx context.Context) (*redisSession, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", r.addr)
	if err != nil {
		return nil, fmt.Errorf("bench: redis: %w", err)
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	return &redisSession{c: c, br: bufio.NewReaderSize(c, 64<<10), bw: bufio.NewWriterSize(c, 64<<10)}, nil
}

// Close stops the server StartRedis started (SIGTERM, then SIGKILL after 5s) and removes its
// directory. It is idempotent.
func (r *Redis) Close() error {
	r.closeOnce.Do(func() {
		if r.cmd == nil {
			return
		}
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.exited:
		case <-time.After(5 * time.Second):
			_ = r.cmd.Process.Kill()
			<-r.exited
		}
		r.closeErr = os.RemoveAll(r.dir)
	})
	return r.closeErr
}

// limitedBuffer keeps the first max bytes written to it (the server's log, for errors).
type limitedBuffer struct {
	mu  sync.Mutex
	max int
	b   bytes.Buffer
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := l.max - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (l *limitedBuffer) Bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.b.Bytes())
}

type redisSession struct {
	c      net.Conn
	br     *bufio.Reader
	bw     *bufio.Writer
	ctx    context.Context // the context whose cancellation is wired to the connection
	stop   func() bool
	broken error
	closed bool
	val    []byte
	reps   []reply // pipeline's replies, reused
}

var (
	cmdGET = []byte("GET")
	cmdSET = []byte("SET")
	argNX  = []byte("NX")
	argXX  = []byte("XX")
)

func (s *redisSession) Read(ctx context.Context, key []byte) ([]byte, error) {
	rep, err := s.do(ctx, cmdGET, key)
	if err != nil {
		return nil, err
	}
	switch {
	case rep.kind == '$' && rep.null:
		return nil, fmt.Errorf("redis GET %q: %w", key, ErrNotFound)
	case rep.kind == '$':
		return rep.str, nil
	}
	return nil, rep.unexpected("GET")
}

func (s *redisSession) Insert(ctx context.Context, key, value []byte) error {
	return s.set(ctx, key, value, argNX, ErrExists)
}

func (s *redisSession) Update(ctx context.Context, key, value []byte) error {
	return s.set(ctx, key, value, argXX, ErrNotFound)
}

func (s *redisSession) set(ctx context.Context, key, value, cond []byte, miss error) error {
	rep, err := s.do(ctx, cmdSET, key, value, cond)
	if err != nil {
		return err
	}
	switch {
	case rep.kind == '+' && string(rep.str) == "OK":
		return nil
	case rep.kind == '$' && rep.null:
		return fmt.Errorf("redis SET %s %q: %w", cond, key, miss)
	}
	return rep.unexpected("SET")
}

func (s *redisSession) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	if s.stop != nil {
		s.stop()
	}
	return s.c.Close()
}

// do sends one command and reads its reply. A reply of kind '$' aliases the session's buffer
// until the next call.
func (s *redisSession) do(ctx context.Context, args ...[]byte) (reply, error) {
	reps, err := s.pipeline(ctx, args)
	if len(reps) == 0 {
		return reply{}, err
	}
	return reps[0], err
}

// pipeline sends commands in one write and reads their replies, in one round trip. A first
// reply of kind '$' aliases the session's buffer until the next call. An error reply is
// returned (with every reply) as an error once all replies are read, so the stream stays in
// step.
func (s *redisSession) pipeline(ctx context.Context, cmds ...[][]byte) ([]reply, error) {
	if s.closed {
		return nil, fmt.Errorf("bench: redis session: %w", farmem.ErrClosed)
	}
	if s.broken != nil {
		return nil, s.broken
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if ctx != s.ctx {
		// Wire cancellation of this context to the connection (once per context, not per op).
		if s.stop != nil {
			s.stop()
		}
		s.ctx = ctx
		s.stop = nil
		if ctx.Done() != nil {
			s.stop = context.AfterFunc(ctx, func() { _ = s.c.SetDeadline(time.Unix(1, 0)) })
		}
		dl, _ := ctx.Deadline()
		_ = s.c.SetDeadline(dl)
	}
	for _, args := range cmds {
		writeCommand(s.bw, args...)
	}
	err := s.bw.Flush()
	reps := s.reps[:0]
	for i := 0; err == nil && i < len(cmds); i++ {
		var rep reply
		if i == 0 {
			rep, err = readReply(s.br, s.val[:0], 0)
			if rep.kind == '$' {
				s.val = rep.str[:0]
			}
		} else {
			rep, err = readReply(s.br, nil, 0)
		}
		reps = append(reps, rep)
	}
	s.reps = reps[:0]
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			err = fmt.Errorf("bench: redis: %w (%v)", cerr, err)
		} else {
			err = fmt.Errorf("bench: redis: %w", err)
		}
		s.broken = err // the stream is out of step; the session is done
		return nil, err
	}
	for _, rep := range reps {
		if rep.kind == '-' {
			return reps, fmt.Errorf("bench: redis: %s", rep.str)
		}
	}
	return reps, nil
}

// writeCommand writes args as a RESP array of bulk strings.
func writeCommand(w *bufio.Writer, args ...[]byte) {
	var num [20]byte
	w.WriteByte('*')
	w.Write(strconv.AppendInt(num[:0], int64(len(args)), 10))
	w.WriteString("\r\n")
	for _, a := range args {
		w.WriteByte('$')
		w.Write(strconv.AppendInt(num[:0], int64(len(a)), 10))
		w.WriteString("\r\n")
		w.Write(a)
		w.WriteString("\r\n")
	}
}

// reply is one RESP reply: kind is '+', '-', ':', '$' or '*'.
type reply struct {
	kind  byte
	str   []byte // simple string, error text, or bulk string
	num   int64  // integer, or array length
	null  bool   // null bulk string or array
	elems []reply
}

func (r reply) unexpected(cmd string) error {
	return fmt.Errorf("bench: redis %s: unexpected reply %c%q", cmd, r.kind, r.str)
}

// Limits of the RESP reader: a malformed or hostile stream gets an error, not a huge
// allocation or a deep recursion.
const (
	respMaxBulk  = MaxValueSize
	respMaxLine  = 64 << 10
	respMaxElems = 1 << 16
	respMaxDepth = 8
)

var errRESP = errors.New("malformed RESP reply")

// readReply reads one reply; a bulk string is appended to buf.
func readReply(br *bufio.Reader, buf []byte, depth int) (reply, error) {
	line, err := readLine(br)
	if err != nil {
		return reply{}, err
	}
	if len(line) == 0 {
		return reply{}, fmt.Errorf("%w: empty line", errRESP)
	}
	r := reply{kind: line[0]}
	body := line[1:]
	switch r.kind {
	case '+', '-':
		r.str = append(buf, body...)
		return r, nil
	case ':':
		r.num, err = strconv.ParseInt(string(body), 10, 64)
		if err != nil {
			return reply{}, fmt.Errorf("%w: integer %q", errRESP, truncate(string(body)))
		}
		return r, nil
	case '$':
		n, err := respLength(body, "bulk", respMaxBulk)
		if err != nil || n == -1 {
			r.null = n == -1
			return r, err
		}
		start := len(buf)
		// Grow as the bytes arrive, so that a bogus length costs no more than the stream.
		for left := n + 2; left > 0; {
			chunk := min(left, 64<<10)
			at := len(buf)
			buf = append(buf, make([]byte, chunk)...)
			if _, err := io.ReadFull(br, buf[at:]); err != nil {
				if errors.Is(err, io.EOF) {
					err = io.ErrUnexpectedEOF
				}
				return reply{}, err
			}
			left -= chunk
		}
		if buf[len(buf)-2] != '\r' || buf[len(buf)-1] != '\n' {
			return reply{}, fmt.Errorf("%w: bulk string not ended by CRLF", errRESP)
		}
		r.str = buf[start : len(buf)-2]
		return r, nil
	case '*':
		n, err := respLength(body, "array", respMaxElems)
		if err != nil || n == -1 {
			r.null = n == -1
			return r, err
		}
		if depth >= respMaxDepth {
			return reply{}, fmt.Errorf("%w: arrays nested deeper than %d", errRESP, respMaxDepth)
		}
		r.num = n
		for range n {
			e, err := readReply(br, nil, depth+1)
			if err != nil {
				return reply{}, err
			}
			r.elems = append(r.elems, e)
		}
		return r, nil
	}
	return reply{}, fmt.Errorf("%w: unknown type byte %q", errRESP, r.kind)
}

// respLength parses the length of a bulk string or an array: -1 (null) up to max.
func respLength(body []byte, what string, max int64) (int64, error) {
	n, err := strconv.ParseInt(string(body), 10, 64)
	if err != nil || n < -1 || n > max {
		return 0, fmt.Errorf("%w: %s length %q", errRESP, what, truncate(string(body)))
	}
	return n, nil
}

// readLine reads a CRLF-terminated line and returns it without the CRLF.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if err == nil {
			break
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			if errors.Is(err, io.EOF) && len(line) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if len(line) > respMaxLine {
			return nil, fmt.Errorf("%w: line longer than %d bytes", errRESP, respMaxLine)
		}
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("%w: line not ended by CRLF", errRESP)
	}
	if len(line) > respMaxLine {
		return nil, fmt.Errorf("%w: line longer than %d bytes", errRESP, respMaxLine)
	}
	return line[:len(line)-2], nil
}
