//go:build unix

package rdma

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/farmem/farmem/internal/wire"
)

// serveRaw serves an authenticated connection's requests the way an event loop does, and
// reports false, having read nothing, when the connection has no descriptor to do it on (the
// caller then serves it with buffered reads).
//
// A net.Conn read tries the socket first and, finding nothing (EAGAIN), waits for the poller
// and reads again: two read system calls for every request that arrives on an idle connection.
// serveRaw stays inside one raw read of the descriptor (syscall.RawConn.Read) for as long as
// the connection lives, so the poller's readiness notes are kept between reads: after a read
// that drained the socket (it returned less than it asked for), it serves the whole frames it
// holds, writes their replies, and waits for the next readiness event before reading again.
// The poller is edge triggered, so a byte arriving after the draining read raises a new event
// and nothing is left unread; a stale event costs one read that finds nothing. A request and
// its reply thus cost one read and one write system call.
//
// Frames, replies and the connection's bounds are those of the buffered path: frames up to
// frameBuf bytes of payload are served from the read buffer (connReadBuf+frameBuf bytes, within
// ConnBufferBound); a larger one is charged to the node's input budget and read, outside the
// raw read, within the write timeout; replies are written when no whole frame is left to serve
// or when they reach outFlushAt, and a client that does not read them meets the write timeout.
func (c *sconn) serveRaw() bool {
	sc, ok := c.nc.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	s := c.s
	c.raw.Store(true)
	if c.aborted.Load() {
		return true // closed while it authenticated
	}
	buf := make([]byte, connReadBuf+frameBuf)
	r, w := 0, 0
	// The handshake's small reader may hold bytes the client sent after its auth.
	if n := c.br.Buffered(); n > 0 {
		b, _ := c.br.Peek(n)
		w = copy(buf, b)
		_, _ = c.br.Discard(n)
	}
	var (
		stop    bool        // the connection ends
		failed  error       // why its input ended
		big     wire.Header // a frame too large for the buffer is next
		isBig   bool
		drained bool // the last read took all the socket held
		// frames counts the frames served since the last read: a wait after a read that
		// brought several is a pipelined one, which spins (spin.go) only while the CPUs look
		// free (spinGov.busy).
		frames int
	)
	nop := func() {}
	// serve serves the whole frames in buf[r:w]; it returns false when the connection ends or
	// a large frame is next.
	serve := func() bool {
		c.clock = 0 // the frames of this read check their expiry against one clock reading
		for w-r >= wire.HeaderSize {
			h, err := wire.ParseHeader(buf[r:r+wire.HeaderSize], s.lim.maxFrame)
			if err != nil {
				failed = err
				return false
			}
			if int(h.Len) > frameBuf {
				big, isBig = h, true
				return false
			}
			total := wire.HeaderSize + int(h.Len)
			if w-r < total {
				break
			}
			p := buf[r+wire.HeaderSize : r+total]
			r += total
			// Idle: no whole frame is left to serve.
			idle := w-r < wire.HeaderSize
			if !idle {
				if nh, err := wire.ParseHeader(buf[r:r+wire.HeaderSize], s.lim.maxFrame); err == nil && int(nh.Len) <= frameBuf {
					idle = w-r < wire.HeaderSize+int(nh.Len)
				}
			}
			frames++
			if !c.serveFrame(h, p, nop, idle) || c.aborted.Load() {
				stop = true
				return false
			}
		}
		return true
	}
	read := func(fd int, b []byte) (int, error) {
		return spin.read(fd, b, frames > 1)
	}
	for !stop && failed == nil {
		mustRead := true // after entering the raw read (its start forgets readiness) or a wait
		rerr := rc.Read(func(fd uintptr) bool {
			for {
				if c.aborted.Load() {
					stop = true
					return true
				}
				if !serve() {
					return true
				}
				// After a read that drained the socket a read would find nothing: spin (if
				// the governor lets this wait) or wait for the next readiness event.
				wait := drained && !mustRead
				mustRead = false
				switch {
				case r == w:
					r, w = 0, 0
				case len(buf)-w < wire.HeaderSize+frameBuf:
					w = copy(buf, buf[r:w])
					r = 0
				}
				var n int
				var err error
				if wait {
					n, err = read(int(fd), buf[w:])
				} else {
					for {
						n, err = sysRead(int(fd), buf[w:])
						if err != syscall.EINTR {
							break
						}
					}
					if err == syscall.EAGAIN {
						n, err = read(int(fd), buf[w:])
					}
				}
				switch {
				case err == syscall.EAGAIN:
					drained, mustRead = true, true
					return false
				case err != nil:
					failed = os.NewSyscallError("read", err)
					return true
				case n == 0:
					failed = io.EOF
					if w > r {
						failed = io.ErrUnexpectedEOF
					}
					return true
				}
				drained = n < len(buf)-w
				w += n
				frames = 0
			}
		})
		switch {
		case stop || c.aborted.Load():
			return true
		case failed != nil:
		case rerr != nil:
			failed = rerr
		case isBig:
			isBig = false
			if !c.serveBig(big, buf, &r, &w) {
				return true
			}
			// The frame may have been read from the socket directly: the next raw read
			// starts with a read.
			drained = false
		}
	}
	c.readFailed(failed)
	return true
}

// serveBig reads and serves a frame whose payload exceeds frameBuf: it is charged to the node's
// input budget (waiting, and reading nothing meanwhile, while the budget is spent), its start
// taken from buf[*r:*w] and its rest read from the socket within the write timeout. It reports
// whether the connection goes on.
func (c *sconn) serveBig(h wire.Header, buf []byte, r, w *int) bool {
	s := c.s
	b, ok := s.inBuf.get(int(h.Len), s.done)
	if !ok {
		return false
	}
	release := func() { s.inBuf.put(b) }
	p := b[:h.Len]
	*r += wire.HeaderSize
	k := copy(p, buf[*r:*w])
	*r += k
	if *r == *w {
		*r, *w = 0, 0
	}
	if k < len(p) {
		_ = c.nc.SetReadDeadline(time.Now().Add(s.lim.writeTimeout))
		_, err := io.ReadFull(c.nc, p[k:])
		_ = c.nc.SetReadDeadline(time.Time{})
		if err != nil {
			release()
			if errors.Is(err, os.ErrDeadlineExceeded) {
				s.frameTimeouts.Add(1)
				err = fmt.Errorf("a %d-byte %v frame did not arrive within %v: %w", h.Len, h.Type, s.lim.writeTimeout, err)
			}
			c.readFailed(unexpectedEOF(err))
			return false
		}
	}
	c.clock = 0 // it was read apart: its expiry is checked against the clock read now
	return c.serveFrame(h, p, release, *w-*r < wire.HeaderSize)
}
