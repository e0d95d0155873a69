//go:build !purego

#include "textflag.h"

// func streamRows512(p *byte, groups int, rowBytes int, k int, dist int) uint64
// Reads groups·k rows of rowBytes bytes (a multiple of 256) at p, k rows
// at a time (k is 1, 2 or 4) interleaved 256 bytes a row a step, as a
// matrix-vector product's tile reads its weight rows: each step is four
// full 64-byte lines a row, each an AVX-512 load XORed into one of four
// accumulators. With dist > 0 every line is prefetched (PREFETCHT0) dist
// bytes ahead of its row. Returns the fold of every byte, which the
// caller keeps so no load is dropped.
TEXT ·streamRows512(SB), NOSPLIT, $0-48
	MOVQ p+0(FP), SI
	MOVQ groups+8(FP), DX
	MOVQ rowBytes+16(FP), R8
	MOVQ k+24(FP), R10
	MOVQ dist+32(FP), BX
	LEAQ (R8)(R8*2), R9
	MOVQ R10, R11
	DECQ R11
	IMULQ R8, R11 // the other rows of a group, skipped once its first is read
	VPXORQ Z0, Z0, Z0
	VPXORQ Z1, Z1, Z1
	VPXORQ Z2, Z2, Z2
	VPXORQ Z3, Z3, Z3
	CMPQ R10, $4
	JEQ k4
	CMPQ R10, $2
	JEQ k2

k1:
	TESTQ DX, DX
	JZ done
	MOVQ R8, CX
	SHRQ $8, CX
k1step:
	TESTQ BX, BX
	JZ k1load
	LEAQ (SI)(BX*1), AX
	PREFETCHT0 (AX)
	PREFETCHT0 64(AX)
	PREFETCHT0 128(AX)
	PREFETCHT0 192(AX)
k1load:
	VPXORQ (SI), Z0, Z0
	VPXORQ 64(SI), Z1, Z1
	VPXORQ 128(SI), Z2, Z2
	VPXORQ 192(SI), Z3, Z3
	ADDQ $256, SI
	DECQ CX
	JNZ k1step
	DECQ DX
	JMP k1

k2:
	TESTQ DX, DX
	JZ done
	MOVQ R8, CX
	SHRQ $8, CX
k2step:
	TESTQ BX, BX
	JZ k2load
	LEAQ (SI)(BX*1), AX
	PREFETCHT0 (AX)
	PREFETCHT0 64(AX)
	PREFETCHT0 128(AX)
	PREFETCHT0 192(AX)
	PREFETCHT0 (AX)(R8*1)
	PREFETCHT0 64(AX)(R8*1)
	PREFETCHT0 128(AX)(R8*1)
	PREFETCHT0 192(AX)(R8*1)
k2load:
	VPXORQ (SI), Z0, Z0
	VPXORQ (SI)(R8*1), Z1, Z1
	VPXORQ 64(SI), Z2, Z2
	VPXORQ 64(SI)(R8*1), Z3, Z3
	VPXORQ 128(SI), Z0, Z0
	VPXORQ 128(SI)(R8*1), Z1, Z1
	VPXORQ 192(SI), Z2, Z2
	VPXORQ 192(SI)(R8*1), Z3, Z3
	ADDQ $256, SI
	DECQ CX
	JNZ k2step
	ADDQ R11, SI
	DECQ DX
	JMP k2

k4:
	TESTQ DX, DX
	JZ done
	MOVQ R8, CX
	SHRQ $8, CX
k4step:
	TESTQ BX, BX
	JZ k4load
	LEAQ (SI)(BX*1), AX
	PREFETCHT0 (AX)
	PREFETCHT0 64(AX)
	PREFETCHT0 128(AX)
	PREFETCHT0 192(AX)
	PREFETCHT0 (AX)(R8*1)
	PREFETCHT0 64(AX)(R8*1)
	PREFETCHT0 128(AX)(R8*1)
	PREFETCHT0 192(AX)(R8*1)
	PREFETCHT0 (AX)(R8*2)
	PREFETCHT0 64(AX)(R8*2)
	PREFETCHT0 128(AX)(R8*2)
	PREFETCHT0 192(AX)(R8*2)
	PREFETCHT0 (AX)(R9*1)
	PREFETCHT0 64(AX)(R9*1)
	PREFETCHT0 128(AX)(R9*1)
	PREFETCHT0 192(AX)(R9*1)
k4load:
	VPXORQ (SI), Z0, Z0
	VPXORQ (SI)(R8*1), Z1, Z1
	VPXORQ (SI)(R8*2), Z2, Z2
	VPXORQ (SI)(R9*1), Z3, Z3
	VPXORQ 64(SI), Z0, Z0
	VPXORQ 64(SI)(R8*1), Z1, Z1
	VPXORQ 64(SI)(R8*2), Z2, Z2
	VPXORQ 64(SI)(R9*1), Z3, Z3
	VPXORQ 128(SI), Z0, Z0
	VPXORQ 128(SI)(R8*1), Z1, Z1
	VPXORQ 128(SI)(R8*2), Z2, Z2
	VPXORQ 128(SI)(R9*1), Z3, Z3
	VPXORQ 192(SI), Z0, Z0
	VPXORQ 192(SI)(R8*1), Z1, Z1
	VPXORQ 192(SI)(R8*2), Z2, Z2
	VPXORQ 192(SI)(R9*1), Z3, Z3
	ADDQ $256, SI
	DECQ CX
	JNZ k4step
	ADDQ R11, SI
	DECQ DX
	JMP k4

done:
	VPXORQ Z1, Z0, Z0
	VPXORQ Z3, Z2, Z2
	VPXORQ Z2, Z0, Z0
	VEXTRACTI64X4 $1, Z0, Y1
	VPXORQ Y1, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPXOR X1, X0, X0
	MOVQ X0, AX
	PEXTRQ $1, X0, BX
	XORQ BX, AX
	MOVQ AX, ret+40(FP)
	VZEROUPPER
	RET
