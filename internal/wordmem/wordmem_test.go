package wordmem_test

import (
	"bytes"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/internal/wordmem"
)

func TestUnalignedCopies(t *testing.T) {
	w := make([]uint64, 8)
	m := wordmem.FromWords(w)
	require.Equal(t, uint64(64), m.Size())
	src := []byte("abcdefghijklmnopqrstu") // 21 bytes
	for off := range uint64(16) {
		clear(w)
		m.WriteAt(src, off, nil)
		got := make([]byte, 64)
		m.ReadAt(got, 0, nil)
		want := make([]byte, 64)
		copy(want[off:], src)
		require.Equal(t, want, got, "offset %d", off)
		part := make([]byte, len(src))
		m.ReadAt(part, off, nil)
		require.Equal(t, src, part)
	}
	m.Store(8, 0x0807060504030201)
	b := make([]byte, 3)
	m.ReadAt(b, 9, nil)
	require.Equal(t, []byte{2, 3, 4}, b, "bytes are little-endian in words")
}

// Two writers of disjoint bytes of the same words never lose each other's bytes.
func TestPartialWritesDoNotClobberNeighbours(t *testing.T) {
	w := make([]uint64, 2)
	m := wordmem.FromWords(w)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2000 {
				m.WriteAt([]byte{byte(i + 1)}, uint64(i), nil)
			}
		}()
	}
	wg.Wait()
	got := make([]byte, 16)
	m.ReadAt(got, 0, nil)
	require.Equal(t, []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, got)
}

func TestAtomics(t *testing.T) {
	m := wordmem.FromWords(make([]uint64, 1))
	require.Equal(t, uint64(0), m.Atomic(&farmem.Op{Kind: farmem.OpFAA, Swap: 5}, 0))
	require.Equal(t, uint64(5), m.Atomic(&farmem.Op{Kind: farmem.OpCAS, Cmp: 4, Swap: 9}, 0))
	require.Equal(t, uint64(5), m.Load(0), "failed CAS left the word")
	require.Equal(t, uint64(5), m.Atomic(&farmem.Op{Kind: farmem.OpMaskedCAS, Cmp: 1, CmpMask: 1, Swap: 0xf0, SwapMask: 0xf0}, 0))
	require.Equal(t, uint64(0xf5), m.Load(0))
	var hooks int
	m2 := wordmem.FromWords(make([]uint64, 4))
	m2.WriteAt(bytes.Repeat([]byte{1}, 32), 0, func() { hooks++ })
	require.Equal(t, 3, hooks, "called between the words")
}
