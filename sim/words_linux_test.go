package sim

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestNodeMemoryUnmapped checks that a node's mapped memory is released once the node is
// unreachable: the mapping is in /proc/self/maps while the node lives, and gone after the
// collections that run its cleanup.
func TestNodeMemoryUnmapped(t *testing.T) {
	mapped := func(addr uintptr) bool {
		maps, err := os.ReadFile("/proc/self/maps")
		require.NoError(t, err)
		for _, line := range strings.Split(string(maps), "\n") {
			lo, rest, ok := strings.Cut(line, "-")
			if !ok {
				continue
			}
			hi, _, _ := strings.Cut(rest, " ")
			l, err1 := strconv.ParseUint(lo, 16, 64)
			h, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 == nil && err2 == nil && uint64(addr) >= l && uint64(addr) < h {
				return true
			}
		}
		return false
	}
	n := &node{}
	n.words = newWords(n, 4<<20/8)
	addr := uintptr(unsafe.Pointer(&n.words[0]))
	n.words[len(n.words)-1] = 1
	require.True(t, mapped(addr))
	runtime.KeepAlive(n)
	n = nil
	for i := 0; i < 100 && mapped(addr); i++ {
		runtime.GC()
		runtime.Gosched()
	}
	require.False(t, mapped(addr), "the node's memory is still mapped after it became unreachable")
}
