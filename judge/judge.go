package judge

import (
	"fmt"
	"math"

	"modelplane/busapi"
	"modelplane/field"
)

// Decision is what one evaluation tells the rollout to do.
type Decision string

// The three decisions.
const (
	Advance  Decision = "advance"
	Hold     Decision = "hold"
	Rollback Decision = "rollback"
)

// Defaults of Criteria, from DESIGN.md section 8.
const (
	DefaultMaxRegression     = 0.20
	DefaultMaxErrorRateDelta = 0.5
	DefaultMinRequests       = 100
)

// Criteria are the thresholds a rollout holds its candidate to.
type Criteria struct {
	// MaxP99MS is the absolute ceiling on the candidate's p99 latency, in
	// milliseconds; 0 means none. Not used for LLM endpoints, whose
	// latency depends on the completion's length.
	MaxP99MS float64 `json:"max_p99_ms"`
	// MaxP99TPOTMS is the absolute ceiling on an LLM candidate's p99 time
	// per output token; 0 means none.
	MaxP99TPOTMS float64 `json:"max_p99_tpot_ms"`
	// MaxRegression is how much slower than the incumbent the candidate may
	// be at p99, as a fraction (0.2 = 20 percent).
	MaxRegression float64 `json:"max_regression"`
	// MaxErrorRateDelta is how many percentage points the candidate's error
	// rate may exceed the incumbent's by.
	MaxErrorRateDelta float64 `json:"max_error_rate_delta"`
	// MinRequests is the fewest requests each side needs in the window
	// before anything is judged. An LLM endpoint's time per output token is
	// judged only when each side also has this many streamed completions;
	// otherwise its request latency regression is.
	MinRequests uint64 `json:"min_requests"`
	// Drift gates the rollout on the drift of the candidate's outputs from
	// the incumbent's.
	Drift bool `json:"drift"`
}

// DefaultCriteria are the criteria of a rollout that sets none: the
// version's SLA as the absolute ceilings, the default regression, error
// and request bounds, and the drift gate on for classification and
// regression models.
func DefaultCriteria(task string, slaP99MS, slaP99TPOTMS float64) Criteria {
	return Criteria{
		MaxP99MS: slaP99MS, MaxP99TPOTMS: slaP99TPOTMS,
		MaxRegression: DefaultMaxRegression, MaxErrorRateDelta: DefaultMaxErrorRateDelta,
		MinRequests: DefaultMinRequests, Drift: task == "classification" || task == "regression",
	}
}

// Validate names every criterion out of range, under prefix (such as
// "criteria").
func (c Criteria) Validate(errs *field.Errors, prefix string) {
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	if !finite(c.MaxP99MS) || c.MaxP99MS < 0 {
		errs.Add(prefix+".max_p99_ms", "must be 0 (none) or a positive number of milliseconds")
	}
	if !finite(c.MaxP99TPOTMS) || c.MaxP99TPOTMS < 0 {
		errs.Add(prefix+".max_p99_tpot_ms", "must be 0 (none) or a positive number of milliseconds")
	}
	if !finite(c.MaxRegression) || c.MaxRegression < 0 || c.MaxRegression > 10 {
		errs.Add(prefix+".max_regression", "must be a fraction between 0 and 10")
	}
	if !finite(c.MaxErrorRateDelta) || c.MaxErrorRateDelta < 0 || c.MaxErrorRateDelta > 100 {
		errs.Add(prefix+".max_error_rate_delta", "must be between 0 and 100 percentage points")
	}
	if c.MinRequests < 1 || c.MinRequests > 10_000_000 {
		errs.Add(prefix+".min_requests", "must be between 1 and 10000000")
	}
}

// Window is one version's request statistics over an evaluation window,
// summed over every gateway: the fields of request_stats the judge reads.
type Window struct {
	// Requests counts every request routed to the version.
	Requests uint64 `json:"requests"`
	// Errors counts the version's failures (upstream, timeout and shed;
	// not the clients' bad requests).
	Errors uint64 `json:"errors"`
	// Latency is the duration histogram over busapi.LatencyBoundsUS.
	Latency []uint64 `json:"-"`
	// Streams counts streamed completions.
	Streams uint64 `json:"streams"`
	// TPOT is the time-per-output-token histogram of the streams.
	TPOT []uint64 `json:"-"`
}

