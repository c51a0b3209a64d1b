//go:build !(amd64 || arm64) || noasm

package sim

import "unsafe"

// prefetch is the portable twin of the assembly hint (see prefetch_asm.go): it does nothing.
func prefetch(p unsafe.Pointer) {}

// prefetchRange is the portable twin of the assembly hint (see prefetch_asm.go): it does
// nothing.
func prefetchRange(lo, hi uintptr) {}
