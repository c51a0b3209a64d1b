package atomics

import (
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
)

func TestWordOps(t *testing.T) {
	w := make([]uint64, 4)
	p := &w[1]
	Store(p, 7)
	require.Equal(t, uint64(7), Load(p))
	require.Equal(t, uint64(7), CAS(p, 6, 9), "failed CAS returns the word")
	require.Equal(t, uint64(7), Load(p))
	require.Equal(t, uint64(7), CAS(p, 7, 9), "successful CAS returns old")
	require.Equal(t, uint64(9), Load(p))
	require.Equal(t, uint64(9), FAA(p, 1))
	require.Equal(t, uint64(10), FAA(p, ^uint64(0)), "negative delta is two's complement")
	require.Equal(t, uint64(9), Load(p))
	Store(p, ^uint64(0))
	require.Equal(t, ^uint64(0), FAA(p, 2))
	require.Equal(t, uint64(1), Load(p), "FAA wraps modulo 2^64")
	StoreNT(p, 42)
	SFence()
	require.Equal(t, uint64(42), Load(p))
	require.Equal(t, []uint64{0, 42, 0, 0}, w, "neighbours untouched")
	MFence()
	LFence()
}

func TestWordCopies(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := range 40 {
		src := make([]uint64, n)
		for i := range src {
			src[i] = r.Uint64()
		}
		shared := make([]uint64, n+2)
		StoreWords(&shared[1], src)
		require.Equal(t, uint64(0), shared[0])
		require.Equal(t, uint64(0), shared[n+1])
		got := make([]uint64, n)
		LoadWords(got, &shared[1])
		require.Equal(t, src, got)
		clear(shared)
		StoreWordsNT(&shared[1], src)
		LoadWords(got, &shared[1])
		require.Equal(t, src, got)
		require.Equal(t, uint64(0), shared[n+1])
	}
	LoadWords(nil, nil) // empty copies touch nothing
	StoreWords(nil, nil)
	StoreWordsNT(nil, nil)
}

