package cxl

import (
	"math"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Futex operations, as in <linux/futex.h>. They are shared (not FUTEX_PRIVATE_FLAG): the kernel
// keys them by the page of the shared mapping, so waiters and wakers may be different
// processes. That needs the processes to share a kernel: the wake-ups of Wait and Call do not
// cross hosts (see the package doc).
const (
	futexWaitOp = 0
	futexWakeOp = 1
)

// futexWait sleeps while *addr == val, for at most timeout (0: no limit). It returns on a wake,
// a timeout, a signal, or at once if *addr != val; callers re-check their condition.
func futexWait(addr *uint32, val uint32, timeout time.Duration) {
	var ts *unix.Timespec
	if timeout > 0 {
		t := unix.NsecToTimespec(int64(timeout))
		ts = &t
	}
	_, _, _ = syscall.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitOp, uintptr(val),
		uintptr(unsafe.Pointer(ts)), 0, 0)
}

// futexWake wakes every waiter on addr.
func futexWake(addr *uint32) {
	_, _, _ = syscall.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWakeOp, math.MaxInt32, 0, 0, 0)
}

// bump advances a wake sequence and wakes its waiters, so that a waiter that read the old
// value before sleeping cannot miss the wake.
func bump(seq *uint32) {
	atomic.AddUint32(seq, 1)
	futexWake(seq)
}

// park sleeps on word w while it holds v, counting itself in *sleepers for the duration, so
// that wakers can skip the system call when nobody sleeps (a FUTEX_WAKE on a shared mapping
// costs microseconds). It returns at once if w moved before it counted itself.
func park(w, sleepers *uint32, v uint32, timeout time.Duration) {
	atomic.AddUint32(sleepers, 1)
	if atomic.LoadUint32(w) == v {
		futexWait(w, v, timeout)
	}
	atomic.AddUint32(sleepers, ^uint32(0))
}

// wake wakes the sleepers on w, if park counted any. The caller changed w with an atomic (a
// full fence on amd64) before, so a sleeper either sees the change or is counted here.
func wake(w, sleepers *uint32) {
	if atomic.LoadUint32(sleepers) != 0 {
		futexWake(w)
	}
}
