//go:build amd64 && !noasm

#include "textflag.h"

// func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL eaxArg+0(FP), AX
	MOVL ecxArg+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET

// func asmLoad(p *uint64) uint64
TEXT ·asmLoad(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), AX
	MOVQ (AX), AX
	MOVQ AX, ret+8(FP)
	RET

// func asmStore(p *uint64, v uint64)
TEXT ·asmStore(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), BX
	MOVQ v+8(FP), AX
	XCHGQ AX, (BX)
	RET

// func asmAddOwned(p *uint64, delta uint64)
// A plain load, add and store: the word has one writer (see AddOwned), and an aligned MOVQ
// is single-copy atomic, so readers see whole words.
TEXT ·asmAddOwned(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), BX
	MOVQ delta+8(FP), AX
	ADDQ (BX), AX
	MOVQ AX, (BX)
	RET

// func asmAddOwned8(dst, delta *[8]uint64)
// asmAddOwned's load, add and store for each of eight words.
TEXT ·asmAddOwned8(SB), NOSPLIT, $0-16
	MOVQ dst+0(FP), BX
	MOVQ delta+8(FP), SI
	MOVQ 0(SI), AX
	ADDQ 0(BX), AX
	MOVQ AX, 0(BX)
	MOVQ 8(SI), AX
	ADDQ 8(BX), AX
	MOVQ AX, 8(BX)
	MOVQ 16(SI), AX
	ADDQ 16(BX), AX
	MOVQ AX, 16(BX)
	MOVQ 24(SI), AX
	ADDQ 24(BX), AX
	MOVQ AX, 24(BX)
	MOVQ 32(SI), AX
	ADDQ 32(BX), AX
	MOVQ AX, 32(BX)
	MOVQ 40(SI), AX
	ADDQ 40(BX), AX
	MOVQ AX, 40(BX)
	MOVQ 48(SI), AX
	ADDQ 48(BX), AX
	MOVQ AX, 48(BX)
	MOVQ 56(SI), AX
	ADDQ 56(BX), AX
	MOVQ AX, 56(BX)
	RET

// func asmStoreNT(p *uint64, v uint64)
TEXT ·asmStoreNT(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), BX
	MOVQ v+8(FP), AX
	MOVNTIQ AX, (BX)
	RET

// func asmCAS(p *uint64, old, new uint64) uint64
TEXT ·asmCAS(SB), NOSPLIT, $0-32
	MOVQ p+0(FP), BX
	MOVQ old+8(FP), AX
	MOVQ new+16(FP), CX
	LOCK
	CMPXCHGQ CX, (BX)
	MOVQ AX, ret+24(FP)
	RET

// func asmFAA(p *uint64, delta uint64) uint64
TEXT ·asmFAA(SB), NOSPLIT, $0-24
	MOVQ p+0(FP), BX
	MOVQ delta+8(FP), AX
	LOCK
	XADDQ AX, (BX)
	MOVQ AX, ret+16(FP)
	RET

