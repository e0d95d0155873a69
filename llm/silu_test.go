package llm

import (
	"math"
	"math/rand/v2"
	"testing"
)

// siluMul gives siluMulGo's bits (the assembly where there is some) on
// every length, at the clamps, past them, at zeros and on values of any
// scale.
func TestSiluMulIsTheGoLoop(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	special := []float32{0, float32(math.Copysign(0, -1)), 1e-30, -1e-30, 87.3, -87.3, 88.3, -88.3, 87.31, -88.31,
		100, -100, 1e30, -1e30, float32(math.Inf(1)), float32(math.Inf(-1))}
	for n := range 70 {
		g := make([]float32, n)
		u := make([]float32, n)
		for i := range g {
			switch {
			case i < len(special) && n%3 == 0:
				g[i] = special[i]
			default:
				g[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(5)-2)))
			}
			u[i] = float32(rng.NormFloat64())
		}
		want := append([]float32(nil), g...)
		siluMulGo(want, u)
		got := append([]float32(nil), g...)
		siluMul(got, u)
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("n %d, g[%d] = %v: got %v, want %v", n, i, g[i], got[i], want[i])
			}
		}
	}
}

// expf is within 2 ulp of e^x over the range it is used in, and the
// gate it makes within 3e-7 of SiLU in float64.
func TestExpfAndSiluAccuracy(t *testing.T) {
	for x := -87.0; x <= 88.0; x += 0.00731 {
		got := float64(expf(float32(x)))
		want := math.Exp(float64(float32(x)))
		if ulp := math.Abs(got-want) / (want * 0x1p-23); ulp > 2 {
			t.Fatalf("expf(%v) = %v, want %v (%.2f ulp)", x, got, want, ulp)
		}
	}
	for x := -60.0; x <= 60.0; x += 0.0137 {
		g := []float32{float32(x)}
		siluMul(g, []float32{1})
		xf := float64(float32(x))
		want := xf / (1 + math.Exp(-xf))
		if d := math.Abs(float64(g[0]) - want); d > 3e-7*math.Abs(want)+1e-30 {
			t.Fatalf("silu(%v) = %v, want %v", x, g[0], want)
		}
	}
}
