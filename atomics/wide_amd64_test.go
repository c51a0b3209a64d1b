//go:build amd64 && !noasm

package atomics

import (
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// The 16-byte copies move the same words as the word loop for every length and every
// alignment of either side: the shared side 16-byte aligned or not, the private side at any
// byte.
func TestWideCopiesMatchWordCopy(t *testing.T) {
	if !features.Wide {
		t.Skipf("16-byte accesses not known atomic here (%v): the copies use the word loop", features)
	}
	shared := make([]uint64, 80) // Go aligns large word slices to 16 bytes; checked below
	require.Zero(t, uintptr(unsafe.Pointer(&shared[0]))&15)
	for n := range 70 {
		for so := range 2 { // shared side's word offset: 16-byte aligned, or not
			for skew := range 16 { // private side's byte offset
				src := make([]byte, 8*n+32)
				for i := range src {
					src[i] = byte(i*7 + n + skew)
				}
				sh := shared[so : so+n+1]
				clear(shared)
				// Into shared words, then out again.
				if n > 0 {
					asmCopyWideDst(unsafe.Pointer(&sh[0]), unsafe.Pointer(&src[skew]), uintptr(n))
				}
				want := make([]uint64, n+1)
				if n > 0 {
					goCopyInBytes(&want[0], &src[skew], uintptr(n))
				}
				require.Equal(t, want, sh, "in: n=%d so=%d skew=%d", n, so, skew)
				got, exp := make([]byte, 8*n+32), make([]byte, 8*n+32)
				if n > 0 {
					asmCopyWideSrc(unsafe.Pointer(&got[skew]), unsafe.Pointer(&sh[0]), uintptr(n))
					goCopyOutBytes(&exp[skew], &sh[0], uintptr(n))
				}
				require.Equal(t, exp, got, "out: n=%d so=%d skew=%d", n, so, skew)
			}
		}
	}
}

// A copy out of words that a writer keeps changing never returns a torn word, and a copy into
// them never leaves one: every word a copy moves, at either alignment of the shared side, is
// one some writer wrote whole (both halves of every word carry the same generation).
func TestWideCopiesNeverTearWords(t *testing.T) {
	const words = 40
	shared := make([]uint64, words+1)
	var stop atomic.Bool
	var wg sync.WaitGroup
	pat := func(g uint32) uint64 { return uint64(g)<<32 | uint64(g) }
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			src := make([]uint64, words+1)
			for g := uint32(w); !stop.Load(); g += 2 {
				for i := range src {
					src[i] = pat(g + uint32(i))
				}
				copyInWords(&shared[g%2], &src[0], words)
			}
		}()
	}
	dst := make([]uint64, words+1)
	for k := range 200000 {
		so := k % 2
		copyOutWords(&dst[0], &shared[so], words)
		for i, v := range dst[:words] {
			if uint32(v) != uint32(v>>32) {
				stop.Store(true)
				wg.Wait()
				t.Fatalf("torn word %d: %#x (shared offset %d)", i, v, so)
			}
		}
	}
	stop.Store(true)
	wg.Wait()
}
