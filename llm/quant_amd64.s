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

// The dwords of VPACKSSWB's result in row order (see quantQ8_0AVX2).
DATA packorder<>+0(SB)/4, $0
DATA packorder<>+4(SB)/4, $4
DATA packorder<>+8(SB)/4, $1
DATA packorder<>+12(SB)/4, $5
DATA packorder<>+16(SB)/4, $2
DATA packorder<>+20(SB)/4, $6
DATA packorder<>+24(SB)/4, $3
DATA packorder<>+28(SB)/4, $7
GLOBL packorder<>(SB), RODATA|NOPTR, $32

// func quantQ8_0AVX2(q *int8, d *float32, x *float32, nb int)
// quantQ8_0AVX512 with AVX2 and F16C, the same bits: the values rounded
// to int32 are packed to bytes by VPACKSSDW and VPACKSSWB (|v| ≤ 127, so
// the saturation never acts), which interleave the four vectors' dwords
// within each 128-bit lane, and VPERMD puts them back in order.
TEXT ·quantQ8_0AVX2(SB), NOSPLIT, $0-32
	MOVQ q+0(FP), DI
	MOVQ d+8(FP), SI
	MOVQ x+16(FP), DX
	MOVQ nb+24(FP), CX
	MOVL $0x7fffffff, AX
	VMOVD AX, X7
	VPBROADCASTD X7, Y7
	MOVL $0x42fe0000, AX // 127.0
	VMOVD AX, X6
	VMOVDQU packorder<>(SB), Y8
avx2loop:
	TESTQ CX, CX
	JZ avx2done
	VMOVUPS (DX), Y0
	VMOVUPS 32(DX), Y1
	VMOVUPS 64(DX), Y2
	VMOVUPS 96(DX), Y3
	VANDPS Y7, Y0, Y4
	VANDPS Y7, Y1, Y5
	VMAXPS Y5, Y4, Y4
	VANDPS Y7, Y2, Y5
	VANDPS Y7, Y3, Y9
	VMAXPS Y9, Y5, Y5
	VMAXPS Y5, Y4, Y4
	VEXTRACTF128 $1, Y4, X5
	VMAXPS X5, X4, X4
	VMOVHLPS X4, X5, X5
	VMAXPS X5, X4, X4
	VMOVSHDUP X4, X5
	VMAXSS X5, X4, X4
	VDIVSS X6, X4, X9
	VCVTPS2PH $0, X9, X9
	VCVTPH2PS X9, X9
	VMOVSS X9, (SI)
	VXORPS X5, X5, X5
	VUCOMISS X5, X4
	JEQ avx2scaled
	VDIVSS X4, X6, X5
avx2scaled:
	VBROADCASTSS X5, Y5
	VMULPS Y5, Y0, Y0
	VMULPS Y5, Y1, Y1
	VMULPS Y5, Y2, Y2
	VMULPS Y5, Y3, Y3
	VCVTPS2DQ Y0, Y0
	VCVTPS2DQ Y1, Y1
	VCVTPS2DQ Y2, Y2
	VCVTPS2DQ Y3, Y3
	VPACKSSDW Y1, Y0, Y0
	VPACKSSDW Y3, Y2, Y2
	VPACKSSWB Y2, Y0, Y0
	VPERMD Y0, Y8, Y0
	VMOVDQU Y0, (DI)
	ADDQ $128, DX
	ADDQ $32, DI
	ADDQ $4, SI
	DECQ CX
	JMP avx2loop
avx2done:
	VZEROUPPER
	RET
