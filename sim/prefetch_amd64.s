//go:build !noasm

#include "textflag.h"

// func prefetch(p unsafe.Pointer)
TEXT ·prefetch(SB), NOSPLIT, $0-8
	MOVQ p+0(FP), AX
	PREFETCHT0 (AX)
	RET

// func prefetchRange(lo, hi uintptr)
TEXT ·prefetchRange(SB), NOSPLIT, $0-16
	MOVQ lo+0(FP), AX
	MOVQ hi+8(FP), BX
loop:
	CMPQ AX, BX
	JAE done
	PREFETCHT0 (AX)
	ADDQ $64, AX
	JMP loop
done:
	RET
