//go:build !(amd64 || arm64) || noasm

package sim

import (
	"runtime"
	"strconv"
	"strings"
)

// curg returns an identity of the calling goroutine: its id, parsed from the header of its
// stack trace. It is the portable twin of the assembly version (about a microsecond a call
// instead of a nanosecond), used with -tags noasm and on architectures without one.
func curg() uintptr {
	var buf [64]byte
	n := runtime.Stack(buf[:], false)
	s := strings.TrimPrefix(string(buf[:n]), "goroutine ")
	if i := strings.IndexByte(s, ' '); i > 0 {
		s = s[:i]
	}
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		panic("sim: cannot identify the current goroutine: " + err.Error())
	}
	return uintptr(id)
}

// stackBounds is the portable twin of the assembly version: it knows nothing, and stackHints
// is then false.
func stackBounds() (lo, hi uintptr) { return 0, 0 }
