package sim

import (
	"encoding/binary"
	"unsafe"

	"github.com/farmem/farmem/internal/wordmem"
)

// hugePage is the size of a transparent huge page on the platforms that have them (2 MiB on
// amd64 and arm64 with 4 KiB base pages).
const hugePage = 2 << 20

// newWords returns n zeroed words for a node's memory; owner, the node, must keep the words
// reachable for as long as they are used. A memory of at least one huge page is mapped on its
// own (wordmem.MapWords, on Linux; released once owner is unreachable): the
// kernel gives fresh pages zeroed on their first touch, so a node of tens of megabytes of
// which a run touches a few costs those few (make's zeroing of a reused heap span touches, and
// faults in, all of it: most of a short simulation's CPU under the race detector), and the
// garbage collector neither counts nor scans it. Such a memory starts on a huge-page boundary,
// and adviseHuge asks the kernel to back it with huge pages: a verb reaches a word of
// megabytes of simulated memory at random, and with 4 KiB pages nearly every one of them (and
// the prefetch of it, see send) walks the page tables, a walk that a virtual machine's nested
// paging makes longer. Huge pages change no word's value or address as the simulation sees it
// (addresses are offsets into words); where the kernel declines them, or the mapping, the
// memory is as make returns it (aligned the same way).
func newWords(owner *node, n uint64) []uint64 {
	if n*8 < hugePage {
		return make([]uint64, n)
	}
	if w := wordmem.MapWords(owner, n, hugePage); w != nil {
		adviseHuge(w)
		return w
	}
	w := make([]uint64, n+hugePage/8)
	w = hugeAligned(w, n)
	adviseHuge(w)
	return w
}

// hugeAligned returns the n words of w (at least n plus a huge page of words) that start on
// the first huge-page boundary in it, with no capacity beyond them.
func hugeAligned(w []uint64, n uint64) []uint64 {
	base := uintptr(unsafe.Pointer(&w[0]))
	skip := uint64((-base)&(hugePage-1)) / 8
	return w[skip : skip+n : skip+n]
}

// littleEndian says that the machine stores a word's low byte first, as the simulated memory
// orders its bytes (little-endian, as RDMA NICs' hosts do): the bytes of a []uint64 in memory
// are then the simulated bytes, and whole aligned words can be copied as bytes (wordBytes).
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// wordBytes returns the bytes of w as they lie in memory, sharing w's storage.
func wordBytes(w []uint64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), len(w)*8)
}
