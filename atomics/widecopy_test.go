package atomics

import (
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// ReadBytes and WriteBytes copy exactly the bytes asked for, at every length and offset around
// the wide copy's steps (4 and 16 words), to and from unaligned private buffers.
func TestRegionBytesEveryLength(t *testing.T) {
	w := make([]uint64, 96)
	r, err := NewRegion(unsafe.Pointer(&w[0]), uintptr(8*len(w)))
	require.NoError(t, err)
	for words := 0; words <= 40; words++ {
		for _, off := range []int{0, 1, 3, 8} {
			for i := range w {
				w[i] = ^uint64(0)
			}
			src := make([]byte, 8*words+5)
			for i := range src {
				src[i] = byte(i*7 + words)
			}
			require.NoError(t, r.WriteBytes(uint64(8*off), src[5:]))
			for i := range w {
				if i < off || i >= off+words {
					require.Equal(t, ^uint64(0), w[i], "word %d outside a write of %d words at %d", i, words, off)
				}
			}
			dst := make([]byte, 8*words+3+8)
			for i := range dst {
				dst[i] = 0xee
			}
			require.NoError(t, r.ReadBytes(uint64(8*off), dst[3:3+8*words]))
			require.Equal(t, src[5:], dst[3:3+8*words], "%d words at %d", words, off)
			require.Equal(t, []byte{0xee, 0xee, 0xee}, dst[:3])
			for _, b := range dst[3+8*words:] {
				require.Equal(t, byte(0xee), b, "a read of %d words wrote past its end", words)
			}
		}
	}
}

// A long ReadBytes beside a writer that flips every word between two values with atomic
// stores sees each word whole: one value or the other, never a mix.
func TestRegionBytesWordsNeverTear(t *testing.T) {
	const words = 64
	w := make([]uint64, words+1)
	r, err := NewRegion(unsafe.Pointer(&w[0]), uintptr(8*len(w)))
	require.NoError(t, err)
	const a, b = 0x0123456789abcdef, 0xfedcba9876543210
	for i := range words {
		w[i+1] = a
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for v := uint64(a); !stop.Load(); v ^= a ^ b {
			for i := range words {
				atomic.StoreUint64(&w[i+1], v)
			}
		}
	}()
	buf := make([]byte, 8*words)
	for range 20000 {
		require.NoError(t, r.ReadBytes(8, buf))
		for i := 0; i < len(buf); i += 8 {
			v := *(*uint64)(unsafe.Pointer(&buf[i]))
			if v != a && v != b {
				stop.Store(true)
				wg.Wait()
				t.Fatalf("word %d read torn: %#x", i/8, v)
			}
		}
	}
	stop.Store(true)
	wg.Wait()
}
