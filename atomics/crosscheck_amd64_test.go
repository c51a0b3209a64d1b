//go:build amd64 && !noasm

package atomics

import (
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// The assembly and the pure-Go fallback give the same results on the same random inputs.
func TestAsmMatchesFallback(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	interesting := []uint64{0, 1, 2, 1 << 63, ^uint64(0), ^uint64(0) - 1, 0x7fffffffffffffff}
	pick := func() uint64 {
		if rng.IntN(3) == 0 {
			return interesting[rng.IntN(len(interesting))]
		}
		return rng.Uint64()
	}
	var a, b [1]uint64
	for range 20000 {
		init, x, y := pick(), pick(), pick()
		if rng.IntN(2) == 0 {
			x = init // make about half the CASes succeed
		}
		a[0], b[0] = init, init
		require.Equal(t, goLoad(&b[0]), asmLoad(&a[0]))
		require.Equal(t, goCAS(&b[0], x, y), asmCAS(&a[0], x, y), "cas %#x %#x %#x", init, x, y)
		require.Equal(t, b[0], a[0])
		require.Equal(t, goFAA(&b[0], y), asmFAA(&a[0], y))
		require.Equal(t, b[0], a[0])
		asmStore(&a[0], x)
		goStore(&b[0], x)
		require.Equal(t, b[0], a[0])
		asmStoreNT(&a[0], y)
		asmSFence()
		goStoreNT(&b[0], y)
		require.Equal(t, b[0], a[0])
	}
	// Copies, with private buffers at every byte misalignment.
	for range 500 {
		n := rng.IntN(70)
		src := make([]uint64, n)
		for i := range src {
			src[i] = pick()
		}
		sa, sb := make([]uint64, n+1), make([]uint64, n+1)
		if n > 0 {
			copyInWords(&sa[0], &src[0], uintptr(n))
			goCopyInWords(&sb[0], &src[0], uintptr(n))
			require.Equal(t, sb, sa)
			clear(sa)
			copyInWordsNT(&sa[0], &src[0], uintptr(n))
			require.Equal(t, sb, sa)
			oa, ob := make([]uint64, n), make([]uint64, n)
			copyOutWords(&oa[0], &sa[0], uintptr(n))
			goCopyOutWords(&ob[0], &sa[0], uintptr(n))
			require.Equal(t, ob, oa)
			require.Equal(t, src, oa)

			skew := rng.IntN(8)
			ba, bb := make([]byte, n*8+8), make([]byte, n*8+8)
			copyOutBytes(&ba[skew], &sa[0], uintptr(n))
			goCopyOutBytes(&bb[skew], &sa[0], uintptr(n))
			require.Equal(t, bb, ba)
			wa, wb := make([]uint64, n), make([]uint64, n)
			copyInBytes(&wa[0], &ba[skew], uintptr(n))
			goCopyInBytes(&wb[0], &ba[skew], uintptr(n))
			require.Equal(t, wb, wa)
			require.Equal(t, src, wa)
			clear(wa)
			copyInBytesNT(&wa[0], &ba[skew], uintptr(n))
			require.Equal(t, wb, wa)
		}
	}
}

// Assembly and fallback atomics interleave on the same words without losing updates: both
// are coherent in this domain. Run under -race, the fallback's half is instrumented.
func TestAsmAndFallbackConcurrently(t *testing.T) {
	var words [3]uint64
	const goroutines, each = 8, 3000
	var wg sync.WaitGroup
	for g := range goroutines {
		useAsm := g%2 == 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			faa, cas, ld := goFAA, goCAS, goLoad
			if useAsm {
				faa, cas, ld = asmFAA, asmCAS, asmLoad
			}
			for i := range each {
				faa(&words[0], 1)
				for {
					cur := ld(&words[1])
					if cas(&words[1], cur, cur+3) == cur {
						break
					}
				}
				if i%2 == 0 {
					faa(&words[2], ^uint64(0)) // -1
				} else {
					faa(&words[2], 1)
				}
			}
		}()
	}
	wg.Wait()
	require.Equal(t, uint64(goroutines*each), goLoad(&words[0]))
	require.Equal(t, uint64(3*goroutines*each), asmLoad(&words[1]))
	require.Equal(t, uint64(0), goLoad(&words[2]))
}

// CPUID agrees with the kernel's view of the CPU.
func TestFeaturesMatchCPUInfo(t *testing.T) {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skipf("no /proc/cpuinfo: %v", err)
	}
	var flags []string
	for line := range strings.Lines(string(data)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
			flags = strings.Fields(v)
			break
		}
	}
	require.NotEmpty(t, flags)
	f := CPU()
	require.True(t, f.Asm)
	require.Equal(t, slices.Contains(flags, "clflush"), f.CLFLUSH)
	require.Equal(t, slices.Contains(flags, "clflushopt"), f.CLFLUSHOPT)
	require.Equal(t, slices.Contains(flags, "clwb"), f.CLWB)
	require.Equal(t, slices.Contains(flags, "sse2"), f.NonTemporal)
	require.NotEmpty(t, strings.TrimSpace(f.Vendor))
}

