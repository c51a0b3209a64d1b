package sim

import (
	"encoding/binary"
	"unsafe"
)

// hugePage is the size of a transparent huge page on the platforms that have them (2 MiB on
// amd64 and arm64 with 4 KiB base pages).
const hugePage = 2 << 20

// newWords returns n zeroed words for a node's memory. A memory of at least one huge page
// starts on a huge-page boundary (its allocation is one huge page longer, never touched beyond
// the words), and adviseHuge asks the kernel to back it with huge pages: a verb reaches a word
// of megabytes of simulated memory at random, and with 4 KiB pages nearly every one of them
// (and the prefetch of it, see send) walks the page tables, a walk that a virtual machine's
// nested paging makes longer. Huge pages change no word's value or address as the simulation
// sees it (addresses are offsets into words); where the kernel declines, the memory is as
// make returns it.
func newWords(n uint64) []uint64 {
	if n*8 < hugePage {
		return make([]uint64, n)
	}
	w := make([]uint64, n+hugePage/8)
	base := uintptr(unsafe.Pointer(&w[0]))
	skip := uint64((-base)&(hugePage-1)) / 8
	w = w[skip : skip+n : skip+n]
	adviseHuge(w)
	return w
}

// littleEndian says that the machine stores a word's low byte first, as the simulated memory
// orders its bytes (little-endian, as RDMA NICs' hosts do): the bytes of a []uint64 in memory
// are then the simulated bytes, and whole aligned words can be copied as bytes (wordBytes).
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// wordBytes returns the bytes of w as they lie in memory, sharing w's storage.
func wordBytes(w []uint64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), len(w)*8)
}