func TestRegionChecks(t *testing.T) {
	w := make([]uint64, 8)
	r, err := NewRegion(unsafe.Pointer(&w[0]), 64)
	require.NoError(t, err)
	require.Equal(t, uint64(64), r.Size())

	_, err = NewRegion(unsafe.Add(unsafe.Pointer(&w[0]), 4), 56)
	require.ErrorIs(t, err, farmem.ErrMisaligned)
	_, err = NewRegion(unsafe.Pointer(&w[0]), 60)
	require.ErrorIs(t, err, farmem.ErrMisaligned)
	_, err = NewRegion(nil, 8)
	require.ErrorIs(t, err, farmem.ErrInvalid)
	empty, err := NewRegion(nil, 0)
	require.NoError(t, err)
	_, err = empty.Load(0)
	require.ErrorIs(t, err, farmem.ErrOutOfRange)
	zr, err := RegionOf(nil)
	require.NoError(t, err)
	require.Equal(t, uint64(0), zr.Size())

	for _, off := range []uint64{1, 3, 4, 7, 9, 63} {
		_, err = r.Load(off)
		require.ErrorIs(t, err, farmem.ErrMisaligned, "load at %d", off)
		require.ErrorIs(t, r.Store(off, 1), farmem.ErrMisaligned)
		require.ErrorIs(t, r.StoreNT(off, 1), farmem.ErrMisaligned)
		_, err = r.CAS(off, 0, 1)
		require.ErrorIs(t, err, farmem.ErrMisaligned)
		_, err = r.FAA(off, 1)
		require.ErrorIs(t, err, farmem.ErrMisaligned)
	}
	for _, off := range []uint64{64, 72, 1 << 40, ^uint64(7)} {
		_, err = r.Load(off)
		require.ErrorIs(t, err, farmem.ErrOutOfRange, "load at %#x", off)
		_, err = r.FAA(off, 1)
		require.ErrorIs(t, err, farmem.ErrOutOfRange)
		require.ErrorIs(t, r.WriteBack(off, 8), farmem.ErrOutOfRange)
		require.ErrorIs(t, r.FlushForRead(off, 8), farmem.ErrOutOfRange)
	}
	require.ErrorIs(t, r.ReadWords(56, make([]uint64, 2)), farmem.ErrOutOfRange)
	require.ErrorIs(t, r.WriteWords(8, make([]uint64, 8)), farmem.ErrOutOfRange)
	require.ErrorIs(t, r.WriteWordsNT(4, make([]uint64, 1)), farmem.ErrMisaligned)
	require.ErrorIs(t, r.ReadBytes(0, make([]byte, 7)), farmem.ErrMisaligned)
	require.ErrorIs(t, r.WriteBytes(8, make([]byte, 12)), farmem.ErrMisaligned)
	require.ErrorIs(t, r.WriteBytesNT(60, make([]byte, 8)), farmem.ErrMisaligned)
	require.ErrorIs(t, r.WriteBack(60, 5), farmem.ErrOutOfRange)
	require.ErrorIs(t, r.WriteBack(^uint64(0), 2), farmem.ErrOutOfRange, "offset overflow")
	require.NoError(t, r.WriteBack(3, 61), "write-back takes any alignment")
	require.NoError(t, r.FlushForRead(0, 64))
	require.NoError(t, r.WriteBack(64, 0), "empty range at the end")
	require.Equal(t, make([]uint64, 8), w, "rejected calls wrote nothing")

	prev, err := r.FAA(56, 5)
	require.NoError(t, err)
	require.Equal(t, uint64(0), prev)
	prev, err = r.CAS(56, 5, 6)
	require.NoError(t, err)
	require.Equal(t, uint64(5), prev)
	require.NoError(t, r.Store(0, 1))
	require.NoError(t, r.StoreNT(8, 2))
	SFence()
	v, err := r.Load(8)
	require.NoError(t, err)
	require.Equal(t, uint64(2), v)
	require.Equal(t, []uint64{1, 2, 0, 0, 0, 0, 0, 6}, w)
	p, err := r.Word(56)
	require.NoError(t, err)
	require.Same(t, &w[7], p)
}

func TestRegionBytesAreLittleEndian(t *testing.T) {
	w := make([]uint64, 4)
	r, err := NewRegion(unsafe.Pointer(&w[0]), 32)
	require.NoError(t, err)
	src := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	require.NoError(t, r.WriteBytes(8, src))
	require.Equal(t, []uint64{0, 0x0807060504030201, 0x100f0e0d0c0b0a09, 0}, w)
	got := make([]byte, 16)
	require.NoError(t, r.ReadBytes(8, got))
	require.Equal(t, src, got)
	clear(w)
	require.NoError(t, r.WriteBytesNT(16, src))
	require.Equal(t, []uint64{0, 0, 0x0807060504030201, 0x100f0e0d0c0b0a09}, w)
	words := make([]uint64, 2)
	require.NoError(t, r.ReadWords(16, words))
	require.Equal(t, w[2:], words)
	require.NoError(t, r.WriteWords(0, []uint64{5, 6}))
	require.NoError(t, r.WriteWordsNT(16, []uint64{7, 8}))
	require.Equal(t, []uint64{5, 6, 7, 8}, w)
	require.NoError(t, r.ReadBytes(0, nil))
}

// Unaligned private buffers are fine: only the shared side must be aligned.
func TestRegionBytesUnalignedPrivateBuffer(t *testing.T) {
	w := make([]uint64, 4)
	r, _ := NewRegion(unsafe.Pointer(&w[0]), 32)
	buf := make([]byte, 33)
	for i := range buf {
		buf[i] = byte(i)
	}
	require.NoError(t, r.WriteBytes(0, buf[1:33]))
	out := make([]byte, 35)
	require.NoError(t, r.ReadBytes(0, out[3:35]))
	require.Equal(t, buf[1:33], out[3:35])
}

