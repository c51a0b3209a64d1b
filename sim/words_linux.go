package sim

import (
	"os"
	"strings"
	"syscall"
	"unsafe"
)

// adviseHuge advises the kernel to back the whole huge pages of w, which starts on a huge-page
// boundary, with transparent huge pages (madvise MADV_HUGEPAGE: needed where the system's
// policy is "madvise", as on most distributions; a no-op where it is "always", and declined
// where it is "never"). It is a hint: its error is ignored, and the words are the same either
// way. GODEBUG=disablethp=1, which turns huge pages off for the Go heap, turns this off too.
func adviseHuge(w []uint64) {
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), uint64(len(w))*8&^(hugePage-1))
	if len(b) > 0 && !thpDisabled() {
		_ = syscall.Madvise(b, syscall.MADV_HUGEPAGE)
	}
}

// thpDisabled reports whether GODEBUG sets disablethp=1 (its last setting counts, as for the
// runtime).
func thpDisabled() bool {
	off := false
	for _, kv := range strings.Split(os.Getenv("GODEBUG"), ",") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(kv), "disablethp="); ok {
			off = v == "1"
		}
	}
	return off
}
