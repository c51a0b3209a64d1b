//go:build unix

package rdma

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"

	"github.com/farmem/farmem/farmem"
)

// rawWriter makes write attempts on a connection's socket that do not wait. It keeps the
// socket's raw access and the callback that writes, so an attempt allocates nothing; its user
// serializes attempts (they hold the connection's write lock).
type rawWriter struct {
	nc  net.Conn
	rc  syscall.RawConn // nil: nc has no descriptor to write to without waiting
	b   []byte
	n   int
	err error
	fn  func(fd uintptr) bool
}

func newRawWriter(nc net.Conn) *rawWriter {
	w := &rawWriter{nc: nc, rc: sockRaw(nc)}
	w.fn = w.write
	return w
}

func (w *rawWriter) write(fd uintptr) bool {
	for {
		w.n, w.err = sysWrite(int(fd), w.b)
		if w.err != syscall.EINTR {
			return true
		}
	}
}

// try makes one attempt to write b without waiting: it returns how much the socket took (0
// when its buffer is full), or the connection's error. ok is false when the connection has no
// descriptor to write to without waiting; the caller then writes some other way.
func (w *rawWriter) try(b []byte) (n int, ok bool, err error) {
	if w.rc == nil {
		return 0, false, nil
	}
	w.b = b
	rerr := w.rc.Write(w.fn)
	n, werr := w.n, w.err
	w.b, w.err = nil, nil
	if n < 0 {
		n = 0
	}
	switch {
	case rerr != nil:
		return 0, true, rerr
	case werr != nil && !errors.Is(werr, syscall.EAGAIN):
		return n, true, &net.OpError{Op: "write", Net: "tcp", Source: w.nc.LocalAddr(), Addr: w.nc.RemoteAddr(), Err: werr}
	}
	return n, true, nil
}

// sockRaw returns nc's raw descriptor access, or nil if it has none.
func sockRaw(nc net.Conn) syscall.RawConn {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// rawRead is the reader role's read of the socket (l.rmu held): it writes the frames waiting for
// the reader, then reads. A raw read starts by forgetting the poller's readiness note, so a read
// normally has to try the socket before it may wait, and on a connection that waits for each
// answer that try finds nothing: two read system calls per answer. When the frames it just
// wrote hold every outstanding request, no answer can have come before them, and the answer
// they will get raises a readiness event after the write: rawRead then waits for it before
// reading, and a lone verb costs one write and one read. A node's Pong or Error frame that
// arrived meanwhile is read with that answer (or its connection's failure).
func (l *tlink) rawRead(b []byte) (int, error) {
	r := &l.rr
	if r.fn == nil {
		r.l, r.fn = l, r.read
	}
	r.b, r.first, r.n, r.err, r.werr = b, true, 0, nil, nil
	rerr := l.rc.Read(r.fn)
	n, err, werr := r.n, r.err, r.werr
	r.b = nil
	switch {
	case werr != nil:
		l.fail(fmt.Errorf("rdma: write to %v: %w: %w", l.p.id, farmem.ErrNodeDown, werr))
		return 0, werr
	case rerr != nil:
		return 0, rerr
	case err != nil:
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: l.conn.LocalAddr(), Addr: l.conn.RemoteAddr(), Err: err}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// rawReader is the reader role's read of the socket, kept in its queue pair so that a read
// allocates no callback (l.rmu serializes its use).
type rawReader struct {
	l         *tlink
	b         []byte
	n         int
	err, werr error
	first     bool
	fn        func(fd uintptr) bool
}

func (r *rawReader) read(fd uintptr) bool {
	if r.first {
		r.first = false
		wait, e := r.l.flushRaw(int(fd))
		if e != nil {
			r.werr = e
			return true
		}
		if wait {
			// Nothing can be there yet: rather than a read that finds nothing, spin (if
			// the governor lets this wait) or wait for the readiness event.
			r.spinRead(int(fd))
			return r.err != syscall.EAGAIN
		}
	}
	for {
		r.n, r.err = sysRead(int(fd), r.b)
		if r.err != syscall.EINTR {
			break
		}
	}
	if r.err == syscall.EAGAIN {
		r.spinRead(int(fd))
	}
	return r.err != syscall.EAGAIN
}

// spinRead reads the empty socket again, spinning (spin.go) if the governor lets this wait
// spin: a wait with several requests in flight only while the CPUs look free (spinGov.busy).
func (r *rawReader) spinRead(fd int) {
	r.n, r.err = spin.read(fd, r.b, r.l.outstanding.Load() > 1)
}

// flushRaw writes the frames waiting for the reader to fd, in one system call that does not
// wait (what the socket does not take goes to the writer goroutine), and from then on lets
// posters hand frames to the writer. It reports whether the frames written hold every
// outstanding request, so the next readiness event is theirs to raise.
func (l *tlink) flushRaw(fd int) (wait bool, err error) {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	l.rflush = false
	if len(l.out) == 0 || l.flushing || l.writing || l.nc == nil || l.dead.Load() {
		return false, nil
	}
	replies := l.outReplies
	l.outReplies, l.outEager = 0, false
	var n int
	for {
		n, err = sysWrite(fd, l.out)
		if err != syscall.EINTR {
			break
		}
	}
	switch {
	case err == syscall.EAGAIN:
		n, err = 0, nil
	case err != nil:
		l.out = l.out[:0]
		return false, os.NewSyscallError("write", err)
	}
	if n < len(l.out) {
		l.out = l.out[:copy(l.out, l.out[n:])]
		l.flushing = true
		l.kick <- struct{}{}
		return false, nil
	}
	l.out = l.out[:0]
	return replies > 0 && replies == l.outstanding.Load(), nil
}
