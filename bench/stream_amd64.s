//go:build !purego

#include "textflag.h"

// func streamReadAVX2(p *byte, n int) uint64
// Reads n bytes (a multiple of 256) at p with eight independent 32-byte
// loads a step, folded by XOR into four accumulators so the loads have a
// use; returns the fold, which the caller keeps. It is what a matrix-vector
// product's weight stream could at best be: every byte loaded once, in
// order, with no arithmetic worth the name.
TEXT ·streamReadAVX2(SB), NOSPLIT, $0-24
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	SHRQ $8, CX
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3
loop:
	TESTQ CX, CX
	JZ done
	VPXOR (SI), Y0, Y0
	VPXOR 32(SI), Y1, Y1
	VPXOR 64(SI), Y2, Y2
	VPXOR 96(SI), Y3, Y3
	VPXOR 128(SI), Y0, Y0
	VPXOR 160(SI), Y1, Y1
	VPXOR 192(SI), Y2, Y2
	VPXOR 224(SI), Y3, Y3
	ADDQ $256, SI
	DECQ CX
	JMP loop
done:
	VPXOR Y1, Y0, Y0
	VPXOR Y3, Y2, Y2
	VPXOR Y2, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPXOR X1, X0, X0
	MOVQ X0, AX
	PEXTRQ $1, X0, BX
	XORQ BX, AX
	MOVQ AX, ret+16(FP)
	VZEROUPPER
	RET
