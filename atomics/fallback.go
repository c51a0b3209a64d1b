package atomics

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"
)

// The pure-Go implementation. It is compiled in every build: it is the implementation under
// noasm and on architectures without assembly, and the reference the assembly is tested against.

var fenceWord atomic.Uint64

func goLoad(p *uint64) uint64              { return atomic.LoadUint64(p) }
func goStore(p *uint64, v uint64)          { atomic.StoreUint64(p, v) }
func goStoreNT(p *uint64, v uint64)        { atomic.StoreUint64(p, v) }
func goFAA(p *uint64, delta uint64) uint64 { return atomic.AddUint64(p, delta) - delta }

func goCAS(p *uint64, old, new uint64) uint64 {
	for {
		cur := atomic.LoadUint64(p)
		if cur != old {
			return cur
		}
		if atomic.CompareAndSwapUint64(p, old, new) {
			return old
		}
	}
}

// goFence is a full fence in the Go memory model: a sequentially consistent read-modify-write.
func goFence() { fenceWord.Add(0) }

func wordAt(p *uint64, i uintptr) *uint64 { return (*uint64)(unsafe.Add(unsafe.Pointer(p), i*8)) }

// goCopyOutWords loads n words at src into dst[0:n].
func goCopyOutWords(dst, src *uint64, n uintptr) {
	for i := uintptr(0); i < n; i++ {
		*wordAt(dst, i) = atomic.LoadUint64(wordAt(src, i))
	}
}

// goCopyInWords stores dst[0:n] from src, one atomic store per word.
func goCopyInWords(dst, src *uint64, n uintptr) {
	for i := uintptr(0); i < n; i++ {
		atomic.StoreUint64(wordAt(dst, i), *wordAt(src, i))
	}
}

// goCopyOutBytes loads n words at src into the 8n bytes at dst, little-endian.
func goCopyOutBytes(dst *byte, src *uint64, n uintptr) {
	b := unsafe.Slice(dst, n*8)
	for i := uintptr(0); i < n; i++ {
		binary.LittleEndian.PutUint64(b[i*8:], atomic.LoadUint64(wordAt(src, i)))
	}
}

// goCopyInBytes stores the 8n little-endian bytes at src into n words at dst.
func goCopyInBytes(dst *uint64, src *byte, n uintptr) {
	b := unsafe.Slice(src, n*8)
	for i := uintptr(0); i < n; i++ {
		atomic.StoreUint64(wordAt(dst, i), binary.LittleEndian.Uint64(b[i*8:]))
	}
}

func goCopyInWordsNT(dst, src *uint64, n uintptr) {
	goCopyInWords(dst, src, n)
	goFence()
}

func goCopyInBytesNT(dst *uint64, src *byte, n uintptr) {
	goCopyInBytes(dst, src, n)
	goFence()
}
