//go:build linux

package numaemu

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

func errnoErr(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// Mbind sets the memory policy of the pages of b (page-aligned; a mapping from mmap is) to
// mode over the nodes in mask (nil for none, as MPOL_DEFAULT and MPOL_LOCAL take). It is
// mbind(2); flags are MPOL_MF_*. Errors are the raw errno.
func Mbind(b []byte, mode int, mask *NodeMask, flags int) error {
	var p, mp unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	var maxnode uintptr
	if mask != nil {
		mp, maxnode = unsafe.Pointer(mask), maxnodeArg(MaxNodes)
	}
	_, _, e := unix.Syscall6(unix.SYS_MBIND, uintptr(p), uintptr(len(b)), uintptr(mode), uintptr(mp), maxnode, uintptr(flags))
	return errnoErr(e)
}

// GetMempolicy is get_mempolicy(2): it stores the policy mode in *mode and its nodes in mask
// (either may be nil). With MPOL_F_ADDR it reports the policy of the mapping at addr; with
// MPOL_F_ADDR|MPOL_F_NODE it stores in *mode the node of the page at addr (faulting it in).
func GetMempolicy(mode *int, mask *NodeMask, addr unsafe.Pointer, flags int) error {
	var m int32
	var mp unsafe.Pointer
	var maxnode uintptr
	if mask != nil {
		mp, maxnode = unsafe.Pointer(mask), maxnodeArg(MaxNodes)
	}
	_, _, e := unix.Syscall6(unix.SYS_GET_MEMPOLICY, uintptr(unsafe.Pointer(&m)), uintptr(mp), maxnode, uintptr(addr), uintptr(flags), 0)
	if e != 0 {
		return e
	}
	if mode != nil {
		*mode = int(m)
	}
	return nil
}

// MovePages is move_pages(2) for process pid (0 for this one). With nodes nil it only queries:
// status[i] receives the node of pages[i], or a negative errno (-ENOENT: not present; -EFAULT:
// not mapped). With nodes it moves pages[i] to nodes[i] and status[i] receives the result.
// status must be as long as pages, and nodes too when given.
func MovePages(pid int, pages []unsafe.Pointer, nodes []int32, status []int32, flags int) error {
	if len(status) != len(pages) || (nodes != nil && len(nodes) != len(pages)) {
		return unix.EINVAL
	}
	if len(pages) == 0 {
		return nil
	}
	var np unsafe.Pointer
	if nodes != nil {
		np = unsafe.Pointer(&nodes[0])
	}
	_, _, e := unix.Syscall6(unix.SYS_MOVE_PAGES, uintptr(pid), uintptr(len(pages)), uintptr(unsafe.Pointer(&pages[0])),
		uintptr(np), uintptr(unsafe.Pointer(&status[0])), uintptr(flags))
	return errnoErr(e)
}

// Getcpu returns the CPU and NUMA node the calling thread is running on (getcpu(2)). Without
// pinning, the answer may be stale by the time it is used.
func Getcpu() (cpu, node int, err error) {
	var c, n uint32
	_, _, e := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&c)), uintptr(unsafe.Pointer(&n)), 0)
	if e != 0 {
		return 0, 0, e
	}
	return int(c), int(n), nil
}

// PinThread locks the calling goroutine to its OS thread (runtime.LockOSThread) and restricts
// that thread to cpus (sched_setaffinity). The returned unpin restores the thread's previous
// affinity and unlocks it; call it from the same goroutine. On error nothing is changed.
func PinThread(cpus ...int) (unpin func() error, err error) {
	if len(cpus) == 0 {
		return nil, fmt.Errorf("numaemu: pin to no CPU: %w", unix.EINVAL)
	}
	var set unix.CPUSet
	for _, c := range cpus {
		if c < 0 || c >= len(set)*64 {
			return nil, fmt.Errorf("numaemu: CPU %d out of range: %w", c, unix.EINVAL)
		}
		set.Set(c)
	}
	runtime.LockOSThread()
	var old unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("numaemu: sched_getaffinity: %w", err)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("numaemu: sched_setaffinity %v: %w", cpus, err)
	}
	done := false
	return func() error {
		if done {
			return nil
		}
		done = true
		defer runtime.UnlockOSThread()
		if err := unix.SchedSetaffinity(0, &old); err != nil {
			return fmt.Errorf("numaemu: restore affinity: %w", err)
		}
		return nil
	}, nil
}

// PinToNode pins the calling goroutine's thread to the CPUs of node (see [PinThread]).
func (t *Topology) PinToNode(node int) (unpin func() error, err error) {
	n, ok := t.Node(node)
	if !ok || len(n.CPUs) == 0 {
		return nil, fmt.Errorf("%w: node %d has no CPU to pin to", ErrNoNode, node)
	}
	return PinThread(n.CPUs...)
}

// LocalNode returns the node of the CPU the calling thread runs on (0 if the kernel cannot say).
func LocalNode() int {
	if _, n, err := Getcpu(); err == nil {
		return n
	}
	return 0
}
