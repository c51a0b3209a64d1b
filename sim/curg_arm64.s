//go:build !noasm

#include "textflag.h"

// func curg() uintptr
TEXT ·curg(SB), NOSPLIT, $0-8
	MOVD g, R0
	MOVD R0, ret+0(FP)
	RET

// func stackBounds() (lo, hi uintptr)
TEXT ·stackBounds(SB), NOSPLIT, $0-16
	MOVD 0(g), R0
	MOVD R0, lo+0(FP)
	MOVD 8(g), R0
	MOVD R0, hi+8(FP)
	RET
