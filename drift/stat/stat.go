package stat

import (
	"math"
	"slices"
)

// Epsilon replaces an empty bin's or an unseen class's share in PSI and KL,
// whose logarithms are infinite at zero: a share below Epsilon counts as
// Epsilon. 1e-4 keeps one empty bin of ten from dominating (it adds at most
// about 0.1 × ln(0.1/1e-4) ≈ 0.7 to PSI) while still flagging a bin that
// empties completely.
const Epsilon = 1e-4

// Thresholds above which a score is flagged (DESIGN.md section 10; the
// Wasserstein one is ours, see docs/drift.md).
const (
	// PSIThreshold is the conventional "significant shift" level of the
	// population stability index.
	PSIThreshold = 0.2
	// KLThreshold flags the predicted class distribution.
	KLThreshold = 0.1
	// W1Threshold flags the Wasserstein-1 distance of outputs divided by
	// the reference's standard deviation: a shift of a fifth of the
	// reference's spread. It means the same for a score in [0, 1] and a
	// regression in dollars.
	W1Threshold = 0.2
)

// Bins is the number of reference-quantile bins of PSI: deciles.
const Bins = 10

// DefaultMinSamples is the fewest samples either window must hold before
// any number is judged: below it the verdict is not_enough_data and nothing
// is flagged. 200 keeps a decile bin's expected count at 20, where PSI's
// sampling noise stays well under its 0.2 threshold. It lives here, not in
// drift's reader, because the simulator's drift gate uses the same floor.
const DefaultMinSamples = 200

// Names of the output metrics, as scores, alerts and verdicts record them.
const (
	// MetricKL is the KL divergence of predicted class labels.
	MetricKL = "kl"
	// MetricW1 is the normalised Wasserstein-1 of scores or regression
	// values.
	MetricW1 = "w1_norm"
	// MetricLength is the normalised Wasserstein-1 of LLM completion
	// lengths (tokens).
	MetricLength = "completion_length_w1_norm"
	// MetricPSI is a feature's PSI (scores carry the feature's name).
	MetricPSI = "psi"
)

// share is n/total floored at Epsilon.
func share(n, total float64) float64 {
	if total <= 0 {
		return Epsilon
	}
	return max(n/total, Epsilon)
}

// PSI is the population stability index of two histograms over the same
// bins: Σ (cur_i − ref_i) · ln(cur_i / ref_i) over the shares of each bin,
// every share floored at Epsilon. It is zero for equal shares and
// symmetric in its arguments.
func PSI(ref, cur []uint64) float64 {
	rt, ct := total(ref), total(cur)
	var s float64
	for i := range ref {
		r, c := share(float64(ref[i]), rt), share(float64(cur[i]), ct)
		s += (c - r) * math.Log(c/r)
	}
	return s
}

// KL is the Kullback–Leibler divergence D(cur ‖ ref) = Σ cur_i · ln(cur_i /
// ref_i) of two class histograms over the same classes, every share floored
// at Epsilon (so a class the reference never predicted counts as rare, not
// impossible). The current window is the one being judged, so its mass is
// what the divergence weighs.
func KL(ref, cur []uint64) float64 {
	rt, ct := total(ref), total(cur)
	var s float64
	for i := range ref {
		if cur[i] == 0 {
			continue // 0 · ln 0 = 0
		}
		r, c := share(float64(ref[i]), rt), float64(cur[i])/ct
		s += c * math.Log(c/r)
	}
	return s
}

func total(h []uint64) float64 {
	var t uint64
	for _, n := range h {
		t += n
	}
	return float64(t)
}

// Wasserstein1 is the exact Wasserstein-1 (earth mover's) distance of two
// samples, ∫ |F_a(x) − F_b(x)| dx of their empirical distribution
// functions. It is zero when either is empty. The inputs are not changed.
func Wasserstein1(a, b []float64) float64 {
	if len(a) == 0 || len(b) == 0 {
		return 0
	}
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	var i, j int
	var fa, fb, d float64
	x := min(a[0], b[0])
	na, nb := float64(len(a)), float64(len(b))
	for i < len(a) || j < len(b) {
		var next float64
		switch {
		case j >= len(b) || (i < len(a) && a[i] <= b[j]):
			next = a[i]
		default:
			next = b[j]
		}
		d += math.Abs(fa-fb) * (next - x)
		x = next
		for i < len(a) && a[i] == x {
			i++
		}
		for j < len(b) && b[j] == x {
			j++
		}
		fa, fb = float64(i)/na, float64(j)/nb
	}
	return d
}

