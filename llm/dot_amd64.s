//go:build !purego

#include "textflag.h"

// REDUCE leaves (s0+s1)+(s2+s3) of the lanes of X in its low lane.
#define REDUCE(X, T) \
	MOVAPS X, T \
	SHUFPS $0xB1, T, T \
	ADDPS T, X \
	MOVHLPS X, T \
	ADDSS T, X

// func dotsSSE(dst, q, k *float32, ks, count, n int)
TEXT ·dotsSSE(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ q+8(FP), SI
	MOVQ k+16(FP), DX
	MOVQ ks+24(FP), R8
	MOVQ count+32(FP), R9
	MOVQ n+40(FP), CX
	SHLQ $2, R8          // stride in bytes
	SHLQ $2, CX          // n in bytes
	MOVQ CX, BX
	ANDQ $-16, BX        // the whole vectors, in bytes
	TESTQ R9, R9
	JLE dotsdone
dotsrow:
	XORPS X0, X0
	XORQ AX, AX
	CMPQ AX, BX
	JGE dotstail
dotsloop:
	MOVUPS (SI)(AX*1), X1
	MOVUPS (DX)(AX*1), X2
	MULPS X2, X1
	ADDPS X1, X0
	ADDQ $16, AX
	CMPQ AX, BX
	JLT dotsloop
dotstail:
	CMPQ AX, CX
	JGE dotsend
	MOVSS (SI)(AX*1), X1
	MOVSS (DX)(AX*1), X2
	MULSS X2, X1
	ADDSS X1, X0
	ADDQ $4, AX
	JMP dotstail
dotsend:
	REDUCE(X0, X1)
	MOVSS X0, (DI)
	ADDQ $4, DI
	ADDQ R8, DX
	DECQ R9
	JNZ dotsrow
dotsdone:
	RET

// func axpysSSE(dst, v *float32, vs int, a *float32, count, n int)
TEXT ·axpysSSE(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ v+8(FP), SI
	MOVQ vs+16(FP), R8
	MOVQ a+24(FP), DX
	MOVQ count+32(FP), R9
	MOVQ n+40(FP), CX
	SHLQ $2, R8          // stride in bytes
	SHLQ $2, CX          // n in bytes
	MOVQ CX, BX
	ANDQ $-16, BX        // the whole vectors, in bytes
	TESTQ R9, R9
	JLE axpysdone
	XORQ AX, AX          // byte offset of the chunk of dst
axpyschunk:
	CMPQ AX, BX
	JGE axpystail
	MOVUPS (DI)(AX*1), X0
	LEAQ (SI)(AX*1), R10 // the chunk in row c of v
	XORQ R11, R11        // c×4
axpysloop:
	MOVSS (DX)(R11*1), X1
	SHUFPS $0x00, X1, X1
	MOVUPS (R10), X2
	MULPS X1, X2
	ADDPS X2, X0
	ADDQ R8, R10
	ADDQ $4, R11
	MOVQ R9, R12
	SHLQ $2, R12
	CMPQ R11, R12
	JLT axpysloop
	MOVUPS X0, (DI)(AX*1)
	ADDQ $16, AX
	JMP axpyschunk
axpystail:
	CMPQ AX, CX
	JGE axpysdone
	MOVSS (DI)(AX*1), X0
	LEAQ (SI)(AX*1), R10
	XORQ R11, R11
axpystailloop:
	MOVSS (DX)(R11*1), X1
	MOVSS (R10), X2
	MULSS X1, X2
	ADDSS X2, X0
	ADDQ R8, R10
	ADDQ $4, R11
	MOVQ R9, R12
	SHLQ $2, R12
	CMPQ R11, R12
	JLT axpystailloop
	MOVSS X0, (DI)(AX*1)
	ADDQ $4, AX
	JMP axpystail
axpysdone:
	RET
