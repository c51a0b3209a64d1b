package wordmem

import (
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// MapWords returns n zeroed words (n > 0) in an anonymous private mapping of their own (no swap
// reserved: a page exists once touched), starting at a multiple of align (a power of two; the
// mapping is align bytes longer when align exceeds the page size), or nil if the kernel refuses
// the mapping. The mapping is released once owner is unreachable (a cleanup), so owner must
// keep the words reachable for as long as they are used, and nothing may use them after.
//
// Why not make: make zero-fills a reused heap span, touching (and faulting in) all of it, where
// a fresh mapping's pages are zeroed by the kernel when first touched; a memory node of tens of
// megabytes of which a simulation touches a few costs those few. The garbage collector neither
// counts nor scans the words, and the race detector neither shadows them nor takes atomics on
// them for synchronization: words that goroutines synchronize through (a latch, a lock word)
// belong on the heap (the local transport keeps its nodes there for that reason).
func MapWords[T any](owner *T, n, align uint64) []uint64 {
	if n == 0 || align == 0 || align&(align-1) != 0 {
		return nil
	}
	extra := uint64(0)
	if align > uint64(os.Getpagesize()) {
		extra = align
	}
	m, err := unix.Mmap(-1, 0, int(n*8+extra), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil
	}
	runtime.AddCleanup(owner, func(m []byte) { _ = unix.Munmap(m) }, m)
	base := uintptr(unsafe.Pointer(unsafe.SliceData(m)))
	skip := (-base) & uintptr(align-1)
	return unsafe.Slice((*uint64)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(m)), skip)), n)
}
