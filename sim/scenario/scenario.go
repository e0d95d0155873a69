package scenario

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"time"

	"modelplane/sim/profile"
)

// Scenario is one simulated fleet under one load. Parse reads it from YAML
// (see docs/simulation.md for the file format, key by key); Validate names
// the first bad field with the YAML key path.
type Scenario struct {
	// Name identifies the scenario in reports; Description says what it asks.
	Name        string
	Description string
	// Seed seeds every random draw of the run: arrival times, lengths,
	// tenants, routing, and each replica's scheduler.
	Seed uint64
	// Duration is how long requests arrive, in simulated time. Without
	// Drain the run stops then, and requests still queued or running are
	// reported as unfinished.
	Duration time.Duration
	// Warmup is the start of the run left out of the measurements: latencies
	// count only requests that arrived after it, and time averages (batch,
	// KV use, waste) only steps that started after it. Less than Duration.
	Warmup time.Duration
	// Drain keeps the run going after Duration, with no new arrivals, until
	// every request has finished.
	Drain bool
	// Arrivals is the arrival process of the whole fleet.
	Arrivals Arrivals
	// PromptTokens is the prompt length distribution.
	PromptTokens profile.LengthDist
	// OutputTokens is the completion length distribution; nil leaves it to
	// each version's profile (its output_tokens, else max_tokens).
	OutputTokens *profile.LengthDist
	// MaxTokens is every request's max_tokens; 0 sets none.
	MaxTokens int
	// Tenants split the requests by share; empty means one anonymous tenant.
	Tenants []Tenant
	// ShedOutstanding, when above 0, makes the router refuse (as the
	// gateway's 429) a request whose chosen replica already has that many
	// requests queued or running. 0: never shed, queues grow as they must.
	ShedOutstanding int
	// ContiguousMaxLen are the max-length reservations the report compares
	// paged KV with: a contiguous engine reserves that many token slots for
	// every sequence. Default [DefaultContiguousMaxLen].
	ContiguousMaxLen []int
	// Versions are the fleet, one entry per model version.
	Versions []Version
	// Rollout, when set, moves traffic from one version to another by the
	// judge's verdicts during the run; nil: the weights stay as given.
	Rollout *Rollout
	// Autoscale, when set, scales the scenario's one LLM version by package
	// autoscale in virtual time (built-ins only: no YAML key yet).
	Autoscale *Autoscale
}

// Process is an arrival process.
type Process string

// The arrival processes.
const (
	// Poisson arrivals: exponential gaps of mean 1/rate.
	Poisson Process = "poisson"
	// Constant arrivals: exactly 1/rate apart, the first at time 0.
	Constant Process = "constant"
)

// Arrivals is the arrival process of a scenario.
type Arrivals struct {
	Process Process
	// Rate is in requests per second of simulated time.
	Rate float64
}

// Tenant is one tenant's part of the traffic.
type Tenant struct {
	Name string
	// Share is the tenant's weight among the tenants; shares need not add
	// up to 1.
	Share float64
	// Priority is the requests' engine.Request.Priority: higher preempts lower.
	Priority int
}

// Version is one model version's part of the fleet.
type Version struct {
	Name string
	// GPUs is the number of replicas, one simulated GPU each.
	GPUs int
	// Weight is the version's routing weight; weights need not add up to
	// 100. A version of weight 0 gets no traffic.
	Weight float64
	// Profile is the version's sim profile, as the registry stores it: an
	// LLM's (a scheduler per GPU) or a classifier's or regressor's
	// (latency_ms, score, value: answered after a drawn latency, see
	// classic.go). Defaults are filled in.
	Profile profile.Profile
	// Claims are figures from the seed documents, printed next to what the
	// run measured; they change nothing.
	Claims Claims
}

// Claims are published figures a report prints next to its own, 0 when not
// claimed.
type Claims struct {
	// PagedSequencesPerGPU and ContiguousSequencesPerGPU are concurrent
	// sequences one GPU holds with paged KV and with contiguous reservation.
	PagedSequencesPerGPU      float64
	ContiguousSequencesPerGPU float64
	// TPOTP99Ms is the p99 time per output token, in milliseconds.
	TPOTP99Ms float64
}

