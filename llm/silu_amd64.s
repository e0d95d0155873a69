//go:build !purego

#include "textflag.h"

// siluMulAVX2's constants, eight lanes each, 32 bytes apart:
// 0: the sign bit
// 1: expLo
// 2: expHi
// 3: expLog2e
// 4: expC1
// 5: expC2
// 6: expP0
// 7: expP1
// 8: expP2
// 9: expP3
// 10: expP4
// 11: expP5
// 12: 1
// 13: 127 (int32)
DATA siluc<>+0(SB)/4, $0x80000000
DATA siluc<>+4(SB)/4, $0x80000000
DATA siluc<>+8(SB)/4, $0x80000000
DATA siluc<>+12(SB)/4, $0x80000000
DATA siluc<>+16(SB)/4, $0x80000000
DATA siluc<>+20(SB)/4, $0x80000000
DATA siluc<>+24(SB)/4, $0x80000000
DATA siluc<>+28(SB)/4, $0x80000000
DATA siluc<>+32(SB)/4, $0xc2ae999a
DATA siluc<>+36(SB)/4, $0xc2ae999a
DATA siluc<>+40(SB)/4, $0xc2ae999a
DATA siluc<>+44(SB)/4, $0xc2ae999a
DATA siluc<>+48(SB)/4, $0xc2ae999a
DATA siluc<>+52(SB)/4, $0xc2ae999a
DATA siluc<>+56(SB)/4, $0xc2ae999a
DATA siluc<>+60(SB)/4, $0xc2ae999a
DATA siluc<>+64(SB)/4, $0x42b0999a
DATA siluc<>+68(SB)/4, $0x42b0999a
DATA siluc<>+72(SB)/4, $0x42b0999a
DATA siluc<>+76(SB)/4, $0x42b0999a
DATA siluc<>+80(SB)/4, $0x42b0999a
DATA siluc<>+84(SB)/4, $0x42b0999a
DATA siluc<>+88(SB)/4, $0x42b0999a
DATA siluc<>+92(SB)/4, $0x42b0999a
DATA siluc<>+96(SB)/4, $0x3fb8aa3b
DATA siluc<>+100(SB)/4, $0x3fb8aa3b
DATA siluc<>+104(SB)/4, $0x3fb8aa3b
DATA siluc<>+108(SB)/4, $0x3fb8aa3b
DATA siluc<>+112(SB)/4, $0x3fb8aa3b
DATA siluc<>+116(SB)/4, $0x3fb8aa3b
DATA siluc<>+120(SB)/4, $0x3fb8aa3b
DATA siluc<>+124(SB)/4, $0x3fb8aa3b
DATA siluc<>+128(SB)/4, $0x3f318000
DATA siluc<>+132(SB)/4, $0x3f318000
DATA siluc<>+136(SB)/4, $0x3f318000
DATA siluc<>+140(SB)/4, $0x3f318000
DATA siluc<>+144(SB)/4, $0x3f318000
DATA siluc<>+148(SB)/4, $0x3f318000
DATA siluc<>+152(SB)/4, $0x3f318000
DATA siluc<>+156(SB)/4, $0x3f318000
DATA siluc<>+160(SB)/4, $0xb95e8083
DATA siluc<>+164(SB)/4, $0xb95e8083
DATA siluc<>+168(SB)/4, $0xb95e8083
DATA siluc<>+172(SB)/4, $0xb95e8083
DATA siluc<>+176(SB)/4, $0xb95e8083
DATA siluc<>+180(SB)/4, $0xb95e8083
DATA siluc<>+184(SB)/4, $0xb95e8083
DATA siluc<>+188(SB)/4, $0xb95e8083
DATA siluc<>+192(SB)/4, $0x39506967
DATA siluc<>+196(SB)/4, $0x39506967
DATA siluc<>+200(SB)/4, $0x39506967
DATA siluc<>+204(SB)/4, $0x39506967
DATA siluc<>+208(SB)/4, $0x39506967
DATA siluc<>+212(SB)/4, $0x39506967
DATA siluc<>+216(SB)/4, $0x39506967
DATA siluc<>+220(SB)/4, $0x39506967
DATA siluc<>+224(SB)/4, $0x3ab743ce
DATA siluc<>+228(SB)/4, $0x3ab743ce
DATA siluc<>+232(SB)/4, $0x3ab743ce
DATA siluc<>+236(SB)/4, $0x3ab743ce
DATA siluc<>+240(SB)/4, $0x3ab743ce
DATA siluc<>+244(SB)/4, $0x3ab743ce
DATA siluc<>+248(SB)/4, $0x3ab743ce
DATA siluc<>+252(SB)/4, $0x3ab743ce
DATA siluc<>+256(SB)/4, $0x3c088908
DATA siluc<>+260(SB)/4, $0x3c088908
DATA siluc<>+264(SB)/4, $0x3c088908
DATA siluc<>+268(SB)/4, $0x3c088908
DATA siluc<>+272(SB)/4, $0x3c088908
DATA siluc<>+276(SB)/4, $0x3c088908
DATA siluc<>+280(SB)/4, $0x3c088908
DATA siluc<>+284(SB)/4, $0x3c088908
DATA siluc<>+288(SB)/4, $0x3d2aa9c1
DATA siluc<>+292(SB)/4, $0x3d2aa9c1
DATA siluc<>+296(SB)/4, $0x3d2aa9c1
DATA siluc<>+300(SB)/4, $0x3d2aa9c1
DATA siluc<>+304(SB)/4, $0x3d2aa9c1
DATA siluc<>+308(SB)/4, $0x3d2aa9c1
DATA siluc<>+312(SB)/4, $0x3d2aa9c1
DATA siluc<>+316(SB)/4, $0x3d2aa9c1
DATA siluc<>+320(SB)/4, $0x3e2aaaaa
DATA siluc<>+324(SB)/4, $0x3e2aaaaa
DATA siluc<>+328(SB)/4, $0x3e2aaaaa
DATA siluc<>+332(SB)/4, $0x3e2aaaaa
DATA siluc<>+336(SB)/4, $0x3e2aaaaa
DATA siluc<>+340(SB)/4, $0x3e2aaaaa
DATA siluc<>+344(SB)/4, $0x3e2aaaaa
DATA siluc<>+348(SB)/4, $0x3e2aaaaa
DATA siluc<>+352(SB)/4, $0x3f000000
DATA siluc<>+356(SB)/4, $0x3f000000
DATA siluc<>+360(SB)/4, $0x3f000000
DATA siluc<>+364(SB)/4, $0x3f000000
DATA siluc<>+368(SB)/4, $0x3f000000
DATA siluc<>+372(SB)/4, $0x3f000000
DATA siluc<>+376(SB)/4, $0x3f000000
DATA siluc<>+380(SB)/4, $0x3f000000
DATA siluc<>+384(SB)/4, $0x3f800000
DATA siluc<>+388(SB)/4, $0x3f800000
DATA siluc<>+392(SB)/4, $0x3f800000
DATA siluc<>+396(SB)/4, $0x3f800000
DATA siluc<>+400(SB)/4, $0x3f800000
DATA siluc<>+404(SB)/4, $0x3f800000
DATA siluc<>+408(SB)/4, $0x3f800000
DATA siluc<>+412(SB)/4, $0x3f800000
DATA siluc<>+416(SB)/4, $0x0000007f
DATA siluc<>+420(SB)/4, $0x0000007f
DATA siluc<>+424(SB)/4, $0x0000007f
DATA siluc<>+428(SB)/4, $0x0000007f
DATA siluc<>+432(SB)/4, $0x0000007f
DATA siluc<>+436(SB)/4, $0x0000007f
DATA siluc<>+440(SB)/4, $0x0000007f
DATA siluc<>+444(SB)/4, $0x0000007f
GLOBL siluc<>(SB), RODATA|NOPTR, $448