// Drift is the output drift of the candidate from the incumbent over the
// same window, as the drift package measures it.
type Drift struct {
	Metric    string  `json:"metric"`
	Value     float64 `json:"value"`
	Threshold float64 `json:"threshold"`
	// Enough is false when either side had too few samples to measure.
	Enough           bool   `json:"enough"`
	CandidateSamples uint64 `json:"candidate_samples"`
	IncumbentSamples uint64 `json:"incumbent_samples"`
}

// Input is everything one evaluation looks at.
type Input struct {
	Candidate Window `json:"candidate"`
	Incumbent Window `json:"incumbent"`
	// LLM judges time per output token instead of request latency.
	LLM bool `json:"llm"`
	// Baked is true once the current step's bake time has passed.
	Baked bool `json:"baked"`
	// Drift is nil when it was not measured.
	Drift *Drift `json:"drift,omitempty"`
}

// Outcome is how one check came out.
type Outcome string

// The outcomes of a check.
const (
	Pass    Outcome = "pass"
	Fail    Outcome = "fail"
	Missing Outcome = "missing"
)

// Check is one number held to one threshold.
type Check struct {
	Name string `json:"name"`
	// Candidate is the candidate's value; Incumbent the incumbent's, where
	// the check compares the two.
	Candidate float64  `json:"candidate"`
	Incumbent *float64 `json:"incumbent,omitempty"`
	// Threshold is the value the candidate must not exceed.
	Threshold float64 `json:"threshold"`
	Outcome   Outcome `json:"outcome"`
	// Detail says in words what was compared or what was missing.
	Detail string `json:"detail"`
}

// Verdict is the judge's answer with everything behind it.
type Verdict struct {
	Decision Decision `json:"decision"`
	// Reason is one line for people: the first failing check, or why it
	// holds.
	Reason string  `json:"reason"`
	Checks []Check `json:"checks"`
}

// Evaluate judges in against c.
func Evaluate(c Criteria, in Input) Verdict {
	var checks []Check
	add := func(ch Check) {
		if math.IsNaN(ch.Candidate) || math.IsInf(ch.Candidate, 0) ||
			(ch.Incumbent != nil && (math.IsNaN(*ch.Incumbent) || math.IsInf(*ch.Incumbent, 0))) ||
			math.IsNaN(ch.Threshold) || math.IsInf(ch.Threshold, 0) {
			ch = Check{Name: ch.Name, Outcome: Missing, Detail: "not a number"}
		}
		checks = append(checks, ch)
	}

	// Every request counts towards the minimum, streamed or not: an LLM
	// endpoint whose clients do not stream still gets judged.
	candN, incN := in.Candidate.Requests, in.Incumbent.Requests
	candEnough, incEnough := candN >= c.MinRequests, incN >= c.MinRequests
	reqs := Check{Name: "requests", Candidate: float64(candN), Incumbent: ptr(float64(incN)),
		Threshold: float64(c.MinRequests), Outcome: Pass,
		Detail: fmt.Sprintf("candidate %d, incumbent %d requests; at least %d each", candN, incN, c.MinRequests)}
	if !candEnough || !incEnough {
		reqs.Outcome = Missing
	}
	add(reqs)

	// Nothing is judged on too few candidate requests: a p99 or an error
	// rate of a handful of requests is noise.
	if candEnough {
		errorChecks(c, in, incEnough, add)
		switch {
		case !in.LLM:
			p99Checks("p99_latency_ms", in.Candidate.Latency, in.Incumbent.Latency, c.MaxP99MS, c.MaxRegression, incEnough, "", add)
		case in.Candidate.Streams >= c.MinRequests && in.Incumbent.Streams >= c.MinRequests:
			p99Checks("p99_tpot_ms", in.Candidate.TPOT, in.Incumbent.TPOT, c.MaxP99TPOTMS, c.MaxRegression, true, "", add)
		default:
			// Too few streams for a time per output token: the request
			// latency regression stands in (no absolute ceiling, an LLM
			// request's length depends on its completion) and the missing
			// TPOT holds nothing.
			note := fmt.Sprintf(" (TPOT not judged: %d and %d streamed completions, at least %d each)",
				in.Candidate.Streams, in.Incumbent.Streams, c.MinRequests)
			p99Checks("p99_latency_ms", in.Candidate.Latency, in.Incumbent.Latency, 0, c.MaxRegression, incEnough, note, add)
		}
	}
	// Drift too waits for the requests: samples can arrive before the
	// request statistics, and a drift verdict on a window whose latency and
	// errors were not judged would roll back on half the evidence.
	if c.Drift && candEnough {
		add(driftCheck(in.Drift))
	}
	return decide(checks, in.Baked)
}

