package rdma

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/internal/wordmem"
)

// readWords returns what ReadAt returns, for aligned and unaligned offsets and lengths.
func TestReadWordsMatchesReadAt(t *testing.T) {
	words := make([]uint64, 64)
	for i := range words {
		words[i] = 0x0102030405060708 * uint64(i+1)
	}
	m := wordmem.FromWords(words)
	for _, off := range []uint64{0, 1, 7, 8, 13, 64} {
		for _, n := range []int{0, 1, 7, 8, 9, 16, 100, 256} {
			want, got := make([]byte, n), make([]byte, n)
			m.ReadAt(want, off, nil)
			readWords(m, got, off)
			require.Equal(t, want, got, "off %d len %d", off, n)
		}
	}
}
