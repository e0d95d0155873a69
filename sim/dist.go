package sim

import (
	"math"
	"math/rand/v2"
	"time"
)

// The distributions of a classifier's or regressor's profile (latency_ms,
// score): the real-time replica's /predict (package sim/replica) and the
// virtual-time fleet's classic versions (package sim/scenario) draw from
// these, so both answer alike.

// z99 is the standard normal quantile at 0.99.
const z99 = 2.3263478740408408

// LogNormal is a latency distribution fitted to two percentiles. With
// ln(X) ~ N(mu, sigma²), the median is exp(mu) and the p99 is
// exp(mu + z99·sigma), so mu = ln(p50) and sigma = (ln(p99) - ln(p50)) / z99.
// The mean is exp(mu + sigma²/2), a little above the median.
type LogNormal struct {
	Mu, Sigma float64 // of ln(milliseconds)
}

// FitLogNormal fits p50 and p99 in milliseconds; p99 must not be below p50.
// A zero p50 means no latency at all.
func FitLogNormal(p50, p99 float64) LogNormal {
	if p50 <= 0 {
		return LogNormal{Mu: math.Inf(-1)}
	}
	return LogNormal{Mu: math.Log(p50), Sigma: (math.Log(p99) - math.Log(p50)) / z99}
}

// MaxLatency caps a draw, so a wild profile cannot hold a request forever.
const MaxLatency = time.Minute

// Draw returns exp(Mu + Sigma·Z) milliseconds as a duration; 0 without
// drawing when Mu is −∞ (no latency).
func (l LogNormal) Draw(r *rand.Rand) time.Duration {
	if math.IsInf(l.Mu, -1) {
		return 0
	}
	ms := math.Exp(l.Mu + l.Sigma*r.NormFloat64())
	d := time.Duration(ms * float64(time.Millisecond))
	if d > MaxLatency || d < 0 {
		return MaxLatency
	}
	return d
}

// Beta is a Beta(A, B) score distribution fitted by moments to a mean m and a
// standard deviation s: with nu = m(1-m)/s² - 1, a = m·nu and b = (1-m)·nu,
// so E = a/(a+b) = m and Var = m(1-m)/(nu+1) = s². A Beta needs
// s² < m(1-m); the fit caps s² at m(1-m)/1.5 (nu >= 0.5), the widest U-shape
// that still samples well.
type Beta struct {
	A, B float64
}

// FitBeta fits a Beta to a mean in (0, 1) and a standard deviation above 0.
func FitBeta(mean, sd float64) Beta {
	v := sd * sd
	if limit := mean * (1 - mean) / 1.5; v > limit {
		v = limit
	}
	nu := mean*(1-mean)/v - 1
	return Beta{A: mean * nu, B: (1 - mean) * nu}
}

// Draw samples X/(X+Y) with X ~ Gamma(A), Y ~ Gamma(B).
func (d Beta) Draw(r *rand.Rand) float64 {
	x, y := gamma(r, d.A), gamma(r, d.B)
	if x+y == 0 {
		return d.A / (d.A + d.B)
	}
	return x / (x + y)
}

// CDF is the regularised incomplete beta function I_x(A, B).
func (d Beta) CDF(x float64) float64 {
	return betaInc(d.A, d.B, x)
}

// gamma samples Gamma(shape, 1) by Marsaglia and Tsang (2000); a shape below
// 1 uses Gamma(shape+1)·U^(1/shape).
func gamma(r *rand.Rand, shape float64) float64 {
	if shape < 1 {
		return gamma(r, shape+1) * math.Pow(r.Float64(), 1/shape)
	}
	d := shape - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := r.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := r.Float64()
		if u < 1-0.0331*x*x*x*x || math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}

// betaInc is I_x(a, b) by the continued fraction of Numerical Recipes
// (betai/betacf), using the symmetry I_x(a,b) = 1 - I_{1-x}(b,a) where the
// fraction converges slowly.
func betaInc(a, b, x float64) float64 {
	switch {
	case x <= 0:
		return 0
	case x >= 1:
		return 1
	}
	la, _ := math.Lgamma(a + b)
	lb, _ := math.Lgamma(a)
	lc, _ := math.Lgamma(b)
	front := math.Exp(la - lb - lc + a*math.Log(x) + b*math.Log1p(-x))
	if x < (a+1)/(a+b+2) {
		return front * betaCF(a, b, x) / a
	}
	return 1 - front*betaCF(b, a, 1-x)/b
}

func betaCF(a, b, x float64) float64 {
	const (
		maxIter = 300
		eps     = 1e-14
		tiny    = 1e-300
	)
	qab, qap, qam := a+b, a+1, a-1
	c, d := 1.0, 1-qab*x/qap
	if math.Abs(d) < tiny {
		d = tiny
	}
	d = 1 / d
	h := d
	for m := 1; m <= maxIter; m++ {
		fm := float64(m)
		m2 := 2 * fm
		aa := fm * (b - fm) * x / ((qam + m2) * (a + m2))
		d = 1 + aa*d
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = 1 + aa/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		h *= d * c
		aa = -(a + fm) * (qab + fm) * x / ((a + m2) * (qap + m2))
		d = 1 + aa*d
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = 1 + aa/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		del := d * c
		h *= del
		if math.Abs(del-1) < eps {
			break
		}
	}
	return h
}
