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

// tryWrite makes one attempt to write b to nc without waiting: it returns how much the socket
// took (0 when its buffer is full), or the connection's error. ok is false when nc has no
// descriptor to write to without waiting; the caller then writes some other way.
func tryWrite(nc net.Conn, b []byte) (n int, ok bool, err error) {
	sc, isSock := nc.(syscall.Conn)
	if !isSock {
		return 0, false, nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, false, nil
	}
	var werr error
	rerr := rc.Write(func(fd uintptr) bool {
		for {
			n, werr = syscall.Write(int(fd), b)
			if werr != syscall.EINTR {
				break
			}
		}
		return true
	})
	if n < 0 {
		n = 0
	}
	switch {
	case rerr != nil:
		return 0, true, rerr
	case werr != nil && !errors.Is(werr, syscall.EAGAIN):
		return n, true, &net.OpError{Op: "write", Net: "tcp", Source: nc.LocalAddr(), Addr: nc.RemoteAddr(), Err: werr}
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

// rawRead is the reader role's read of the socket (q.rmu held): it writes the frames waiting for
// the reader, then reads. A raw read starts by forgetting the poller's readiness note, so a read
// normally has to try the socket before it may wait, and on a connection that waits for each
// answer that try finds nothing: two read system calls per answer. When the frames it just
// wrote hold every outstanding request, no answer can have come before them, and the answer
// they will get raises a readiness event after the write: rawRead then waits for it before
// reading, and a lone verb costs one write and one read. A node's Pong or Error frame that
// arrived meanwhile is read with that answer (or its connection's failure).
func (q *tcpQP) rawRead(b []byte) (int, error) {
	var n int
	var err, werr error
	first := true
	rerr := q.rc.Read(func(fd uintptr) bool {
		if first {
			first = false
			wait, e := q.flushRaw(int(fd))
			if e != nil {
				werr = e
				return true
			}
			if wait {
				return false
			}
		}
		for {
			n, err = syscall.Read(int(fd), b)
			if err != syscall.EINTR {
				break
			}
		}
		return err != syscall.EAGAIN
	})
	switch {
	case werr != nil:
		q.fail(fmt.Errorf("rdma: write to %v: %w: %w", q.p.id, farmem.ErrNodeDown, werr))
		return 0, werr
	case rerr != nil:
		return 0, rerr
	case err != nil:
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: q.conn.LocalAddr(), Addr: q.conn.RemoteAddr(), Err: err}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// flushRaw writes the frames waiting for the reader to fd, in one system call that does not
// wait (what the socket does not take goes to the writer goroutine), and from then on lets
// posters hand frames to the writer. It reports whether the frames written hold every
// outstanding request, so the next readiness event is theirs to raise.
func (q *tcpQP) flushRaw(fd int) (wait bool, err error) {
	q.wmu.Lock()
	defer q.wmu.Unlock()
	q.rflush = false
	if len(q.out) == 0 || q.flushing || q.nc == nil || q.dead.Load() {
		return false, nil
	}
	replies := q.outReplies
	q.outReplies, q.outEager = 0, false
	var n int
	for {
		n, err = syscall.Write(fd, q.out)
		if err != syscall.EINTR {
			break
		}
	}
	switch {
	case err == syscall.EAGAIN:
		n, err = 0, nil
	case err != nil:
		q.out = q.out[:0]
		return false, os.NewSyscallError("write", err)
	}
	if n < len(q.out) {
		q.out = q.out[:copy(q.out, q.out[n:])]
		q.flushing = true
		q.kick <- struct{}{}
		return false, nil
	}
	q.out = q.out[:0]
	return replies > 0 && replies == q.outstanding.Load(), nil
}