func TestDisciplines(t *testing.T) {
	for d := Plain; d <= NonTemporal; d++ {
		got, err := ParseDiscipline(d.String())
		require.NoError(t, err)
		require.Equal(t, d, got)
	}
	_, err := ParseDiscipline("wbinvd")
	require.ErrorIs(t, err, farmem.ErrInvalid)
	require.Equal(t, "discipline(9)", Discipline(9).String())

	f := CPU()
	require.True(t, f.Has(Plain))
	require.False(t, f.Has(Discipline(9)))
	require.Equal(t, hasAsm, f.Asm)
	require.Contains(t, []int{32, 64, 128, 256}, f.LineSize)
	wb, fr := f.WriteBack(), f.FlushForRead()
	require.True(t, f.Has(wb))
	require.True(t, f.Has(fr))
	require.NotEqual(t, CLWB, fr, "CLWB never serves flush-before-read")
	t.Logf("features: %v; write-back with %v, flush-before-read with %v", f, wb, fr)

	// Selection order, on synthetic feature sets.
	all := Features{Asm: true, CLFLUSH: true, CLFLUSHOPT: true, CLWB: true}
	require.Equal(t, CLWB, all.WriteBack())
	require.Equal(t, CLFLUSHOPT, all.FlushForRead())
	noWB := Features{Asm: true, CLFLUSH: true, CLFLUSHOPT: true}
	require.Equal(t, CLFLUSHOPT, noWB.WriteBack())
	old := Features{Asm: true, CLFLUSH: true}
	require.Equal(t, CLFLUSH, old.WriteBack())
	require.Equal(t, CLFLUSH, old.FlushForRead())
	require.Equal(t, Plain, Features{CLWB: true}.WriteBack(), "nothing without assembly")
	require.Equal(t, "noasm line=64", Features{LineSize: 64, CLWB: true}.String())

	w := make([]uint64, 16)
	p := unsafe.Pointer(&w[0])
	for d := Plain; d <= NonTemporal; d++ {
		err := WriteBackWith(d, p, 128)
		switch {
		case d == NonTemporal:
			require.ErrorIs(t, err, farmem.ErrInvalid)
		case f.Has(d):
			require.NoError(t, err, "%v", d)
		default:
			require.ErrorIs(t, err, ErrUnsupported, "%v", d)
			require.ErrorIs(t, err, farmem.ErrNotSupported)
		}
		err = FlushForReadWith(d, p, 128)
		switch {
		case d == CLWB || d == NonTemporal:
			require.ErrorIs(t, err, farmem.ErrInvalid, "%v does not invalidate", d)
		case f.Has(d):
			require.NoError(t, err, "%v", d)
		default:
			require.ErrorIs(t, err, ErrUnsupported, "%v", d)
		}
	}
	require.ErrorIs(t, WriteBackWith(Discipline(9), p, 8), farmem.ErrInvalid)
}

// Write-back and flush never lose or change data, whatever the alignment of the range.
func TestFlushKeepsData(t *testing.T) {
	w := make([]uint64, 1024)
	r, _ := NewRegion(unsafe.Pointer(&w[0]), 8192)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range w {
		w[i] = rng.Uint64()
	}
	want := append([]uint64(nil), w...)
	for range 200 {
		off := rng.Uint64N(8192)
		n := rng.Uint64N(8192 - off + 1)
		d := Discipline(rng.IntN(4))
		if CPU().Has(d) {
			require.NoError(t, r.WriteBackWith(d, off, n))
		}
		if d != CLWB && CPU().Has(d) {
			require.NoError(t, r.FlushForReadWith(d, off, n))
		}
		require.NoError(t, r.WriteBack(off, n))
		require.NoError(t, r.FlushForRead(off, n))
	}
	require.Equal(t, want, w)
}

