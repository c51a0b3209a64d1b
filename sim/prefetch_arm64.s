//go:build !noasm

#include "textflag.h"

// func prefetch(p unsafe.Pointer)
TEXT ·prefetch(SB), NOSPLIT, $0-8
	MOVD p+0(FP), R0
	PRFM (R0), PLDL1KEEP
	RET

// func prefetchRange(lo, hi uintptr)
TEXT ·prefetchRange(SB), NOSPLIT, $0-16
	MOVD lo+0(FP), R0
	MOVD hi+8(FP), R1
loop:
	CMP R1, R0
	BHS done
	PRFM (R0), PLDL1KEEP
	ADD $64, R0
	B loop
done:
	RET
