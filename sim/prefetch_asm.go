//go:build (amd64 || arm64) && !noasm

package sim

import "unsafe"

// prefetch asks the CPU to bring the cache line at p into its caches, without waiting for it
// and without any effect on what the program computes. The simulator calls it when a verb
// leaves its client for the word the verb will touch at its target: the verb reaches the
// target hundreds of other verbs later, and by then the word, one of megabytes of simulated
// memory touched at random, is in the cache instead of a DRAM miss on the simulator's critical
// path. prefetch_other.go is the portable twin (a no-op), used with -tags noasm and on other
// architectures.
//
//go:noescape
func prefetch(p unsafe.Pointer)

// prefetchRange is prefetch for every cache line of [lo, hi), in one call. The addresses are
// plain numbers, never dereferenced by Go code: a line that is not mapped (a stack that has
// moved, say) is a hint the CPU drops. The simulator calls it for the stack of the proc it is
// about to resume (see proc.stackHint).
//
//go:noescape
func prefetchRange(lo, hi uintptr)
