package atomics

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// Prefetch is a hint: on inaccessible pages (PROT_NONE, and unmapped address space) it
// neither faults nor changes memory, and the words it touched read as before.
func TestPrefetchNeverFaults(t *testing.T) {
	p, err := unix.MmapPtr(-1, 0, nil, 3*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	defer func() { require.NoError(t, unix.MunmapPtr(p, 3*4096)) }()
	m := unsafe.Slice((*byte)(p), 3*4096)
	m[100] = 7
	require.NoError(t, unix.Mprotect(m[4096:8192], unix.PROT_NONE))
	require.NoError(t, unix.MunmapPtr(unsafe.Add(p, 8192), 4096))
	for name, f := range map[string]func(){
		"mapped":    func() { Prefetch(unsafe.Pointer(&m[0]), 4096) },
		"protected": func() { Prefetch(unsafe.Add(unsafe.Pointer(&m[0]), 4096), 4096) },
		"unmapped":  func() { Prefetch(unsafe.Add(unsafe.Pointer(&m[0]), 8192), 4096) },
		"straddle":  func() { Prefetch(unsafe.Add(unsafe.Pointer(&m[0]), 4000), 8192) },
		"empty":     func() { Prefetch(nil, 0) },
	} {
		require.NoError(t, Guard(f), name)
	}
	require.Equal(t, byte(7), m[100])
}
