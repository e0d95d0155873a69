//go:build !purego

#include "textflag.h"
#include "hsum8.h"

// The AVX2 matrix-product kernels of Q4_0, Q4_K and Q6_K: one weight row
// against one or four rows of activations (the float and Q8_0 tiles are in
// tileavx2_amd64.s). Each activation row has its own accumulators and gets the
// same instructions, in the same order, whether it runs alone or with
// three others, so its result does not depend on its neighbours: the
// batch-invariance the forward pass promises. The four-row forms read
// each weight vector once for the four rows.

// Q4_0 weights against Q8_0 activations, as llama.cpp's AVX2 kernel (and
// the Q8_0 tiles, with Q8_0's bytes for the weights): a block's 32 products are summed in integers (|w| times x
// signed by w, VPMADDUBSW then VPMADDWD: eight exact int32 lanes), the
// lanes turned to floats, multiplied by the block's d_w·d_x and added to
// the row's eight-lane accumulator; at the end HSUM8.
//
// Activation row r's int8 values are at xq + r·xqs and its block scales
// (float32) at xd + r·xds; rows 1, 2, 3 are reached through the index
// registers R10 (xqs), R12 (xds) and their doubles and triples.

// QROW does one activation row: its int8 block at Q, its scale at D,
// into accumulator ACC. Y0 holds the signed weights, Y2 their absolute
// values, Y1 the weight block's d broadcast, Y15 sixteen int16 ones.
#define QROW(Q, D, ACC) \
	VMOVDQU Q, Y3 \
	VPSIGNB Y0, Y3, Y3 \
	VPMADDUBSW Y3, Y2, Y4 \
	VPMADDWD Y15, Y4, Y4 \
	VCVTDQ2PS Y4, Y4 \
	VBROADCASTSS D, Y5 \
	VMULPS Y1, Y5, Y5 \
	VFMADD231PS Y5, Y4, ACC

#define QSTORE4 \
	HSUM8(Y8, X8, X3) \
	MOVSS X8, (DI) \
	HSUM8(Y9, X9, X3) \
	MOVSS X9, (DI)(R8*1) \
	HSUM8(Y10, X10, X3) \
	MOVSS X10, (DI)(R8*2) \
	HSUM8(Y11, X11, X3) \
	LEAQ (R8)(R8*2), R8 \
	MOVSS X11, (DI)(R8*1)

#define QPROLOGUE \
	MOVQ dst+0(FP), DI \
	MOVQ ds+8(FP), R8 \
	MOVQ xq+16(FP), SI \
	MOVQ xqs+24(FP), R10 \
	MOVQ xd+32(FP), BX \
	MOVQ xds+40(FP), R12 \
	MOVQ w+48(FP), DX \
	MOVQ nb+56(FP), CX \
	SHLQ $2, R8 \
	SHLQ $2, R12 \
	LEAQ (R10)(R10*2), R11 \
	LEAQ (R12)(R12*2), R13 \
	VPCMPEQW Y15, Y15, Y15 \
	VPSRLW $15, Y15, Y15 \
	VXORPS Y8, Y8, Y8 \
	VXORPS Y9, Y9, Y9 \
	VXORPS Y10, Y10, Y10 \
	VXORPS Y11, Y11, Y11

// Q4_0's 16 bytes hold element j in the low nibble of byte j and element
// j+16 in its high nibble; minus 8 they are Q8_0's signed values.
#define Q4LOAD \
	VPBROADCASTW (DX), X1 \
	VCVTPH2PS X1, Y1 \
	VMOVDQU 2(DX), X0 \
	VPSRLW $4, X0, X6 \
	VINSERTI128 $1, X6, Y0, Y0 \
	VPAND Y14, Y0, Y0 \
	VPSUBB Y13, Y0, Y0 \
	VPABSB Y0, Y2

// func q4_0DotAVX2(dst *float32, ds int, xq *int8, xqs int, xd *float32, xds int, w *byte, nb int, rows int)
TEXT ·q4_0DotAVX2(SB), NOSPLIT, $0-72
	QPROLOGUE
	MOVQ $0x0F0F0F0F0F0F0F0F, AX
	MOVQ AX, X14
	VPBROADCASTQ X14, Y14
	MOVQ $0x0808080808080808, AX
	MOVQ AX, X13
	VPBROADCASTQ X13, Y13
	MOVQ rows+64(FP), AX
	CMPQ AX, $4
	JEQ q40four
