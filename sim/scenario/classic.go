package scenario

import (
	"math"
	"math/rand/v2"
	"time"

	"modelplane/sim"
)

// A classic version (a classifier or regressor: its profile sets
// latency_ms, score or value and no LLM key) has no scheduler. Each request
// routed to it is answered after a latency drawn from the profile, fails at
// its error_rate, and otherwise returns an output drawn from its score (or
// value) distribution: the same draws the sim replica's /predict makes
// (sim/replica's dist.go), made here from the scenario's own generator
// stream so the run stays a pure function of the scenario. Requests do not
// queue: a classic replica answers every request at once, as the replica
// does, so its GPUs count only for routing and the report.

// defaultScore is the score distribution of a classic profile without
// score or value, as the sim replica's.
var defaultScore = sim.Moments{Mean: 0.5, SD: 0.25}

// z99 is the standard normal quantile at 0.99.
const z99 = 2.3263478740408408

// maxClassicLatency caps a latency draw, as the replica does.
const maxClassicLatency = time.Minute

// classic is a classic version's draws.
type classic struct {
	errorRate float64
	mu, sigma float64 // of ln(milliseconds); mu = -Inf: no latency
	beta      bool    // score from Beta(a, b), else value from N(mean, sd²)
	a, b      float64
	value     sim.Moments
}

// isClassic reports whether p describes a classifier or regressor the
// engine can run: no LLM key, and latency_ms, score or value set.
func isClassic(p sim.Profile) bool {
	return !p.IsLLM() && (p.LatencyMs != nil || p.Score != nil || p.Value != nil)
}

// newClassic fits the profile's distributions: latency log-normal through
// p50 and p99, score Beta by moments (its variance capped at
// mean(1−mean)/1.5, as the replica's fit), value normal.
func newClassic(p sim.Profile) classic {
	c := classic{errorRate: p.ErrorRate, mu: math.Inf(-1)}
	if l := p.LatencyMs; l != nil && l.P50 > 0 {
		c.mu, c.sigma = math.Log(l.P50), (math.Log(l.P99)-math.Log(l.P50))/z99
	}
	if p.Value != nil {
		c.value = *p.Value
		return c
	}
	s := defaultScore
	if p.Score != nil {
		s = *p.Score
	}
	v := min(s.SD*s.SD, s.Mean*(1-s.Mean)/1.5)
	nu := s.Mean*(1-s.Mean)/v - 1
	c.beta, c.a, c.b = true, s.Mean*nu, (1-s.Mean)*nu
	return c
}

// draw is one request: whether it fails, its latency and its output. The
// three draws are always made, in that order, so a change of error rate
// does not move the latencies or outputs of other requests.
func (c classic) draw(r *rand.Rand) (fail bool, latency time.Duration, out float64) {
	fail = r.Float64() < c.errorRate
	if !math.IsInf(c.mu, -1) {
		latency = time.Duration(math.Exp(c.mu+c.sigma*r.NormFloat64()) * float64(time.Millisecond))
		if latency > maxClassicLatency || latency < 0 {
			latency = maxClassicLatency
		}
	} else {
		r.NormFloat64()
	}
	if c.beta {
		x, y := gammaDraw(r, c.a), gammaDraw(r, c.b)
		out = c.a / (c.a + c.b)
		if x+y > 0 {
			out = x / (x + y)
		}
	} else {
		out = c.value.Mean + c.value.SD*r.NormFloat64()
	}
	return fail, latency, out
}

// gammaDraw samples Gamma(shape, 1) by Marsaglia and Tsang (2000); a shape
// below 1 uses Gamma(shape+1)·U^(1/shape).
func gammaDraw(r *rand.Rand, shape float64) float64 {
	if shape < 1 {
		return gammaDraw(r, shape+1) * math.Pow(r.Float64(), 1/shape)
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

// answer is a classic request in flight: it ends at done.
type answer struct {
	done, arrival time.Duration
	replica       int
	fail          bool
	out           float64
}

// The heap of classic answers in flight, earliest first; ties by arrival
// order (seq), so the run is deterministic.

func (f *fleet) pushAnswer(a answer) {
	h := append(f.answers, a)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !answerBefore(h[i], h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	f.answers = h
}

func answerBefore(a, b answer) bool {
	if a.done != b.done {
		return a.done < b.done
	}
	return a.arrival < b.arrival
}

func (f *fleet) popAnswer() answer {
	h := f.answers
	a := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < len(h) && answerBefore(h[l], h[m]) {
			m = l
		}
		if l+1 < len(h) && answerBefore(h[l+1], h[m]) {
			m = l + 1
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	f.answers = h
	return a
}

// finishAnswer hands out a classic answer at its end: the version's
// counts, its latency and output (after warmup), and the rollout's window.
func (f *fleet) finishAnswer(a answer) {
	rep := &f.reps[a.replica]
	rep.outstanding--
	v := &f.vs[rep.version]
	if a.fail {
		v.errors++
	} else {
		v.completed++
		if a.done >= f.sc.Warmup {
			v.completedWindow++
		}
		if a.arrival >= f.sc.Warmup {
			v.e2e = append(v.e2e, a.done-a.arrival)
		}
		v.outN++
		v.outSum += a.out
		v.outSumSq += a.out * a.out
	}
	if f.ro != nil {
		f.ro.answered(f, rep.version, a)
	}
}

// OutputStats are a classic version's outputs (scores or values) over the
// whole run: every answer, not only the sampled ones.
type OutputStats struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	SD   float64 `json:"sd"`
}

func outputStats(n int, sum, sumSq float64) *OutputStats {
	if n == 0 {
		return &OutputStats{}
	}
	mean := sum / float64(n)
	return &OutputStats{N: n, Mean: mean, SD: math.Sqrt(max(0, sumSq/float64(n)-mean*mean))}
}
