package sim

import (
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestNewWordsHugeAligned checks newWords: a memory of a huge page or more starts on a
// huge-page boundary, has exactly the words asked for (the extra of its allocation is out of
// reach), and is zero; a smaller one is what make returns.
func TestNewWordsHugeAligned(t *testing.T) {
	for _, n := range []uint64{hugePage / 8, 4 << 20 / 8, (hugePage + 4096) / 8} {
		w := newWords(&node{}, n)
		require.Len(t, w, int(n))
		require.Equal(t, int(n), cap(w), "the words past n must be out of reach")
		require.Zero(t, uintptr(unsafe.Pointer(&w[0]))%hugePage, "a memory of %d words must start on a huge page", n)
		for i := range w {
			if w[i] != 0 {
				t.Fatalf("word %d of a new memory is %#x", i, w[i])
			}
		}
		w[n-1] = 1 // the last word is writable
	}
	w := newWords(&node{}, 512)
	require.Len(t, w, 512)
	require.Equal(t, 512, cap(w))
}

// TestStackHints checks that, where the assembly twins exist, stackBounds reads the calling
// goroutine's stack bounds (the self-check behind stackHints passes), and that a blocked
// coroutine proc records a frame inside its stack: if a Go release moves the bounds in the
// runtime's goroutine descriptor, this fails instead of the stack prefetch going quietly off.
func TestStackHints(t *testing.T) {
	if lo, hi := stackBounds(); lo == 0 && hi == 0 {
		t.Skipf("no assembly stackBounds in this build (%s)", runtime.GOARCH)
	}
	require.True(t, stackHints, "stackBounds does not read this goroutine's stack bounds")
	s, err := New(Model{}, 1)
	require.NoError(t, err)
	defer s.Close()
	var p *proc
	s.Run(func() {
		_ = s.Parallel(1, func(int) {
			p = s.cur.Load()
			_ = s.rt.Sleep(t.Context(), 1)
			_ = s.rt.Sleep(t.Context(), 1)
		})
	})
	require.NotNil(t, p)
	require.NotZero(t, p.sp, "a blocked coroutine records its frame")
	require.Less(t, p.sp, p.top, "the frame it records lies under its stack's end")
	require.Less(t, p.top-p.sp, uintptr(1<<20))
}

// TestNodeBytesMatchModel checks readBytes and writeBytes, whose whole aligned words are
// copied at once and whose other bytes are handled one word at a time, against a byte array
// holding the simulated memory as it must be: word i's bytes at 8i..8i+7, low byte first.
func TestNodeBytesMatchModel(t *testing.T) {
	const size = 512
	n := &node{words: make([]uint64, size/8)}
	model := make([]byte, size)
	rnd := rand.New(rand.NewPCG(1, 2))
	check := func() {
		t.Helper()
		for i, w := range n.words {
			require.Equal(t, binary.LittleEndian.Uint64(model[8*i:]), w, "word %d", i)
		}
	}
	for range 2000 {
		off := rnd.Uint64N(size)
		l := rnd.Uint64N(min(size-off, 80) + 1)
		if rnd.IntN(2) == 0 { // often aligned and whole words: the fast path
			off &^= 7
			l = min(l&^7, size-off)
		}
		src := make([]byte, l)
		for i := range src {
			src[i] = byte(rnd.Uint32())
		}
		n.writeBytes(off, src)
		copy(model[off:], src)
		check()
		roff := rnd.Uint64N(size)
		rl := rnd.Uint64N(min(size-roff, 80) + 1)
		if rnd.IntN(2) == 0 {
			roff &^= 7
			rl = min(rl&^7, size-roff)
		}
		dst := make([]byte, rl)
		n.readBytes(roff, dst)
		require.Equal(t, model[roff:roff+rl], dst, "read of %d bytes at %d", rl, roff)
	}
}