// DefaultContiguousMaxLen is the contiguous reservation the report compares
// paged KV with when a scenario names none: a 2,048-token context window.
const DefaultContiguousMaxLen = 2048

// Limits keep a scenario within what one process simulates in reasonable
// time and memory; a bigger one is refused, not attempted.
const (
	maxGPUs          = 100_000
	maxVersions      = 64
	maxTenants       = 1024
	maxRate          = 1e7
	maxDuration      = 7 * 24 * time.Hour
	maxRequests      = 5e7 // rate × duration
	maxTokens        = 1 << 24
	maxNameLen       = 63
	maxContiguousLen = 16
)

// ErrInvalidScenario is wrapped by every error of Parse and Validate.
var ErrInvalidScenario = errors.New("invalid scenario")

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// WithDefaults returns the scenario with the documented defaults filled in:
// Poisson arrivals, the default contiguous reservation, and each profile's
// own defaults.
func (s Scenario) WithDefaults() Scenario {
	if s.Arrivals.Process == "" {
		s.Arrivals.Process = Poisson
	}
	if len(s.ContiguousMaxLen) == 0 {
		s.ContiguousMaxLen = []int{DefaultContiguousMaxLen}
	}
	vs := make([]Version, len(s.Versions))
	for i, v := range s.Versions {
		v.Profile = v.Profile.WithDefaults()
		vs[i] = v
	}
	if s.Versions != nil {
		s.Versions = vs
	}
	if s.Rollout != nil {
		s.Rollout = s.Rollout.withDefaults()
	}
	return s
}

