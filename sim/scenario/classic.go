package scenario

import (
	"math"
	"math/rand/v2"
	"time"

	"modelplane/sim"
	"modelplane/sim/profile"
)

// A classic version (a classifier or regressor: its profile sets
// latency_ms, score or value and no LLM key) has no scheduler. Each request
// routed to it is answered after a latency drawn from the profile, fails at
// its error_rate, and otherwise returns an output drawn from its score (or
// value) distribution: the distributions the sim replica's /predict draws
// from (sim.LogNormal, sim.Beta), drawn here from the scenario's own
// generator stream so the run stays a pure function of the scenario. Requests do not
// queue: a classic replica answers every request at once, as the replica
// does, so its GPUs count only for routing and the report.

// defaultScore is the score distribution of a classic profile without
// score or value, as the sim replica's.
var defaultScore = profile.Moments{Mean: 0.5, SD: 0.25}

// classic is a classic version's draws.
type classic struct {
	errorRate float64
	latency   sim.LogNormal
	beta      bool // score from score, else value from N(mean, sd²)
	score     sim.Beta
	value     profile.Moments
}

// isClassic reports whether p describes a classifier or regressor the
// engine can run: no LLM key, and latency_ms, score or value set.
func isClassic(p profile.Profile) bool {
	return !p.IsLLM() && (p.LatencyMs != nil || p.Score != nil || p.Value != nil)
}

// newClassic fits the profile's distributions as the sim replica does
// (sim.FitLogNormal, sim.FitBeta): latency log-normal through p50 and p99,
// a score Beta by its moments, a value normal.
func newClassic(p profile.Profile) classic {
	c := classic{errorRate: p.ErrorRate, latency: sim.FitLogNormal(0, 0)}
	if l := p.LatencyMs; l != nil {
		c.latency = sim.FitLogNormal(l.P50, l.P99)
	}
	if p.Value != nil {
		c.value = *p.Value
		return c
	}
	s := defaultScore
	if p.Score != nil {
		s = *p.Score
	}
	c.beta, c.score = true, sim.FitBeta(s.Mean, s.SD)
	return c
}

// draw is one request: whether it fails, its latency and its output, in
// that order (the replica's order: a change of latency profile does not
// move which requests fail). The output is drawn for a failure too, so
// the error rate does not move other requests' outputs.
func (c classic) draw(r *rand.Rand) (fail bool, latency time.Duration, out float64) {
	fail = r.Float64() < c.errorRate
	latency = c.latency.Draw(r)
	if c.beta {
		out = c.score.Draw(r)
	} else {
		out = c.value.Mean + c.value.SD*r.NormFloat64()
	}
	return fail, latency, out
}

// answer is a classic request in flight: it ends at done.
type answer struct {
	done, arrival time.Duration
	replica       int
	// tenant indexes the scenario's tenants; -1 when it has none.
	tenant int
	fail   bool
	out    float64
}

// The heap of classic answers in flight, earliest first; ties by arrival
// time, so the run is deterministic.

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
		if a.tenant >= 0 {
			f.ts[a.tenant].completed++
		}
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
