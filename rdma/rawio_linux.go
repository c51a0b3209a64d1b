//go:build linux

package rdma

import (
	"syscall"
	"unsafe"
)

// sysRead and sysWrite are read(2) and write(2) on a connection's non-blocking socket, the
// reads and writes of the event loops (serveRaw, rawRead, the no-wait writes). They are made
// without telling the Go scheduler (syscall.RawSyscall): such a call never blocks, so the
// scheduler has no processor to hand off, and telling it costs more than the bookkeeping: a
// process whose goroutines were all parked has its scheduler's monitor thread asleep, and the
// first system call entered the scheduler's way wakes it (a futex wake and a context switch
// per round trip on a 2-core VM, a tenth of a pipelined client's CPU). They return what
// syscall.Read and syscall.Write return, 0 bytes with an error.
func sysRead(fd int, b []byte) (int, error) {
	r, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

func sysWrite(fd int, b []byte) (int, error) {
	r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// spinSupported: readers may spin before they park (spin.go).
const spinSupported = true

// schedYield is sched_yield(2), a spinning reader's offer of its CPU to any thread waiting for
// it; made without telling the Go scheduler, like sysRead (it returns at once when no thread
// waits, and otherwise after the other thread has had the CPU).
func schedYield() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
