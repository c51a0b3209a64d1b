//go:build unix

package rdma

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// readable reports whether bytes are waiting in nc's receive buffer: the node answered, even
// if no goroutine of this process has read the answer yet (a starved process is not a dead
// node).
func readable(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	ready := false
	_ = rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 0)
		ready = err == nil && n > 0 && fds[0].Revents&unix.POLLIN != 0
	})
	return ready
}
