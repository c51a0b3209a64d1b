package wordmem

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// mapped reports whether addr lies in a mapping of this process (/proc/self/maps).
func mapped(t *testing.T, addr uintptr) bool {
	t.Helper()
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

// TestMapWords: the words are n, zero, writable, start at a multiple of align, have no
// capacity beyond n, and their mapping is released once the owner is unreachable (the
// collections that run its cleanup); bad arguments give nil.
func TestMapWords(t *testing.T) {
	type owner struct{ w []uint64 }
	for _, c := range []struct{ n, align uint64 }{{1, 8}, {4096/8 + 3, 8}, {2 << 20 / 8, 2 << 20}, {100, 1 << 16}} {
		o := &owner{}
		o.w = MapWords(o, c.n, c.align)
		require.Len(t, o.w, int(c.n))
		require.Equal(t, int(c.n), cap(o.w))
		addr := uintptr(unsafe.Pointer(&o.w[0]))
		require.Zero(t, addr%uintptr(c.align))
		for i, v := range o.w {
			require.Zero(t, v, "word %d", i)
		}
		o.w[c.n-1] = 1
		require.True(t, mapped(t, addr))
		runtime.KeepAlive(o)
		o = nil
		for i := 0; i < 100 && mapped(t, addr); i++ {
			runtime.GC()
			runtime.Gosched()
		}
		require.False(t, mapped(t, addr), "still mapped after its owner became unreachable (%+v)", c)
	}
	o := &owner{}
	require.Nil(t, MapWords(o, 0, 8))
	require.Nil(t, MapWords(o, 8, 12))
}
