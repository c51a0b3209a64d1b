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
// megabytes of which a test or a simulation touches a few costs those few. The garbage
// collector neither counts nor scans the words, and the race detector does not shadow them
// (every access to a node's words is atomic or exclusive anyway).
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

// ZeroWords zeroes words that MapWords returned, with no access running on them: the whole
// pages among them are given back to the kernel (madvise MADV_DONTNEED: fresh zero pages on
// the next touch, nothing written now), the rest cleared. It reports false, having changed
// nothing, if the kernel refuses (the caller then clears them itself).
func ZeroWords(w []uint64) bool {
	if len(w) == 0 {
		return true
	}
	page := uintptr(os.Getpagesize())
	start := uintptr(unsafe.Pointer(unsafe.SliceData(w)))
	end := start + uintptr(len(w))*8
	lo, hi := (start+page-1)&^(page-1), end&^(page-1)
	if lo < hi {
		b := unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(w)), lo-start)), hi-lo)
		if unix.Madvise(b, unix.MADV_DONTNEED) != nil {
			return false
		}
		clear(w[:(lo-start)/8])
		clear(w[(hi-start)/8:])
		return true
	}
	clear(w)
	return true
}
