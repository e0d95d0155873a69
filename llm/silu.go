package llm

import "math"

// siluMulGo sets g[i] = silu(g[i])·u[i] = g[i] / (1 + e^−g[i]) · u[i] (the
// FFN's gate), with e^x from expf: the bits siluMul's assembly gives.
func siluMulGo(g, u []float32) {
	for i := range g {
		g[i] = g[i] / (1 + expf(-g[i])) * u[i]
	}
}

// The constants of expf: Cody and Waite's split of ln 2 (c1 exact in
// float32, so n·c1 is exact for the n that occur) and the minimax
// polynomial of e^r on [−ln2/2, ln2/2] from Moshier's Cephes expf.
const (
	expLog2e = 1.44269504088896341
	expC1    = 0.693359375
	expC2    = -2.12194440e-4
	expP0    = 1.9875691500e-4
	expP1    = 1.3981999507e-3
	expP2    = 8.3334519073e-3
	expP3    = 4.1665795894e-2
	expP4    = 1.6666665459e-1
	expP5    = 5.0000001201e-1
	// expHi and expLo clamp x so that 2^n is a normal float32: e^88.3 is
	// 2.0e38, e^−87.3 1.2e-38.
	expHi = 88.3
	expLo = -87.3
)

// expf is e^x in float32 within about 2 ulp of the exact value: n =
// round(x·log2 e), r = x − n·ln 2, e^r by a polynomial, times 2^n from
// the exponent bits. Every operation is rounded to float32 on its own
// (the conversions keep Go from fusing a product and a sum), as
// siluMulAVX2 does them, so both give the same bits.
func expf(x float32) float32 {
	x = min(max(x, expLo), expHi)
	n := float32(math.RoundToEven(float64(float32(x * expLog2e))))
	r := x - float32(n*expC1)
	r = r - float32(n*expC2)
	y := float32(expP0*r) + expP1
	y = float32(y*r) + expP2
	y = float32(y*r) + expP3
	y = float32(y*r) + expP4
	y = float32(y*r) + expP5
	y = float32(float32(y*r)*r) + r
	y = y + 1
	return y * math.Float32frombits(uint32(int32(n)+127)<<23)
}
