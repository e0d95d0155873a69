//go:build !purego

#include "textflag.h"

// func quantQ8_0AVX512(q *int8, d *float32, x *float32, nb int)
// quantRowQ8_0Go with AVX-512, the same bits: per block of 32 the
// largest magnitude (max is exact in any order), d = amax/127 rounded
// through binary16 (VCVTPS2PH with round-to-nearest-even, as
// floatToHalf), the step 127/amax (0 for a zero block), and each value
// times the step rounded to nearest even (VCVTPS2DQ under Go's default
// MXCSR) and narrowed (|v| ≤ 127, so VPMOVDB's truncation is exact).
TEXT ·quantQ8_0AVX512(SB), NOSPLIT, $0-32
	MOVQ q+0(FP), DI
	MOVQ d+8(FP), SI
	MOVQ x+16(FP), DX
	MOVQ nb+24(FP), CX
	MOVL $0x7fffffff, AX
	VPBROADCASTD AX, Z7
	MOVL $0x42fe0000, AX // 127.0
	VMOVD AX, X6
loop:
	TESTQ CX, CX
	JZ done
	VMOVUPS (DX), Z0
	VMOVUPS 64(DX), Z1
	VPANDD Z7, Z0, Z2
	VPANDD Z7, Z1, Z3
	VMAXPS Z3, Z2, Z2
	VEXTRACTF64X4 $1, Z2, Y3
	VMAXPS Y3, Y2, Y2
	VEXTRACTF128 $1, Y2, X3
	VMAXPS X3, X2, X2
	VMOVHLPS X2, X3, X3
	VMAXPS X3, X2, X2
	VMOVSHDUP X2, X3
	VMAXSS X3, X2, X2
	VDIVSS X6, X2, X4
	VCVTPS2PH $0, X4, X4
	VCVTPH2PS X4, X4
	VMOVSS X4, (SI)
	VXORPS X5, X5, X5
	VUCOMISS X5, X2
	JEQ scaled
	VDIVSS X2, X6, X5
scaled:
	VBROADCASTSS X5, Z5
	VMULPS Z5, Z0, Z0
	VMULPS Z5, Z1, Z1
	VCVTPS2DQ Z0, Z0
	VCVTPS2DQ Z1, Z1
	VPMOVDB Z0, (DI)
	VPMOVDB Z1, 16(DI)
	ADDQ $128, DX
	ADDQ $32, DI
	ADDQ $4, SI
	DECQ CX
	JMP loop
done:
	VZEROUPPER
	RET
