//go:build !noasm

#include "textflag.h"

// func curg() uintptr
TEXT ·curg(SB), NOSPLIT, $0-8
	MOVQ (TLS), AX
	MOVQ AX, ret+0(FP)
	RET

// func stackBounds() (lo, hi uintptr)
TEXT ·stackBounds(SB), NOSPLIT, $0-16
	MOVQ (TLS), AX
	MOVQ 0(AX), BX
	MOVQ BX, lo+0(FP)
	MOVQ 8(AX), BX
	MOVQ BX, hi+8(FP)
	RET
