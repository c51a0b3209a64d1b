//go:build amd64 && !noasm

#include "textflag.h"

// func asmCopyWideSrc(dst, src unsafe.Pointer, n uintptr)
// Moves n words from src (8-byte aligned) to dst (any alignment), in ascending order: one
// MOVQ if src is not 16-byte aligned, then 16-byte MOVO (MOVDQA) loads from src, which the
// caller has checked are single-copy atomic, with MOVOU stores to dst (eight pairs an
// iteration while sixteen words remain, then four, then one pair at a time), then a last MOVQ.
TEXT ·asmCopyWideSrc(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	TESTQ CX, CX
	JZ    sdone
	TESTQ $8, SI
	JZ    saligned
	MOVQ  (SI), AX
	MOVQ  AX, (DI)
	ADDQ  $8, SI
	ADDQ  $8, DI
	DECQ  CX
saligned:
	CMPQ CX, $16
	JB   s8
sloop16:
	MOVO  0(SI), X0
	MOVO  16(SI), X1
	MOVO  32(SI), X2
	MOVO  48(SI), X3
	MOVO  64(SI), X4
	MOVO  80(SI), X5
	MOVO  96(SI), X6
	MOVO  112(SI), X7
	MOVOU X0, 0(DI)
	MOVOU X1, 16(DI)
	MOVOU X2, 32(DI)
	MOVOU X3, 48(DI)
	MOVOU X4, 64(DI)
	MOVOU X5, 80(DI)
	MOVOU X6, 96(DI)
	MOVOU X7, 112(DI)
	ADDQ  $128, SI
	ADDQ  $128, DI
	SUBQ  $16, CX
	CMPQ  CX, $16
	JAE   sloop16
s8:
	CMPQ CX, $8
	JB   spairs
sloop8:
	MOVO  0(SI), X0
	MOVO  16(SI), X1
	MOVO  32(SI), X2
	MOVO  48(SI), X3
	MOVOU X0, 0(DI)
	MOVOU X1, 16(DI)
	MOVOU X2, 32(DI)
	MOVOU X3, 48(DI)
	ADDQ  $64, SI
	ADDQ  $64, DI
	SUBQ  $8, CX
	CMPQ  CX, $8
	JAE   sloop8
spairs:
	CMPQ CX, $2
	JB   slast
	MOVO  (SI), X0
	MOVOU X0, (DI)
	ADDQ  $16, SI
	ADDQ  $16, DI
	SUBQ  $2, CX
	JMP   spairs
slast:
	TESTQ CX, CX
	JZ    sdone
	MOVQ  (SI), AX
	MOVQ  AX, (DI)
sdone:
	RET

// func asmCopyWideDst(dst, src unsafe.Pointer, n uintptr)
// Moves n words from src (any alignment) to dst (8-byte aligned), in ascending order: one
// MOVQ if dst is not 16-byte aligned, then MOVOU loads from src with 16-byte MOVO (MOVDQA)
// stores to dst, which the caller has checked are single-copy atomic (eight pairs an
// iteration while sixteen words remain, then four, then one pair at a time), then a last MOVQ.
TEXT ·asmCopyWideDst(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	TESTQ CX, CX
	JZ    ddone
	TESTQ $8, DI
	JZ    daligned
	MOVQ  (SI), AX
	MOVQ  AX, (DI)
	ADDQ  $8, SI
	ADDQ  $8, DI
	DECQ  CX
daligned:
	CMPQ CX, $16
	JB   d8
dloop16:
	MOVOU 0(SI), X0
	MOVOU 16(SI), X1
	MOVOU 32(SI), X2
	MOVOU 48(SI), X3
	MOVOU 64(SI), X4
	MOVOU 80(SI), X5
	MOVOU 96(SI), X6
	MOVOU 112(SI), X7
	MOVO  X0, 0(DI)
	MOVO  X1, 16(DI)
	MOVO  X2, 32(DI)
	MOVO  X3, 48(DI)
	MOVO  X4, 64(DI)
	MOVO  X5, 80(DI)
	MOVO  X6, 96(DI)
	MOVO  X7, 112(DI)
	ADDQ  $128, SI
	ADDQ  $128, DI
	SUBQ  $16, CX
	CMPQ  CX, $16
	JAE   dloop16
d8:
	CMPQ CX, $8
	JB   dpairs
dloop8:
	MOVOU 0(SI), X0
	MOVOU 16(SI), X1
	MOVOU 32(SI), X2
	MOVOU 48(SI), X3
	MOVO  X0, 0(DI)
	MOVO  X1, 16(DI)
	MOVO  X2, 32(DI)
	MOVO  X3, 48(DI)
	ADDQ  $64, SI
	ADDQ  $64, DI
	SUBQ  $8, CX
	CMPQ  CX, $8
	JAE   dloop8
dpairs:
	CMPQ CX, $2
	JB   dlast
	MOVOU (SI), X0
	MOVO  X0, (DI)
	ADDQ  $16, SI
	ADDQ  $16, DI
	SUBQ  $2, CX
	JMP   dpairs
dlast:
	TESTQ CX, CX
	JZ    ddone
	MOVQ  (SI), AX
	MOVQ  AX, (DI)
ddone:
	RET
