package sim

import (
	"syscall"
	"unsafe"
)

// adviseHuge advises the kernel to back the whole huge pages of w, which starts on a huge-page
// boundary, with transparent huge pages (madvise MADV_HUGEPAGE: needed where the system's
// policy is "madvise", as on most distributions; a no-op where it is "always", and declined
// where it is "never"). It is a hint: its error is ignored, and the words are the same either
// way.
func adviseHuge(w []uint64) {
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), uint64(len(w))*8&^(hugePage-1))
	if len(b) > 0 {
		_ = syscall.Madvise(b, syscall.MADV_HUGEPAGE)
	}
}
