//go:build unix

package rdma

import (
	"errors"
	"net"
	"syscall"
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
