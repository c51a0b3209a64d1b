package rdma

import (
	"encoding/binary"

	"github.com/farmem/farmem/internal/wordmem"
)

// readWords copies the region's bytes at off into dst as wordmem.Mem.ReadAt does, one atomic
// word load at a time (a read never tears a word), with a loop over whole aligned words that
// stores each word straight into dst: a 4 KiB read is 512 loads and stores, not 512 trips
// through ReadAt's general case for partial words.
func readWords(m wordmem.Mem, dst []byte, off uint64) {
	if off&7 == 0 {
		n := len(dst) &^ 7
		for i := 0; i < n; i += 8 {
			binary.LittleEndian.PutUint64(dst[i:i+8], m.Load(off+uint64(i)))
		}
		dst, off = dst[n:], off+uint64(n)
	}
	if len(dst) > 0 {
		m.ReadAt(dst, off, nil)
	}
}