// Validate checks a scenario whose defaults are filled (see WithDefaults)
// and names the first bad field by its YAML key path.
func (s Scenario) Validate() error {
	bad := func(path, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidScenario, path, fmt.Sprintf(format, args...))
	}
	if s.Name != "" && (len(s.Name) > maxNameLen || !nameRE.MatchString(s.Name)) {
		return bad("name", "want 1 to %d letters, digits, '.', '_' or '-', starting with a letter or digit", maxNameLen)
	}
	switch {
	case s.Duration <= 0 || s.Duration > maxDuration:
		return bad("duration", "want more than 0s, at most %v", maxDuration)
	case s.Warmup < 0 || s.Warmup >= s.Duration:
		return bad("warmup", "want 0s or more, less than the duration %v", s.Duration)
	case s.Arrivals.Process != Poisson && s.Arrivals.Process != Constant:
		return bad("arrivals.process", `want "poisson" or "constant"`)
	case !finite(s.Arrivals.Rate) || s.Arrivals.Rate <= 0 || s.Arrivals.Rate > maxRate:
		return bad("arrivals.rate", "want requests per second above 0, at most %g", float64(maxRate))
	case s.Arrivals.Rate*s.Duration.Seconds() > maxRequests:
		return bad("arrivals.rate", "%g req/s for %v is more than %g requests", s.Arrivals.Rate, s.Duration, float64(maxRequests))
	case s.MaxTokens < 0 || s.MaxTokens > maxTokens:
		return bad("max_tokens", "want 0 (none) to %d", maxTokens)
	case s.ShedOutstanding < 0 || s.ShedOutstanding > maxTokens:
		return bad("shed_outstanding", "want 0 (never shed) to %d", maxTokens)
	}
	llm := false
	for _, v := range s.Versions {
		llm = llm || v.Profile.IsLLM()
	}
	if err := validLength(s.PromptTokens); err != "" && (llm || s.PromptTokens != (profile.LengthDist{})) {
		return bad("prompt_tokens", "%s", err)
	}
	if s.OutputTokens != nil {
		if err := validLength(*s.OutputTokens); err != "" {
			return bad("output_tokens", "%s", err)
		}
	}
	if len(s.ContiguousMaxLen) == 0 || len(s.ContiguousMaxLen) > maxContiguousLen {
		return bad("contiguous_max_len", "want 1 to %d lengths", maxContiguousLen)
	}
	for i, n := range s.ContiguousMaxLen {
		if n < 1 || n > maxTokens {
			return bad(fmt.Sprintf("contiguous_max_len[%d]", i), "want 1 to %d tokens", maxTokens)
		}
	}
	if len(s.Tenants) > maxTenants {
		return bad("tenants", "want at most %d tenants", maxTenants)
	}
	tenants := map[string]bool{}
	for i, t := range s.Tenants {
		path := fmt.Sprintf("tenants[%d]", i)
		switch {
		case len(t.Name) > maxNameLen || !nameRE.MatchString(t.Name):
			return bad(path+".name", "want 1 to %d letters, digits, '.', '_' or '-', starting with a letter or digit", maxNameLen)
		case tenants[t.Name]:
			return bad(path+".name", "tenant %q listed twice", t.Name)
		case !finite(t.Share) || t.Share <= 0 || t.Share > 1e9:
			return bad(path+".share", "want a weight above 0, at most 1e9")
		case t.Priority < -1000 || t.Priority > 1000:
			return bad(path+".priority", "want -1000 to 1000")
		}
		tenants[t.Name] = true
	}
	if len(s.Versions) == 0 || len(s.Versions) > maxVersions {
		return bad("versions", "want 1 to %d versions", maxVersions)
	}
	names := map[string]bool{}
	gpus := 0
	var weight float64
	for i, v := range s.Versions {
		path := fmt.Sprintf("versions[%d]", i)
		switch {
		case len(v.Name) > maxNameLen || !nameRE.MatchString(v.Name):
			return bad(path+".name", "want 1 to %d letters, digits, '.', '_' or '-', starting with a letter or digit", maxNameLen)
		case names[v.Name]:
			return bad(path+".name", "version %q listed twice", v.Name)
		case v.GPUs < 1 || v.GPUs > maxGPUs:
			return bad(path+".gpus", "want 1 to %d", maxGPUs)
		case !finite(v.Weight) || v.Weight < 0 || v.Weight > 1e9:
			return bad(path+".weight", "want 0 to 1e9")
		case !v.Profile.IsLLM() && !isClassic(v.Profile):
			return bad(path+".profile", "want an LLM profile (decode_base_ms, kv_mb_per_token, usable_gb, ...) or a classifier's or regressor's (latency_ms, score, value)")
		}
		if sc := v.Profile.Score; sc != nil && v.Profile.Value == nil && (sc.Mean <= 0 || sc.Mean >= 1 || sc.SD <= 0) {
			return bad(path+".profile.score", "want 0 < mean < 1 and sd > 0: a score on (0, 1)")
		}
		if err := v.Profile.Validate(); err != nil {
			return fmt.Errorf("%w: %s.profile: %w", ErrInvalidScenario, path, err)
		}
		for _, c := range []struct {
			key string
			v   float64
		}{
			{"paged_sequences_per_gpu", v.Claims.PagedSequencesPerGPU},
			{"contiguous_sequences_per_gpu", v.Claims.ContiguousSequencesPerGPU},
			{"tpot_p99_ms", v.Claims.TPOTP99Ms},
		} {
			if !finite(c.v) || c.v < 0 || c.v > 1e9 {
				return bad(path+".claims."+c.key, "want 0 to 1e9")
			}
		}
		names[v.Name] = true
		gpus += v.GPUs
		weight += v.Weight
	}
	if gpus > maxGPUs {
		return bad("versions", "%d GPUs in all; want at most %d", gpus, maxGPUs)
	}
	if weight <= 0 {
		return bad("versions", "every weight is 0; want some version to get traffic")
	}
	if s.Autoscale != nil {
		if err := s.Autoscale.validate(s); err != nil {
			return err
		}
	}
	if s.Rollout != nil {
		return s.Rollout.validate(s)
	}
	return nil
}

func validLength(d profile.LengthDist) string {
	switch {
	case !finite(d.Mean, d.SD) || d.Mean < 1 || d.Mean > maxTokens:
		return fmt.Sprintf("mean: want 1 to %d tokens", maxTokens)
	case d.SD < 0 || d.SD > maxTokens:
		return fmt.Sprintf("sd: want 0 to %d tokens", maxTokens)
	case d.Max < 0 || d.Max > maxTokens:
		return fmt.Sprintf("max: want 0 (no cap) to %d tokens", maxTokens)
	}
	return ""
}

// GPUs is the fleet's size: the GPUs of every version.
func (s Scenario) GPUs() int {
	n := 0
	for _, v := range s.Versions {
		n += v.GPUs
	}
	return n
}

func finite(xs ...float64) bool {
	for _, x := range xs {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return false
		}
	}
	return true
}