q40one:
	TESTQ CX, CX
	JZ q40onedone
	Q4LOAD
	QROW((SI), (BX), Y8)
	ADDQ $18, DX
	ADDQ $32, SI
	ADDQ $4, BX
	DECQ CX
	JMP q40one
q40onedone:
	HSUM8(Y8, X8, X3)
	MOVSS X8, (DI)
	VZEROUPPER
	RET
q40four:
	TESTQ CX, CX
	JZ q40fourdone
	Q4LOAD
	QROW((SI), (BX), Y8)
	QROW((SI)(R10*1), (BX)(R12*1), Y9)
	QROW((SI)(R10*2), (BX)(R12*2), Y10)
	QROW((SI)(R11*1), (BX)(R13*1), Y11)
	ADDQ $18, DX
	ADDQ $32, SI
	ADDQ $4, BX
	DECQ CX
	JMP q40four
q40fourdone:
	QSTORE4
	VZEROUPPER
	RET

// Q4KPAIR does sub-blocks 2k and 2k+1 of a Q4_K super-block: the low and
// high nibbles of its 32 bytes at QOFF, against the activations at XOFF
// and XOFF+32, weighted by the int16 scales at SLO and SHI.
#define Q4KPAIR(QOFF, XOFF, SLO, SHI) \
	VMOVDQU QOFF(DX), Y0 \
	VPAND Y14, Y0, Y2 \
	VPSRLW $4, Y0, Y3 \
	VPAND Y14, Y3, Y3 \
	VPMADDUBSW XOFF(SI), Y2, Y2 \
	VPBROADCASTW SLO(R8), Y4 \
	VPMADDWD Y4, Y2, Y2 \
	VPADDD Y2, Y6, Y6 \
	VPMADDUBSW XOFF+32(SI), Y3, Y3 \
	VPBROADCASTW SHI(R8), Y4 \
	VPMADDWD Y4, Y3, Y3 \
	VPADDD Y3, Y6, Y6

// func q4_KDotAVX2(xq *int8, xd *float32, w *byte, sc *int16, nb int) float32
// Q4_K weights against Q8_K activations: for each super-block, its eight
// sub-blocks' products (unsigned nibbles by signed activations,
// VPMADDUBSW) are weighted by their 6-bit scales (sc, unpacked by the
// caller, eight an super-block) in VPMADDWD and summed in int32 lanes;
// the lanes, as floats, times d·d_x, go to an eight-lane accumulator,
// reduced by HSUM8 at the end. The mins' share is the caller's.
TEXT ·q4_KDotAVX2(SB), NOSPLIT, $0-44
	MOVQ xq+0(FP), SI
	MOVQ xd+8(FP), BX
	MOVQ w+16(FP), DX
	MOVQ sc+24(FP), R8
	MOVQ nb+32(FP), CX
	MOVQ $0x0F0F0F0F0F0F0F0F, AX
	MOVQ AX, X14
	VPBROADCASTQ X14, Y14
	VXORPS Y8, Y8, Y8
q4kloop:
	TESTQ CX, CX
	JZ q4kdone
	VPBROADCASTW (DX), X1
	VCVTPH2PS X1, Y1
	VBROADCASTSS (BX), Y5
	VMULPS Y1, Y5, Y5
	VPXOR Y6, Y6, Y6
	Q4KPAIR(16, 0, 0, 2)
	Q4KPAIR(48, 64, 4, 6)
	Q4KPAIR(80, 128, 8, 10)
	Q4KPAIR(112, 192, 12, 14)
	VCVTDQ2PS Y6, Y6
	VFMADD231PS Y5, Y6, Y8
	ADDQ $144, DX
	ADDQ $256, SI
	ADDQ $4, BX
	ADDQ $16, R8
	DECQ CX
	JMP q4kloop
q4kdone:
	HSUM8(Y8, X8, X3)
	MOVSS X8, ret+40(FP)
	VZEROUPPER
	RET