func TestGuard(t *testing.T) {
	require.NoError(t, Guard(func() {}))
	require.PanicsWithValue(t, "not a fault", func() { _ = Guard(func() { panic("not a fault") }) })
}

// Concurrent atomics through the public functions lose no update.
func TestConcurrentAtomics(t *testing.T) {
	var words [2]uint64
	const goroutines, each = 8, 2000
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				FAA(&words[0], 1)
				for {
					cur := Load(&words[1])
					if CAS(&words[1], cur, cur+uint64(g)+1) == cur {
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	require.Equal(t, uint64(goroutines*each), Load(&words[0]))
	require.Equal(t, uint64(each*goroutines*(goroutines+1)/2), Load(&words[1]))
}

// TestAddOwned checks that a goroutine's own additions are exact (wrapping modulo 2^64) and
// that a reader on another goroutine sees whole words that never go backwards.
func TestAddOwned(t *testing.T) {
	w := make([]uint64, 3)
	p := &w[1]
	AddOwned(p, 5)
	AddOwned(p, ^uint64(0))
	require.Equal(t, uint64(4), Load(p), "a negative delta is two's complement")
	require.Zero(t, w[0]+w[2], "the neighbours are untouched")

	const n = 200_000
	var stop sync.WaitGroup
	stop.Add(1)
	finished := make(chan struct{})
	bad := make(chan uint64, 1)
	go func() {
		defer stop.Done()
		var last uint64
		for {
			select {
			case <-finished:
				return
			default:
			}
			v := Load(p) - 4
			if v < last || v > n {
				bad <- v
				return
			}
			last = v
		}
	}()
	for range n {
		AddOwned(p, 1)
	}
	close(finished)
	stop.Wait()
	require.Empty(t, bad, "the reader saw a word out of order or torn")
	require.Equal(t, uint64(n+4), Load(p))
}

// TestAddOwned8 checks that AddOwned8 adds each of its eight deltas to its own word (wrapping
// modulo 2^64, zero leaving the word as it is) and touches nothing beyond the eight words.
func TestAddOwned8(t *testing.T) {
	w := make([]uint64, 10)
	dst := (*[8]uint64)(w[1:9])
	for i := range dst {
		dst[i] = uint64(100 * i)
	}
	delta := [8]uint64{1, 0, 3, ^uint64(0), 5, 6, 0, 1 << 63}
	AddOwned8(dst, &delta)
	AddOwned8(dst, &delta)
	for i := range dst {
		require.Equal(t, uint64(100*i)+2*delta[i], Load(&dst[i]), "word %d", i)
	}
	require.Zero(t, w[0]+w[9], "the neighbours are untouched")
}

// LoadBytes and StoreBytes move whole words as little-endian bytes, to and from private buffers
// of any alignment, and touch nothing beyond the words they were given.
func TestLoadStoreBytes(t *testing.T) {
	w := make([]uint64, 40)
	for n := 8; n <= 256; n += 8 {
		for _, skew := range []int{0, 1, 3} {
			clear(w)
			src := make([]byte, n+skew)[skew:]
			for i := range src {
				src[i] = byte(i*7 + n)
			}
			StoreBytes(&w[1], src)
			require.Zero(t, w[0], "n %d", n)
			require.Zero(t, w[1+n/8], "n %d", n)
			for i := range n / 8 {
				require.Equal(t, binary.LittleEndian.Uint64(src[8*i:]), w[1+i], "n %d word %d", n, i)
			}
			dst := make([]byte, n+skew+8)[skew:]
			dst[n] = 0xaa
			LoadBytes(dst[:n], &w[1])
			require.Equal(t, src, dst[:n], "n %d skew %d", n, skew)
			require.Equal(t, byte(0xaa), dst[n], "no byte written past the words")
		}
	}
	LoadBytes(nil, &w[0])
	StoreBytes(&w[0], nil)
}