func errorChecks(c Criteria, in Input, incEnough bool, add func(Check)) {
	cand := 100 * float64(in.Candidate.Errors) / float64(in.Candidate.Requests)
	ch := Check{Name: "error_rate_delta_pct", Candidate: cand}
	if !incEnough || in.Incumbent.Requests == 0 {
		ch.Outcome, ch.Detail = Missing, "no incumbent error rate to compare with"
		add(ch)
		return
	}
	inc := 100 * float64(in.Incumbent.Errors) / float64(in.Incumbent.Requests)
	ch.Incumbent, ch.Threshold = &inc, inc+c.MaxErrorRateDelta
	ch.Outcome = outcome(cand > ch.Threshold)
	ch.Detail = fmt.Sprintf("error rate %.3f%% against the incumbent's %.3f%% + %.2f points", cand, inc, c.MaxErrorRateDelta)
	add(ch)
}

func p99Checks(name string, cand, inc []uint64, ceiling, maxRegression float64, incEnough bool, note string, add func(Check)) {
	cp99, cOK := Quantile(cand, 0.99)
	if ceiling > 0 {
		ch := Check{Name: name, Candidate: cp99, Threshold: ceiling}
		if cOK {
			ch.Outcome = outcome(cp99 > ceiling)
			ch.Detail = fmt.Sprintf("p99 %.2f ms against the SLA's %.2f ms", cp99, ceiling)
		} else {
			ch.Outcome, ch.Detail = Missing, "no candidate histogram"
		}
		add(ch)
	}
	ch := Check{Name: name + "_regression", Candidate: cp99}
	ip99, iOK := Quantile(inc, 0.99)
	switch {
	case !cOK:
		ch.Outcome, ch.Detail = Missing, "no candidate histogram"
	case !incEnough || !iOK:
		ch.Outcome, ch.Detail = Missing, "no incumbent p99 to compare with"
	default:
		ch.Incumbent, ch.Threshold = &ip99, ip99*(1+maxRegression)
		ch.Outcome = outcome(cp99 > ch.Threshold)
		ch.Detail = fmt.Sprintf("p99 %.2f ms against the incumbent's %.2f ms + %.0f%%", cp99, ip99, 100*maxRegression)
	}
	ch.Detail += note
	add(ch)
}

func driftCheck(d *Drift) Check {
	switch {
	case d == nil:
		return Check{Name: "drift", Outcome: Missing, Detail: "drift not measured"}
	case !d.Enough:
		return Check{Name: "drift", Outcome: Missing, Detail: fmt.Sprintf("%s: too few samples (candidate %d, incumbent %d)",
			d.Metric, d.CandidateSamples, d.IncumbentSamples)}
	}
	return Check{Name: "drift", Candidate: d.Value, Threshold: d.Threshold, Outcome: outcome(d.Value > d.Threshold),
		Detail: fmt.Sprintf("%s %.4f against %.4f (candidate %d, incumbent %d samples)", d.Metric, d.Value, d.Threshold,
			d.CandidateSamples, d.IncumbentSamples)}
}

// decide turns the checks into the verdict: any failure rolls back, any
// missing number holds, and passing checks advance once baked.
func decide(checks []Check, baked bool) Verdict {
	for _, ch := range checks {
		if ch.Outcome == Fail {
			return Verdict{Decision: Rollback, Reason: ch.Name + ": " + ch.Detail, Checks: checks}
		}
	}
	for _, ch := range checks {
		if ch.Outcome == Missing {
			return Verdict{Decision: Hold, Reason: ch.Name + ": " + ch.Detail, Checks: checks}
		}
	}
	if !baked {
		return Verdict{Decision: Hold, Reason: "every check passes; the step is still baking", Checks: checks}
	}
	return Verdict{Decision: Advance, Reason: "every check passes", Checks: checks}
}

// Quantile reads the q-quantile, in milliseconds, of a histogram over
// busapi.LatencyBoundsUS; 0 and false when the histogram is missing or empty.
func Quantile(h []uint64, q float64) (float64, bool) {
	if len(h) != busapi.LatencyBuckets {
		return 0, false
	}
	var n uint64
	for _, c := range h {
		n += c
	}
	if n == 0 {
		return 0, false
	}
	return busapi.QuantileMS(h, q), true
}

func outcome(failed bool) Outcome {
	if failed {
		return Fail
	}
	return Pass
}

func ptr(v float64) *float64 { return &v }
