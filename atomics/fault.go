package atomics

import (
	"fmt"
	"runtime"
	"strings"
)

// FaultOf returns the error Guard makes of a recovered panic value r: a memory fault (with
// panic-on-fault set) wrapped in ErrFault and naming the faulting address, or nil if r is no
// memory fault (the caller re-panics it). It is for a caller that guards a run of accesses
// with one set-up instead of a Guard per access: it sets debug.SetPanicOnFault itself,
// restores the previous setting in a deferred function, and there recovers and classifies
// with FaultOf.
func FaultOf(r any) error {
	if a, ok := r.(interface{ Addr() uintptr }); ok {
		return fmt.Errorf("%w at %#x: %v", ErrFault, a.Addr(), r)
	}
	if re, ok := r.(runtime.Error); ok && strings.Contains(re.Error(), "invalid memory address") {
		return fmt.Errorf("%w: %v", ErrFault, r)
	}
	return nil
}