// func asmCopy(dst, src unsafe.Pointer, n uintptr)
TEXT ·asmCopy(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	CMPQ CX, $4
	JB   tail
loop4:
	MOVQ 0(SI), AX
	MOVQ AX, 0(DI)
	MOVQ 8(SI), BX
	MOVQ BX, 8(DI)
	MOVQ 16(SI), DX
	MOVQ DX, 16(DI)
	MOVQ 24(SI), R8
	MOVQ R8, 24(DI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $4, CX
	CMPQ CX, $4
	JAE  loop4
tail:
	TESTQ CX, CX
	JZ    done
loop1:
	MOVQ (SI), AX
	MOVQ AX, (DI)
	ADDQ $8, SI
	ADDQ $8, DI
	DECQ CX
	JNZ  loop1
done:
	RET

// func asmCopyNT(dst, src unsafe.Pointer, n uintptr)
TEXT ·asmCopyNT(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	CMPQ CX, $4
	JB   nttail
ntloop4:
	MOVQ    0(SI), AX
	MOVNTIQ AX, 0(DI)
	MOVQ    8(SI), BX
	MOVNTIQ BX, 8(DI)
	MOVQ    16(SI), DX
	MOVNTIQ DX, 16(DI)
	MOVQ    24(SI), R8
	MOVNTIQ R8, 24(DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	SUBQ    $4, CX
	CMPQ    CX, $4
	JAE     ntloop4
nttail:
	TESTQ CX, CX
	JZ    ntdone
ntloop1:
	MOVQ    (SI), AX
	MOVNTIQ AX, (DI)
	ADDQ    $8, SI
	ADDQ    $8, DI
	DECQ    CX
	JNZ     ntloop1
ntdone:
	SFENCE
	RET

// func asmCLWB(p unsafe.Pointer, n, line uintptr)
// Applies CLWB to every line of size line (a power of two) that overlaps [p, p+n).
TEXT ·asmCLWB(SB), NOSPLIT, $0-24
	MOVQ p+0(FP), AX
	MOVQ n+8(FP), CX
	MOVQ line+16(FP), DX
	ADDQ AX, CX
	MOVQ DX, BX
	NEGQ BX
	ANDQ BX, AX
clwbloop:
	CMPQ AX, CX
	JAE  clwbdone
	CLWB (AX)
	ADDQ DX, AX
	JMP  clwbloop
clwbdone:
	RET

// func asmCLFLUSHOPT(p unsafe.Pointer, n, line uintptr)
// Applies CLFLUSHOPT to every line of size line (a power of two) that overlaps [p, p+n).
TEXT ·asmCLFLUSHOPT(SB), NOSPLIT, $0-24
	MOVQ p+0(FP), AX
	MOVQ n+8(FP), CX
	MOVQ line+16(FP), DX
	ADDQ AX, CX
	MOVQ DX, BX
	NEGQ BX
	ANDQ BX, AX
optloop:
	CMPQ AX, CX
	JAE  optdone
	CLFLUSHOPT (AX)
	ADDQ DX, AX
	JMP  optloop
optdone:
	RET

// func asmCLFLUSH(p unsafe.Pointer, n, line uintptr)
// Applies CLFLUSH to every line of size line (a power of two) that overlaps [p, p+n).
TEXT ·asmCLFLUSH(SB), NOSPLIT, $0-24
	MOVQ p+0(FP), AX
	MOVQ n+8(FP), CX
	MOVQ line+16(FP), DX
	ADDQ AX, CX
	MOVQ DX, BX
	NEGQ BX
	ANDQ BX, AX
flloop:
	CMPQ AX, CX
	JAE  fldone
	CLFLUSH (AX)
	ADDQ DX, AX
	JMP  flloop
fldone:
	RET

// func asmSFence()
TEXT ·asmSFence(SB), NOSPLIT, $0-0
	SFENCE
	RET

// func asmMFence()
TEXT ·asmMFence(SB), NOSPLIT, $0-0
	MFENCE
	RET

// func asmLFence()
TEXT ·asmLFence(SB), NOSPLIT, $0-0
	LFENCE
	RET

// func asmPrefetch(p unsafe.Pointer, n, line uintptr)
// Issues PREFETCHT0 for every line of size line (a power of two) that overlaps [p, p+n) (n > 0):
// for n at most a line, which overlaps at most two, those of the bytes p and p+n-1, without a
// loop; else eight lines an iteration while eight remain, then one at a time. A prefetch never
// faults and changes no memory.
TEXT ·asmPrefetch(SB), NOSPLIT, $0-24
	MOVQ p+0(FP), AX
	MOVQ n+8(FP), CX
	MOVQ line+16(FP), DX
	CMPQ CX, DX
	JA   pflong
	PREFETCHT0 (AX)
	PREFETCHT0 -1(AX)(CX*1)
	RET
pflong:
	ADDQ AX, CX
	MOVQ DX, BX
	NEGQ BX
	ANDQ BX, AX
	LEAQ (DX)(DX*2), BX
	LEAQ 0(DX*8), R9
	SUBQ DX, R9
pf8:
	LEAQ (AX)(R9*1), R8
	CMPQ R8, CX
	JAE  pfloop
	LEAQ (AX)(DX*4), R10
	PREFETCHT0 (AX)
	PREFETCHT0 (AX)(DX*1)
	PREFETCHT0 (AX)(DX*2)
	PREFETCHT0 (AX)(BX*1)
	PREFETCHT0 (R10)
	PREFETCHT0 (R10)(DX*1)
	PREFETCHT0 (R10)(DX*2)
	PREFETCHT0 (R8)
	LEAQ (R8)(DX*1), AX
	JMP  pf8
pfloop:
	CMPQ AX, CX
	JAE  pfdone
	PREFETCHT0 (AX)
	ADDQ DX, AX
	JMP  pfloop
pfdone:
	RET
