//go:build !noasm

#include "textflag.h"

// func prefetch(p unsafe.Pointer)
TEXT ·prefetch(SB), NOSPLIT, $0-8
	MOVQ p+0(FP), AX
	PREFETCHT0 (AX)
	RET

// func prefetchRange(lo, hi uintptr)
//
// Four lines an iteration while four remain, then one at a time: a resume asks for some
// twenty lines, and a loop of one line an iteration spent five instructions on each.
TEXT ·prefetchRange(SB), NOSPLIT, $0-16
	MOVQ lo+0(FP), AX
	MOVQ hi+8(FP), BX
quad:
	LEAQ 192(AX), CX
	CMPQ CX, BX
	JAE one
	PREFETCHT0 (AX)
	PREFETCHT0 64(AX)
	PREFETCHT0 128(AX)
	PREFETCHT0 192(AX)
	ADDQ $256, AX
	JMP quad
one:
	CMPQ AX, BX
	JAE done
	PREFETCHT0 (AX)
	ADDQ $64, AX
	JMP one
done:
	RET