// Q6CHUNK does 32 values of a Q6_K super-block, already in Y2 as unsigned
// 6-bit q, against the activations at XOFF, weighted by the int16 scales
// of its two sub-blocks of 16 at SOFF and SOFF+2.
#define Q6CHUNK(XOFF, SOFF) \
	VPMADDUBSW XOFF(SI), Y2, Y2 \
	VPBROADCASTW SOFF(R8), X4 \
	VPBROADCASTW SOFF+2(R8), X7 \
	VINSERTI128 $1, X7, Y4, Y4 \
	VPMADDWD Y4, Y2, Y2 \
	VPADDD Y2, Y6, Y6

// Q6HALF does half h of a super-block (128 values): ql's 64 bytes at
// QL, qh's 32 at QH; values 32c…32c+31 of the half are chunk c.
#define Q6HALF(QL, QH, X0FF, S0) \
	VMOVDQU QL(DX), Y9 \
	VMOVDQU QL+32(DX), Y10 \
	VMOVDQU QH(DX), Y11 \
	VPAND Y14, Y9, Y2 \
	VPAND Y13, Y11, Y3 \
	VPSLLW $4, Y3, Y3 \
	VPOR Y3, Y2, Y2 \
	Q6CHUNK(X0FF, S0) \
	VPAND Y14, Y10, Y2 \
	VPSLLW $2, Y11, Y3 \
	VPAND Y12, Y3, Y3 \
	VPOR Y3, Y2, Y2 \
	Q6CHUNK(X0FF+32, S0+4) \
	VPSRLW $4, Y9, Y2 \
	VPAND Y14, Y2, Y2 \
	VPAND Y12, Y11, Y3 \
	VPOR Y3, Y2, Y2 \
	Q6CHUNK(X0FF+64, S0+8) \
	VPSRLW $4, Y10, Y2 \
	VPAND Y14, Y2, Y2 \
	VPSRLW $2, Y11, Y3 \
	VPAND Y12, Y3, Y3 \
	VPOR Y3, Y2, Y2 \
	Q6CHUNK(X0FF+96, S0+12)

// func q6_KDotAVX2(xq *int8, xd *float32, w *byte, sc *int16, nb int) float32
// Q6_K weights against Q8_K activations: each super-block's q (0…63,
// unpacked from ql and qh) against the signed activations in VPMADDUBSW,
// weighted by the sub-blocks' scales (sc: sixteen int16 a super-block,
// widened by the caller) in VPMADDWD, summed in int32 lanes; as floats,
// times d·d_x, into an eight-lane accumulator, reduced by HSUM8. The −32
// offset's share (32·Σ sc·bsum) is the caller's.
TEXT ·q6_KDotAVX2(SB), NOSPLIT, $0-44
	MOVQ xq+0(FP), SI
	MOVQ xd+8(FP), BX
	MOVQ w+16(FP), DX
	MOVQ sc+24(FP), R8
	MOVQ nb+32(FP), CX
	MOVQ $0x0F0F0F0F0F0F0F0F, AX
	MOVQ AX, X14
	VPBROADCASTQ X14, Y14
	MOVQ $0x0303030303030303, AX
	MOVQ AX, X13
	VPBROADCASTQ X13, Y13
	MOVQ $0x3030303030303030, AX
	MOVQ AX, X12
	VPBROADCASTQ X12, Y12
	VXORPS Y8, Y8, Y8
q6kloop:
	TESTQ CX, CX
	JZ q6kdone
	VPBROADCASTW 208(DX), X1
	VCVTPH2PS X1, Y1
	VBROADCASTSS (BX), Y5
	VMULPS Y1, Y5, Y5
	VPXOR Y6, Y6, Y6
	Q6HALF(0, 128, 0, 0)
	Q6HALF(64, 160, 128, 16)
	VCVTDQ2PS Y6, Y6
	VFMADD231PS Y5, Y6, Y8
	ADDQ $210, DX
	ADDQ $256, SI
	ADDQ $4, BX
	ADDQ $32, R8
	DECQ CX
	JMP q6kloop
q6kdone:
	HSUM8(Y8, X8, X3)
	MOVSS X8, ret+40(FP)
	VZEROUPPER
	RET
