//go:build amd64 && !noasm

#include "textflag.h"

// func fpMask(b []byte, fp uint8) uint64
TEXT ·fpMask(SB), NOSPLIT, $0-40
	MOVQ    b_base+0(FP), SI
	MOVQ    b_len+8(FP), DI
	MOVBLZX fp+24(FP), AX
	MOVQ    AX, X0
	PUNPCKLBW X0, X0
	PSHUFLW $0, X0, X0
	PSHUFD  $0, X0, X0 // fp in every byte
	XORQ    DX, DX     // the answer
	XORQ    CX, CX     // the word index of SI's first word

loop64:
	CMPQ    DI, $64
	JB      loop16
	MOVOU   (SI), X1
	MOVOU   16(SI), X2
	MOVOU   32(SI), X3
	MOVOU   48(SI), X4
	PCMPEQB X0, X1
	PCMPEQB X0, X2
	PCMPEQB X0, X3
	PCMPEQB X0, X4
	MOVO    X1, X5
	POR     X2, X5
	POR     X3, X5
	POR     X4, X5
	MOVMSKPD X5, BX
	TESTL   BX, BX
	JNZ     hit64

next64:
	ADDQ    $64, SI
	SUBQ    $64, DI
	ADDQ    $8, CX
	JMP     loop64

hit64:
	MOVMSKPD X1, R9
	MOVMSKPD X2, R10
	SHLL    $2, R10
	ORL     R10, R9
	MOVMSKPD X3, R10
	SHLL    $4, R10
	ORL     R10, R9
	MOVMSKPD X4, R10
	SHLL    $6, R10
	ORL     R10, R9
	SHLQ    CX, R9
	ORQ     R9, DX
	JMP     next64

loop16:
	CMPQ    DI, $16
	JB      tail8
	MOVOU   (SI), X1
	PCMPEQB X0, X1
	MOVMSKPD X1, R9
	SHLQ    CX, R9
	ORQ     R9, DX
	ADDQ    $16, SI
	SUBQ    $16, DI
	ADDQ    $2, CX
	JMP     loop16

tail8:
	CMPQ    DI, $8
	JB      done
	CMPB    7(SI), AL
	JNE     done
	MOVQ    $1, R9
	SHLQ    CX, R9
	ORQ     R9, DX

done:
	MOVQ    DX, ret+32(FP)
	RET