// chase builds a random cyclic pointer chain through nLines lines spread a page apart, so
// that timing a walk of it serialises one load per line.
func chase(nLines int) ([]uint64, []uintptr) {
	const stride = 4096 / 8
	buf := make([]uint64, nLines*stride)
	order := rand.New(rand.NewPCG(7, 8)).Perm(nLines)
	offs := make([]uintptr, nLines)
	for i, o := range order {
		offs[i] = uintptr(o*stride + (i%8+1)*8) // vary the line within the page; never the first
	}
	for i := range offs {
		buf[offs[i]] = uint64(offs[(i+1)%nLines])
	}
	return buf, offs
}

func walk(buf []uint64, start uintptr, n int) time.Duration {
	base := unsafe.Pointer(&buf[0])
	at := start
	t0 := time.Now()
	for range n {
		at = uintptr(asmLoad((*uint64)(unsafe.Add(base, at*8))))
	}
	return time.Since(t0)
}

// flushedSlowdown returns how much longer, per line, a walk of the chain takes right after
// flushing every line of it with flush than right after warming it (medians of several
// trials), and the ratio of the two.
func flushedSlowdown(t *testing.T, flush func(p unsafe.Pointer)) (perLine time.Duration, ratio float64) {
	const nLines, trials = 64, 15
	buf, offs := chase(nLines)
	base := unsafe.Pointer(&buf[0])
	var warm, cold []time.Duration
	for range trials {
		walk(buf, offs[0], nLines)
		warm = append(warm, walk(buf, offs[0], nLines))
		walk(buf, offs[0], nLines)
		for _, o := range offs {
			flush(unsafe.Add(base, o*8))
		}
		asmMFence()
		cold = append(cold, walk(buf, offs[0], nLines))
	}
	slices.Sort(warm)
	slices.Sort(cold)
	w, c := warm[trials/2], cold[trials/2]
	t.Logf("64 dependent loads: %v warm, %v after flushing", w, c)
	return (c - w) / nLines, float64(c) / float64(max(w, 1))
}

// The flushes really evict: a pointer chase through flushed lines is much slower than through
// cached ones, while a "flush" that only fences (the broken variant) is not detected as one.
// Evicted means at least 30 ns more per line (a DRAM access is ~100 ns) and 1.5x the warm
// walk; the absolute part keeps the check meaningful when -race or a busy machine slows the
// warm walk down.
func TestFlushEvicts(t *testing.T) {
	f := CPU()
	try := func(name string, flush func(p unsafe.Pointer), wantEvict bool) {
		t.Run(name, func(t *testing.T) {
			var extra time.Duration
			var ratio float64
			for range 5 { // a noisy neighbour can spoil one attempt, not five
				extra, ratio = flushedSlowdown(t, flush)
				if (extra > 30*time.Nanosecond && ratio > 1.5) == wantEvict {
					return
				}
			}
			if wantEvict {
				t.Fatalf("%s did not evict: %v more per line, %.1fx", name, extra, ratio)
			}
			t.Fatalf("%s looked like an eviction: %v more per line, %.1fx", name, extra, ratio)
		})
	}
	if f.CLFLUSHOPT {
		try("clflushopt", func(p unsafe.Pointer) { require.NoError(t, FlushForReadWith(CLFLUSHOPT, p, 8)) }, true)
	}
	if f.CLFLUSH {
		try("clflush", func(p unsafe.Pointer) { require.NoError(t, FlushForReadWith(CLFLUSH, p, 8)) }, true)
	}
	try("default", func(p unsafe.Pointer) { FlushForRead(p, 8) }, true)
	// A range that starts 4 bytes before the line must still reach the line: rounding down
	// and counting lines from the misaligned start is the part most easily got wrong.
	try("straddling", func(p unsafe.Pointer) { FlushForRead(unsafe.Add(p, -4), 8) }, true)
	try("range-before", func(p unsafe.Pointer) { FlushForRead(unsafe.Add(p, -64), 60) }, false)
	try("fence-only", func(unsafe.Pointer) { MFence() }, false)
	if f.CLWB {
		extra, ratio := flushedSlowdown(t, func(p unsafe.Pointer) { require.NoError(t, WriteBackWith(CLWB, p, 8)) })
		t.Logf("CLWB on this CPU: %v more per line after it, %.1fx (CLWB may or may not evict)", extra, ratio)
	}
}