// W1Levels are the quantile levels at which drift's ClickHouse reader (and
// the simulator's gate) samples both distributions' quantile functions to
// compute Wasserstein-1: the midpoints of W1Grid equal slices of [0, 1]. W1 = ∫₀¹ |Q_a(u) − Q_b(u)| du,
// and the midpoint rule over 200 slices is within a few tenths of a percent
// of the exact distance for the smooth and discrete distributions we see.
func W1Levels() []float64 {
	out := make([]float64, W1Grid)
	for k := range out {
		out[k] = (float64(k) + 0.5) / W1Grid
	}
	return out
}

// W1Grid is the number of quantile levels of W1Levels.
const W1Grid = 200

// Wasserstein1Quantiles is Wasserstein-1 from two quantile functions
// sampled at the same equally spaced levels (W1Levels): the mean absolute
// difference. It is zero when the lengths differ or are zero.
func Wasserstein1Quantiles(qa, qb []float64) float64 {
	if len(qa) == 0 || len(qa) != len(qb) {
		return 0
	}
	var s float64
	for i := range qa {
		s += math.Abs(qa[i] - qb[i])
	}
	return s / float64(len(qa))
}

// QuantileExact is ClickHouse's quantileExact: the element at index
// ⌊q·n⌋ of the sorted sample (the last for q ≥ 1). sorted must be sorted.
func QuantileExact(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)))
	if q >= 1 || i >= len(sorted) {
		i = len(sorted) - 1
	}
	return sorted[i]
}

// QuantileInterpolated is ClickHouse's quantile (reservoir) for samples of
// up to 8,192 values, where the reservoir holds them all: linear
// interpolation between the order statistics around (n−1)·q. sorted must
// be sorted.
func QuantileInterpolated(sorted []float64, q float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	idx := max(0, min(float64(n-1), q*float64(n-1)))
	l := int(math.Floor(idx))
	if l+1 >= n {
		return sorted[n-1]
	}
	f := idx - float64(l)
	return (1-f)*sorted[l] + f*sorted[l+1]
}

// DecileLevels are the quantile levels of the reference whose values are
// the PSI bin edges.
func DecileLevels() []float64 {
	out := make([]float64, Bins-1)
	for i := range out {
		out[i] = float64(i+1) / Bins
	}
	return out
}

// Edges turns reference quantiles into bin edges: sorted, repeated values
// (ties at a heavily repeated value) and non-finite ones removed. The bins
// are (−∞, e₀], (e₀, e₁], …, (e_last, +∞), so len(Edges)+1 bins.
func Edges(quantiles []float64) []float64 {
	var out []float64
	for _, q := range quantiles {
		if !math.IsNaN(q) && !math.IsInf(q, 0) {
			out = append(out, q)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Bin is the index of the bin of x among edges (see Edges).
func Bin(edges []float64, x float64) int {
	i, _ := slices.BinarySearch(edges, x) // first edge ≥ x
	return i
}

// CountBins counts values into the bins of edges.
func CountBins(edges, values []float64) []uint64 {
	h := make([]uint64, len(edges)+1)
	for _, v := range values {
		h[Bin(edges, v)]++
	}
	return h
}

// MeanStd returns a sample's mean and population standard deviation (as
// ClickHouse's avg and stddevPop); zeros for an empty one.
func MeanStd(xs []float64) (mean, sd float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	var v float64
	for _, x := range xs {
		v += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(v / float64(len(xs)))
}

// MinSpread is the smallest spread Normalised divides by: a reference
// whose outputs are all equal (a constant model) has none, and any move of
// the current away from that constant must still read as a large drift
// rather than an infinity that JSON cannot carry.
const MinSpread = 1e-6

// Normalised divides a Wasserstein distance by the reference's spread, its
// population standard deviation, floored at MinSpread.
func Normalised(w1, spread float64) float64 {
	return w1 / max(spread, MinSpread)
}
