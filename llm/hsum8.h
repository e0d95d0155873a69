// HSUM8 leaves the sum of Y's eight lanes in X's low lane, in a fixed
// tree: (lo128 + hi128), then (l0+l2, l1+l3), then their sum. Every AVX2
// kernel reduces a pair's accumulator with it, so a pair's result does
// not depend on which kernel computed it.
#define HSUM8(Y, X, T) \
	VEXTRACTF128 $1, Y, T \
	VADDPS T, X, X \
	VMOVHLPS X, T, T \
	VADDPS T, X, X \
	VMOVSHDUP X, T \
	VADDSS T, X, X
