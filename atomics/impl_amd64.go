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
func asmAddOwned(p *uint64, delta uint64)

//go:noescape
func asmAddOwned8(dst, delta *[8]uint64)

//go:noescape
func asmCAS(p *uint64, old, new uint64) uint64

//go:noescape
func asmFAA(p *uint64, delta uint64) uint64

// asmCopy moves n words from src to dst, one MOVQ each, in ascending order.
//
//go:noescape
func asmCopy(dst, src unsafe.Pointer, n uintptr)

// asmCopyWideSrc and asmCopyWideDst move n words from src to dst in ascending order, in
// aligned 16-byte pairs on the side they name (src: loads; dst: stores), with a single word
// first if that side is not 16-byte aligned and a single word last (wide_amd64.s). Only for a
// CPU whose 16-byte aligned SSE accesses are single-copy atomic (Features.Wide).
//
//go:noescape
func asmCopyWideSrc(dst, src unsafe.Pointer, n uintptr)

//go:noescape
func asmCopyWideDst(dst, src unsafe.Pointer, n uintptr)

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
func addOwned(p *uint64, delta uint64)      { asmAddOwned(p, delta) }
func addOwned8(dst, delta *[8]uint64)       { asmAddOwned8(dst, delta) }
func sfence()                               { asmSFence() }
func mfence()                               { asmMFence() }
func lfence()                               { asmLFence() }

// The copies out of and into shared words move aligned 16-byte pairs where the CPU makes such
// accesses single-copy atomic (Features.Wide): a pair is then read or written whole, which
// keeps each of its words untorn, and the copy takes half the instructions, with twice the
// bytes in flight per load or store (a 1 KiB block out of cache: about a third of the word
// loop's time on the development machine). The side that is not shared memory (the caller's
// buffer) may have any alignment.
func copyOutWords(dst, src *uint64, n uintptr) {
	copyOut(unsafe.Pointer(dst), unsafe.Pointer(src), n)
}
func copyInWords(dst, src *uint64, n uintptr) { copyIn(unsafe.Pointer(dst), unsafe.Pointer(src), n) }

// copyOut moves n words from shared src to private dst.
func copyOut(dst, src unsafe.Pointer, n uintptr) {
	if wide && n >= wideMin {
		asmCopyWideSrc(dst, src, n)
		return
	}
	asmCopy(dst, src, n)
}

// copyIn moves n words from private src to shared dst.
func copyIn(dst, src unsafe.Pointer, n uintptr) {
	if wide && n >= wideMin {
		asmCopyWideDst(dst, src, n)
		return
	}
	asmCopy(dst, src, n)
}

// wideMin is the shortest copy, in words, that goes through the 16-byte loops: below it the
// alignment head and tail cost more than the pairs save.
const wideMin = 4

// wide is features.Wide, read on every copy.
var wide = features.Wide

func copyInWordsNT(dst, src *uint64, n uintptr) {
	asmCopyNT(unsafe.Pointer(dst), unsafe.Pointer(src), n)
}

// amd64 is little-endian, so a word copy into bytes is the byte layout the package promises.
func copyOutBytes(dst *byte, src *uint64, n uintptr) {
	copyOut(unsafe.Pointer(dst), unsafe.Pointer(src), n)
}
func copyInBytes(dst *uint64, src *byte, n uintptr) {
	copyIn(unsafe.Pointer(dst), unsafe.Pointer(src), n)
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
		_, b1, c1, d1 := cpuid(1, 0)
		f.CLFLUSH = d1&(1<<19) != 0
		f.Wide = c1&(1<<28) != 0        // AVX
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

// asmPrefetch issues PREFETCHT0 for every line of size line that overlaps [p, p+n), n > 0; a
// range of at most a line costs two prefetches and no loop.
//
//go:noescape
func asmPrefetch(p unsafe.Pointer, n, line uintptr)

func prefetch(p unsafe.Pointer, n uintptr) { asmPrefetch(p, n, uintptr(features.LineSize)) }
