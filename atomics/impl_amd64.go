//go:build amd64 && !noasm

package atomics

import "unsafe"

// Implemented in atomics_amd64.s.

//go:noescape
func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)

//go:noescape
func asmLoad(p *uint64) uint64

//go:noescape
func asmStore(p *uint64, v uint64)

//go:noescape
func asmStoreNT(p *uint64, v uint64)

//go:noescape
func asmCAS(p *uint64, old, new uint64) uint64

//go:noescape
func asmFAA(p *uint64, delta uint64) uint64

// asmCopy moves n words from src to dst, one MOVQ each, in ascending order.
//
//go:noescape
func asmCopy(dst, src unsafe.Pointer, n uintptr)

// asmCopyNT moves n words from src to dst with MOVNTI, then SFENCE.
//
//go:noescape
func asmCopyNT(dst, src unsafe.Pointer, n uintptr)

// asmCLWB, asmCLFLUSHOPT and asmCLFLUSH apply the instruction to every line of size line that
// overlaps [p, p+n). They round p down themselves (so no Go code forms a pointer outside the
// object) and issue no fence.
//
//go:noescape
func asmCLWB(p unsafe.Pointer, n, line uintptr)

//go:noescape
func asmCLFLUSHOPT(p unsafe.Pointer, n, line uintptr)

//go:noescape
func asmCLFLUSH(p unsafe.Pointer, n, line uintptr)

func asmSFence()
func asmMFence()
func asmLFence()

const hasAsm = true

func load(p *uint64) uint64                 { return asmLoad(p) }
func store(p *uint64, v uint64)             { asmStore(p, v) }
func storeNT(p *uint64, v uint64)           { asmStoreNT(p, v) }
func cas(p *uint64, old, new uint64) uint64 { return asmCAS(p, old, new) }
func faa(p *uint64, delta uint64) uint64    { return asmFAA(p, delta) }
func sfence()                               { asmSFence() }
func mfence()                               { asmMFence() }
func lfence()                               { asmLFence() }

func copyOutWords(dst, src *uint64, n uintptr) { asmCopy(unsafe.Pointer(dst), unsafe.Pointer(src), n) }
func copyInWords(dst, src *uint64, n uintptr)  { asmCopy(unsafe.Pointer(dst), unsafe.Pointer(src), n) }
func copyInWordsNT(dst, src *uint64, n uintptr) {
	asmCopyNT(unsafe.Pointer(dst), unsafe.Pointer(src), n)
}

// amd64 is little-endian, so a word copy into bytes is the byte layout the package promises.
func copyOutBytes(dst *byte, src *uint64, n uintptr) {
	asmCopy(unsafe.Pointer(dst), unsafe.Pointer(src), n)
}
func copyInBytes(dst *uint64, src *byte, n uintptr) {
	asmCopy(unsafe.Pointer(dst), unsafe.Pointer(src), n)
}
func copyInBytesNT(dst *uint64, src *byte, n uintptr) {
	asmCopyNT(unsafe.Pointer(dst), unsafe.Pointer(src), n)
}

// lines applies instruction d (CLWB, CLFLUSHOPT or CLFLUSH) to every line of [p, p+n). The
// caller has checked the CPU has it.
func lines(d Discipline, p unsafe.Pointer, n uintptr) {
	if n == 0 {
		return
	}
	line := uintptr(features.LineSize)
	switch d {
	case CLWB:
		asmCLWB(p, n, line)
	case CLFLUSHOPT:
		asmCLFLUSHOPT(p, n, line)
	case CLFLUSH:
		asmCLFLUSH(p, n, line)
	}
}

func detect() Features {
	f := Features{Asm: true, LineSize: 64, NonTemporal: true}
	maxLeaf, b, c, d := cpuid(0, 0)
	var v [12]byte
	for i, r := range [3]uint32{b, d, c} {
		v[4*i], v[4*i+1], v[4*i+2], v[4*i+3] = byte(r), byte(r>>8), byte(r>>16), byte(r>>24)
	}
	f.Vendor = string(v[:])
	if maxLeaf >= 1 {
		_, b1, _, d1 := cpuid(1, 0)
		f.CLFLUSH = d1&(1<<19) != 0
		f.NonTemporal = d1&(1<<26) != 0 // SSE2 carries MOVNTI
		if f.CLFLUSH {
			if sz := int(b1>>8&0xff) * 8; sz >= 16 && sz&(sz-1) == 0 {
				f.LineSize = sz
			}
		}
	}
	if maxLeaf >= 7 {
		_, b7, _, _ := cpuid(7, 0)
		f.CLFLUSHOPT = b7&(1<<23) != 0
		f.CLWB = b7&(1<<24) != 0
	}
	return f
}
