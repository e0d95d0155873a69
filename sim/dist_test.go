package sim

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func newRandPCG(seed, stream uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, stream)) }

func meanSD(xs []float64) (mean, sd float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	for _, x := range xs {
		sd += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(sd / float64(len(xs)))
}

func TestLogNormalFitsPercentiles(t *testing.T) {
	t.Parallel()
	tests := []struct{ p50, p99 float64 }{
		{8, 21}, // the demo fraud-detector
		{1, 3},
		{50, 50}, // no spread
		{0.2, 1},
	}
	for _, tt := range tests {
		l := FitLogNormal(tt.p50, tt.p99)
		r := newRandPCG(1, 2)
		const n = 200_000
		ms := make([]float64, n)
		for i := range ms {
			ms[i] = float64(l.Draw(r)) / float64(time.Millisecond)
		}
		slices.Sort(ms)
		got50, got99 := ms[n/2], ms[n*99/100]
		if math.Abs(got50/tt.p50-1) > 0.02 || math.Abs(got99/tt.p99-1) > 0.03 {
			t.Errorf("fit(%v, %v): drawn p50 %.3f p99 %.3f; want within 2%% and 3%%", tt.p50, tt.p99, got50, got99)
		}
	}
	if d := FitLogNormal(0, 0).Draw(newRandPCG(1, 1)); d != 0 {
		t.Errorf("zero p50 drew %v; want 0", d)
	}
}

func TestBetaFitsMoments(t *testing.T) {
	t.Parallel()
	tests := []struct {
		mean, sd, wantSD float64
	}{
		{0.12, 0.18, 0.18}, // demo v23: a < 1, J-shaped
		{0.49, 0.28, 0.28}, // demo v24
		{0.3, 0.2, 0.2},
		{0.9, 0.05, 0.05},
		{0.5, 0.6, math.Sqrt(0.25 / 1.5)}, // too wide for a Beta: capped
	}
	for _, tt := range tests {
		b := FitBeta(tt.mean, tt.sd)
		r := newRandPCG(3, 4)
		const n = 100_000
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = b.Draw(r)
			if xs[i] < 0 || xs[i] > 1 {
				t.Fatalf("Beta(%v, %v) drew %v", b.A, b.B, xs[i])
			}
		}
		mean, sd := meanSD(xs)
		if math.Abs(mean-tt.mean) > 0.005 || math.Abs(sd-tt.wantSD) > 0.005 {
			t.Errorf("fit(%v, %v): mean %.4f sd %.4f; want %v and %.4f", tt.mean, tt.sd, mean, sd, tt.mean, tt.wantSD)
		}
		// The label rule relies on the CDF of a draw being uniform.
		qs := make([]float64, n)
		for i, x := range xs {
			qs[i] = b.CDF(x)
		}
		slices.Sort(qs)
		for _, p := range []float64{0.03, 0.25, 0.5, 0.75, 0.97} {
			if got := qs[int(p*n)]; math.Abs(got-p) > 0.01 {
				t.Errorf("fit(%v, %v): quantile %v of F(X) = %.4f; want uniform", tt.mean, tt.sd, p, got)
			}
		}
	}
}

func TestBetaIncKnownValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, b, x, want float64
	}{
		{1, 1, 0.3, 0.3},                               // uniform
		{2, 1, 0.5, 0.25},                              // x²
		{1, 3, 0.2, 1 - math.Pow(0.8, 3)},              // 1-(1-x)^3
		{2, 3, 0.4, 0.5248},                            // 6x²-8x³+3x⁴
		{5, 5, 0.5, 0.5},                               // symmetric
		{0.27, 1.99, 0, 0},                             // ends
		{0.27, 1.99, 1, 1},                             //
		{0.5, 0.5, 0.25, 2 / math.Pi * math.Asin(0.5)}, // arcsine
	}
	for _, tt := range tests {
		if got := betaInc(tt.a, tt.b, tt.x); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("I_%v(%v, %v) = %.12f; want %.12f", tt.x, tt.a, tt.b, got, tt.want)
		}
	}
}
