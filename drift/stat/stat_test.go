package stat

import (
	"math"
	"slices"
	"testing"
)

// normQuantile is Φ⁻¹ by bisection on math.Erf; slow but exact enough to
// build samples whose empirical distribution is a normal one.
func normQuantile(p float64) float64 {
	lo, hi := -10.0, 10.0
	for range 100 {
		mid := (lo + hi) / 2
		if normCDF(mid) < p {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

func normCDF(x float64) float64 { return 0.5 * (1 + math.Erf(x/math.Sqrt2)) }

// normalSample is n points whose empirical distribution is N(mean, sd²):
// the quantiles at the midpoints of n equal slices.
func normalSample(n int, mean, sd float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = mean + sd*normQuantile((float64(i)+0.5)/float64(n))
	}
	return out
}

func uniformSample(n int, lo, hi float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = lo + (hi-lo)*(float64(i)+0.5)/float64(n)
	}
	return out
}

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

func TestPSIClosedForm(t *testing.T) {
	t.Parallel()
	// Two bins, 50/50 against 80/20: (0.3)·ln 1.6 + (0.3)·ln 2.5.
	want := 0.3*math.Log(1.6) + 0.3*math.Log(2.5)
	if got := PSI([]uint64{50, 50}, []uint64{80, 20}); !near(got, want, 1e-12) {
		t.Errorf("PSI 50/50 vs 80/20 = %v, want %v", got, want)
	}
	// N(0,1) against N(μ,1) over the reference's deciles: the current's
	// share of bin i is Φ(z_i − μ) − Φ(z_{i−1} − μ).
	for _, mu := range []float64{0.1, 0.5, 1} {
		ref := normalSample(20_000, 0, 1)
		cur := normalSample(20_000, mu, 1)
		slices.Sort(ref)
		qs := make([]float64, 0, Bins-1)
		for _, l := range DecileLevels() {
			qs = append(qs, normQuantile(l))
		}
		edges := Edges(qs)
		var want float64
		prev := 0.0
		for i := 0; i <= len(edges); i++ {
			next := 1.0
			if i < len(edges) {
				next = normCDF(edges[i] - mu)
			}
			p := next - prev
			want += (p - 0.1) * math.Log(p/0.1)
			prev = next
		}
		got := PSI(CountBins(edges, ref), CountBins(edges, cur))
		if !near(got, want, 0.002) {
			t.Errorf("PSI N(0,1) vs N(%v,1) = %.5f, want %.5f", mu, got, want)
		}
	}
}

func TestPSIEmptyBinUsesEpsilon(t *testing.T) {
	t.Parallel()
	// The current leaves bin 1 empty: its share counts as Epsilon.
	c := Epsilon
	want := (1.0-0.5)*math.Log(1.0/0.5) + (c-0.5)*math.Log(c/0.5)
	if got := PSI([]uint64{10, 10}, []uint64{10, 0}); !near(got, want, 1e-12) || math.IsInf(got, 0) {
		t.Errorf("PSI with an empty bin = %v, want %v", got, want)
	}
}

func TestKLClosedForm(t *testing.T) {
	t.Parallel()
	bern := func(p, q float64) float64 { return p*math.Log(p/q) + (1-p)*math.Log((1-p)/(1-q)) }
	tests := []struct {
		name     string
		ref, cur []uint64
		want     float64
	}{
		{"bernoulli 0.1 vs 0.3", []uint64{100, 900}, []uint64{300, 700}, bern(0.3, 0.1)},
		{"bernoulli 0.5 vs 0.5", []uint64{5, 5}, []uint64{50, 50}, 0},
		{"three classes", []uint64{1, 1, 2}, []uint64{2, 1, 1},
			0.5*math.Log(0.5/0.25) + 0.25*math.Log(1) + 0.25*math.Log(0.25/0.5)},
		{"class unseen in reference", []uint64{10, 0}, []uint64{5, 5}, 0.5*math.Log(0.5/1) + 0.5*math.Log(0.5/Epsilon)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := KL(tt.ref, tt.cur); !near(got, tt.want, 1e-12) {
				t.Errorf("KL = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestWasserstein1ClosedForm(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		a, b []float64
		want float64
		tol  float64
	}{
		// Same shape, shifted: the distance is the shift.
		{"normal shift 0.37", normalSample(4000, 0.12, 0.18), normalSample(4000, 0.49, 0.18), 0.37, 1e-9},
		// U(0,1) vs U(0,2): ∫₀¹ |u − 2u| du = 1/2.
		{"uniform stretch", uniformSample(5000, 0, 1), uniformSample(5000, 0, 2), 0.5, 1e-3},
		// N(0,1) vs N(0,2²): ∫ |Φ⁻¹(u)| du = E|Z| = √(2/π).
		{"normal scale", normalSample(5000, 0, 1), normalSample(5000, 0, 2), math.Sqrt(2 / math.Pi), 2e-3},
		{"point masses", []float64{0, 0, 1}, []float64{1, 1, 1}, 2.0 / 3, 1e-12},
		{"identical", normalSample(1000, 3, 2), normalSample(1000, 3, 2), 0, 1e-12},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Wasserstein1(tt.a, tt.b); !near(got, tt.want, tt.tol) {
				t.Errorf("W1 = %v, want %v", got, tt.want)
			}
			// The quantile-grid form the ClickHouse reader uses agrees.
			qa, qb := quantilesExact(tt.a, W1Levels()), quantilesExact(tt.b, W1Levels())
			if got := Wasserstein1Quantiles(qa, qb); !near(got, tt.want, max(tt.tol, 0.01)) {
				t.Errorf("W1 from quantiles = %v, want %v", got, tt.want)
			}
		})
	}
}

func quantilesExact(xs, levels []float64) []float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	out := make([]float64, len(levels))
	for i, l := range levels {
		out[i] = QuantileExact(s, l)
	}
	return out
}

func TestIdenticalDistributionsScoreZero(t *testing.T) {
	t.Parallel()
	xs := normalSample(10_000, 5, 3)
	edges := Edges(quantilesExact(xs, DecileLevels()))
	h := CountBins(edges, xs)
	if got := PSI(h, h); got != 0 {
		t.Errorf("PSI of identical = %v, want 0", got)
	}
	if got := KL([]uint64{3, 5, 7}, []uint64{30, 50, 70}); !near(got, 0, 1e-12) {
		t.Errorf("KL of identical shares = %v, want 0", got)
	}
	if got := Wasserstein1(xs, xs); got != 0 {
		t.Errorf("W1 of identical = %v, want 0", got)
	}
}

func TestEdgesDropTiesAndBinsAreRightClosed(t *testing.T) {
	t.Parallel()
	edges := Edges([]float64{0, 0, 0, 1, 1, math.NaN(), 2})
	if want := []float64{0, 1, 2}; !slices.Equal(edges, want) {
		t.Fatalf("Edges = %v, want %v", edges, want)
	}
	for _, tt := range []struct {
		x    float64
		want int
	}{{-1, 0}, {0, 0}, {0.5, 1}, {1, 1}, {2, 2}, {2.1, 3}} {
		if got := Bin(edges, tt.x); got != tt.want {
			t.Errorf("Bin(%v) = %d, want %d", tt.x, got, tt.want)
		}
	}
}

func TestQuantilesMatchClickHouseDefinitions(t *testing.T) {
	t.Parallel()
	s := []float64{1, 2, 3, 4}
	// SELECT quantiles(0.5, 0.25)([1,2,3,4]) → [2.5, 1.75];
	// quantilesExact(0.5, 0.25) → [3, 2] (checked on 18.16).
	if got := []float64{QuantileInterpolated(s, 0.5), QuantileInterpolated(s, 0.25)}; !slices.Equal(got, []float64{2.5, 1.75}) {
		t.Errorf("interpolated = %v, want [2.5 1.75]", got)
	}
	if got := []float64{QuantileExact(s, 0.5), QuantileExact(s, 0.25)}; !slices.Equal(got, []float64{3, 2}) {
		t.Errorf("exact = %v, want [3 2]", got)
	}
}

func TestNormalisedFloorsSpread(t *testing.T) {
	t.Parallel()
	if got := Normalised(0.37, 0.18); !near(got, 0.37/0.18, 1e-12) {
		t.Errorf("Normalised = %v", got)
	}
	if got := Normalised(0, 0); got != 0 {
		t.Errorf("Normalised(0, 0) = %v, want 0", got)
	}
	if got := Normalised(0.5, 0); math.IsInf(got, 0) || got < 1e5 {
		t.Errorf("Normalised(0.5, 0) = %v, want large and finite", got)
	}
}
