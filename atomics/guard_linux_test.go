package atomics

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// A fault on mapped memory inside the primitives (assembly on amd64) becomes an error.
func TestGuardMappedFault(t *testing.T) {
	m, err := unix.Mmap(-1, 0, 8192, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	defer func() { require.NoError(t, unix.Munmap(m)) }()
	require.NoError(t, unix.Mprotect(m[4096:], unix.PROT_NONE))
	r, err := RegionOf(m)
	require.NoError(t, err)
	require.NoError(t, Guard(func() { _, _ = r.FAA(4088, 1) }))
	for name, f := range map[string]func(){
		"load":  func() { _, _ = r.Load(4096) },
		"faa":   func() { _, _ = r.FAA(4104, 1) },
		"cas":   func() { _, _ = r.CAS(8184, 0, 1) },
		"copy":  func() { _ = r.ReadWords(4080, make([]uint64, 4)) },
		"nt":    func() { _ = r.WriteWordsNT(4096, []uint64{1}) },
		"store": func() { Store((*uint64)(unsafe.Pointer(&m[5000])), 1) },
	} {
		err := Guard(f)
		require.ErrorIs(t, err, ErrFault, name)
		require.Contains(t, err.Error(), "0x", name)
	}
	v, err := r.Load(4088)
	require.NoError(t, err)
	require.Equal(t, uint64(1), v)
	require.ErrorIs(t, Guard(func() {
		var p *uint64
		_ = Load(p)
	}), ErrFault)
}
