//go:build !amd64 || noasm

package atomics

import "unsafe"

const hasAsm = false

func load(p *uint64) uint64                 { return goLoad(p) }
func store(p *uint64, v uint64)             { goStore(p, v) }
func storeNT(p *uint64, v uint64)           { goStoreNT(p, v) }
func cas(p *uint64, old, new uint64) uint64 { return goCAS(p, old, new) }
func faa(p *uint64, delta uint64) uint64    { return goFAA(p, delta) }
func addOwned(p *uint64, delta uint64)      { goFAA(p, delta) }
func addOwned8(dst, delta *[8]uint64) {
	for i := range dst {
		goFAA(&dst[i], delta[i])
	}
}
func sfence() { goFence() }
func mfence() { goFence() }
func lfence() { goFence() }

func copyOutWords(dst, src *uint64, n uintptr)        { goCopyOutWords(dst, src, n) }
func copyInWords(dst, src *uint64, n uintptr)         { goCopyInWords(dst, src, n) }
func copyInWordsNT(dst, src *uint64, n uintptr)       { goCopyInWordsNT(dst, src, n) }
func copyOutBytes(dst *byte, src *uint64, n uintptr)  { goCopyOutBytes(dst, src, n) }
func copyInBytes(dst *uint64, src *byte, n uintptr)   { goCopyInBytes(dst, src, n) }
func copyInBytesNT(dst *uint64, src *byte, n uintptr) { goCopyInBytesNT(dst, src, n) }

// lines is never reached without assembly: no cache-line instruction is reported supported.
func lines(Discipline, unsafe.Pointer, uintptr) {}

func detect() Features { return Features{LineSize: 64} }

// prefetch is a hint only; without assembly there is none.
func prefetch(unsafe.Pointer, uintptr) {}
