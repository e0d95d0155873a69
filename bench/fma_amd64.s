//go:build !purego

#include "textflag.h"

// func fmaPeak512(iters int, a, b float32) float32
// Runs iters steps of sixteen VFMADD231PS on registers only, each step
// one FMA into each of sixteen independent sixteen-lane accumulators
// (Z0-Z15 += a·b): more chains than an FMA's latency times the FMA ports
// of any current x86 core (4 × 2 on Zen 4 and 5, Sapphire Rapids), so
// the loop runs at the core's FMA issue rate, with no load or store to
// hold it. Returns the first lane of the accumulators' sum, which the
// caller keeps.
TEXT ·fmaPeak512(SB), NOSPLIT, $0-20
	MOVQ iters+0(FP), CX
	VBROADCASTSS a+8(FP), Z16
	VBROADCASTSS b+12(FP), Z17
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	VXORPS Z3, Z3, Z3
	VXORPS Z4, Z4, Z4
	VXORPS Z5, Z5, Z5
	VXORPS Z6, Z6, Z6
	VXORPS Z7, Z7, Z7
	VXORPS Z8, Z8, Z8
	VXORPS Z9, Z9, Z9
	VXORPS Z10, Z10, Z10
	VXORPS Z11, Z11, Z11
	VXORPS Z12, Z12, Z12
	VXORPS Z13, Z13, Z13
	VXORPS Z14, Z14, Z14
	VXORPS Z15, Z15, Z15
	TESTQ CX, CX
	JZ done
loop:
	VFMADD231PS Z17, Z16, Z0
	VFMADD231PS Z17, Z16, Z1
	VFMADD231PS Z17, Z16, Z2
	VFMADD231PS Z17, Z16, Z3
	VFMADD231PS Z17, Z16, Z4
	VFMADD231PS Z17, Z16, Z5
	VFMADD231PS Z17, Z16, Z6
	VFMADD231PS Z17, Z16, Z7
	VFMADD231PS Z17, Z16, Z8
	VFMADD231PS Z17, Z16, Z9
	VFMADD231PS Z17, Z16, Z10
	VFMADD231PS Z17, Z16, Z11
	VFMADD231PS Z17, Z16, Z12
	VFMADD231PS Z17, Z16, Z13
	VFMADD231PS Z17, Z16, Z14
	VFMADD231PS Z17, Z16, Z15
	DECQ CX
	JNZ loop
done:
	VADDPS Z1, Z0, Z0
	VADDPS Z3, Z2, Z2
	VADDPS Z5, Z4, Z4
	VADDPS Z7, Z6, Z6
	VADDPS Z9, Z8, Z8
	VADDPS Z11, Z10, Z10
	VADDPS Z13, Z12, Z12
	VADDPS Z15, Z14, Z14
	VADDPS Z2, Z0, Z0
	VADDPS Z6, Z4, Z4
	VADDPS Z10, Z8, Z8
	VADDPS Z14, Z12, Z12
	VADDPS Z4, Z0, Z0
	VADDPS Z12, Z8, Z8
	VADDPS Z8, Z0, Z0
	VMOVSS X0, ret+16(FP)
	VZEROUPPER
	RET