// func siluMulAVX2(gp, up *float32, n int)
// g[i] = g[i] / (1 + e^−g[i]) · u[i] for i < n (a multiple of eight),
// eight at a time, with e^x as expf computes it (silu.go): each operation
// the one Go does, in its order, so the bits are siluMulGo's.
TEXT ·siluMulAVX2(SB), NOSPLIT, $0-24
	MOVQ gp+0(FP), DI
	MOVQ up+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ done
loop:
	VMOVUPS (DI), Y0
	VXORPS siluc<>+0(SB), Y0, Y1
	VMAXPS siluc<>+32(SB), Y1, Y1
	VMINPS siluc<>+64(SB), Y1, Y1
	VMULPS siluc<>+96(SB), Y1, Y2
	VROUNDPS $0, Y2, Y2
	VMULPS siluc<>+128(SB), Y2, Y3
	VSUBPS Y3, Y1, Y1
	VMULPS siluc<>+160(SB), Y2, Y3
	VSUBPS Y3, Y1, Y1
	VMULPS siluc<>+192(SB), Y1, Y3
	VADDPS siluc<>+224(SB), Y3, Y3
	VMULPS Y1, Y3, Y3
	VADDPS siluc<>+256(SB), Y3, Y3
	VMULPS Y1, Y3, Y3
	VADDPS siluc<>+288(SB), Y3, Y3
	VMULPS Y1, Y3, Y3
	VADDPS siluc<>+320(SB), Y3, Y3
	VMULPS Y1, Y3, Y3
	VADDPS siluc<>+352(SB), Y3, Y3
	VMULPS Y1, Y3, Y3
	VMULPS Y1, Y3, Y3
	VADDPS Y1, Y3, Y3
	VADDPS siluc<>+384(SB), Y3, Y3
	VCVTPS2DQ Y2, Y4
	VPADDD siluc<>+416(SB), Y4, Y4
	VPSLLD $23, Y4, Y4
	VMULPS Y4, Y3, Y3
	VADDPS siluc<>+384(SB), Y3, Y3
	VDIVPS Y3, Y0, Y0
	VMULPS (SI), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	ADDQ $32, SI
	DECQ CX
	JNZ loop
	VZEROUPPER
done:
	RET
