//go:build !amd64 || noasm

package atomics

import "testing"

func TestAsmMatchesFallback(t *testing.T) {
	t.Skip("no assembly in this build (noasm or not amd64): the fallback is the implementation")
}

func TestFlushEvicts(t *testing.T) {
	t.Skip("no cache-line instructions without assembly")
}
