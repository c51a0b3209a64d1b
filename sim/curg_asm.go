//go:build (amd64 || arm64) && !noasm

package sim

// curg returns an identity of the calling goroutine: the address of the runtime's descriptor of
// it, read from thread-local storage (amd64) or the g register (arm64). It is stable for the
// goroutine's life and distinct between live goroutines; it is compared, never dereferenced.
// curg_other.go is the portable twin, used with -tags noasm and on other architectures.
func curg() uintptr

// stackBounds returns the bounds of the calling goroutine's stack, [lo, hi), as the runtime's
// descriptor of it holds them (its first two words). It is used only for prefetch hints, and
// only if stackHints found it consistent with the stack it runs on.
func stackBounds() (lo, hi uintptr)
