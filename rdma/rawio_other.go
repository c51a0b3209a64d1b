//go:build unix && !linux

package rdma

import "syscall"

// sysRead and sysWrite are read(2) and write(2) on a connection's non-blocking socket (made the
// scheduler's way here; see the linux twin).
func sysRead(fd int, b []byte) (int, error) {
	n, err := syscall.Read(fd, b)
	if n < 0 {
		n = 0
	}
	return n, err
}

func sysWrite(fd int, b []byte) (int, error) {
	n, err := syscall.Write(fd, b)
	if n < 0 {
		n = 0
	}
	return n, err
}

// spinSupported: readers never spin before they park here (spin.go), so schedYield is never
// called.
const spinSupported = false

func schedYield() {}
