package atomics

import (
	"testing"
	"unsafe"
)

// benchBuf returns a page-aligned buffer of n words (large Go allocations are page-aligned;
// the check keeps the line arithmetic honest if that ever changes).
func benchBuf(b *testing.B, n int) []uint64 {
	w := make([]uint64, max(n, 8192))
	if uintptr(unsafe.Pointer(&w[0]))&4095 != 0 {
		b.Fatal("buffer not page-aligned")
	}
	return w[:n]
}

func need(b *testing.B, d Discipline) {
	if !CPU().Has(d) {
		b.Skipf("%v not available (%v)", d, CPU())
	}
}

// BenchmarkWord is the cost of one 8-byte access: plain, and with the Uncached discipline's
// extra work (a flush before a load; a write-back after an atomic).
func BenchmarkWord(b *testing.B) {
	w := benchBuf(b, 8)
	p := &w[0]
	b.Run("load/plain", func(b *testing.B) {
		var s uint64
		for b.Loop() {
			s += Load(p)
		}
		w[1] = s
	})
	for _, d := range []Discipline{CLFLUSHOPT, CLFLUSH} {
		b.Run("load/flush-before-"+d.String(), func(b *testing.B) {
			need(b, d)
			var s uint64
			for b.Loop() {
				_ = FlushForReadWith(d, unsafe.Pointer(p), 8)
				s += Load(p)
			}
			w[1] = s
		})
	}
	ops := []struct {
		name string
		op   func()
	}{
		{"cas", func() { v := Load(p); CAS(p, v, v+1) }},
		{"faa", func() { FAA(p, 1) }},
	}
	for _, o := range ops {
		b.Run(o.name+"/plain", func(b *testing.B) {
			for b.Loop() {
				o.op()
			}
		})
		for _, d := range []Discipline{CLWB, CLFLUSHOPT, CLFLUSH} {
			b.Run(o.name+"/writeback-"+d.String(), func(b *testing.B) {
				need(b, d)
				for b.Loop() {
					o.op()
					_ = WriteBackWith(d, unsafe.Pointer(p), 8)
				}
			})
		}
	}
}

// BenchmarkWrite is the cost of writing n bytes word by word and making them reach memory:
// plain (no write-back: the lines stay dirty in cache), each write-back instruction, and
// non-temporal stores.
func BenchmarkWrite(b *testing.B) {
	for _, size := range []int{64, 4096} {
		dst := benchBuf(b, size/8)
		src := make([]uint64, size/8)
		for i := range src {
			src[i] = uint64(i)
		}
		name := map[int]string{64: "64B", 4096: "4KiB"}[size]
		b.Run(name+"/plain", func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				StoreWords(&dst[0], src)
			}
		})
		for _, d := range []Discipline{CLWB, CLFLUSHOPT, CLFLUSH} {
			b.Run(name+"/"+d.String(), func(b *testing.B) {
				need(b, d)
				b.SetBytes(int64(size))
				for b.Loop() {
					StoreWords(&dst[0], src)
					_ = WriteBackWith(d, unsafe.Pointer(&dst[0]), uintptr(size))
				}
			})
		}
		b.Run(name+"/nt", func(b *testing.B) {
			need(b, NonTemporal)
			b.SetBytes(int64(size))
			for b.Loop() {
				StoreWordsNT(&dst[0], src)
			}
		})
	}
}

// BenchmarkRead is the cost of reading n bytes word by word: plain (cached), and after
// flushing the range first (the Uncached discipline: every line misses).
func BenchmarkRead(b *testing.B) {
	for _, size := range []int{64, 4096} {
		src := benchBuf(b, size/8)
		dst := make([]uint64, size/8)
		name := map[int]string{64: "64B", 4096: "4KiB"}[size]
		b.Run(name+"/plain", func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				LoadWords(dst, &src[0])
			}
		})
		for _, d := range []Discipline{CLFLUSHOPT, CLFLUSH} {
			b.Run(name+"/flush-before-"+d.String(), func(b *testing.B) {
				need(b, d)
				b.SetBytes(int64(size))
				for b.Loop() {
					_ = FlushForReadWith(d, unsafe.Pointer(&src[0]), uintptr(size))
					LoadWords(dst, &src[0])
				}
			})
		}
	}
}
