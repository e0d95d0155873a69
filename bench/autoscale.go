package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"modelplane/autoscale"
	"modelplane/sim/scenario"
)

// AutoscaleResult is what `modelplane bench autoscale` prints.
type AutoscaleResult struct {
	Name      string `json:"name"`
	Endpoints int    `json:"endpoints"`
	// Replicas is the ready replicas whose samples the timed rounds read.
	Replicas int `json:"replicas"`
	// RoundMS is the median wall time of one decision round (every
	// endpoint's Decide) over Rounds timed rounds, RoundMaxMS the slowest.
	RoundMS    float64 `json:"round_ms"`
	RoundMaxMS float64 `json:"round_max_ms"`
	Rounds     int     `json:"rounds"`
	// IntervalMS is the evaluation interval the round must fit in, and
	// ShareOfInterval RoundMS / IntervalMS; the target is at most 0.01.
	IntervalMS      float64 `json:"interval_ms"`
	ShareOfInterval float64 `json:"share_of_interval"`
	// Changed is how many decisions of the timed rounds changed a count.
	Changed   int  `json:"changed"`
	TargetMet bool `json:"target_met"`
	// Load1 is the machine's one-minute load average when the bench ended.
	Load1 float64 `json:"load1"`
	// Scenarios are the autoscaling built-ins run in virtual time at seeds
	// 1 to 5, each against the oracle; ScenariosMet says whether every one
	// met its targets.
	Scenarios    []AutoscaleScenario `json:"scenarios"`
	ScenariosMet bool                `json:"scenarios_met"`
}

// AutoscaleScenario is one built-in's efficiency: its GPU-hours against
// the oracle's (per minute, the replicas the offered load needs, cold
// starts ignored) and its minutes within the SLA, with their targets.
type AutoscaleScenario struct {
	Scenario       string  `json:"scenario"`
	Seed           uint64  `json:"seed"`
	WithinSLAPct   float64 `json:"within_sla_pct"`
	SLATargetPct   float64 `json:"sla_target_pct"`
	GPUHours       float64 `json:"gpu_hours"`
	OracleGPUHours float64 `json:"oracle_gpu_hours"`
	VsOracle       float64 `json:"gpu_hours_vs_oracle"`
	VsOracleTarget float64 `json:"vs_oracle_target"`
	MaxReplicasUp  int     `json:"max_replicas_up"`
	Met            bool    `json:"met"`
}

// autoscaleScenarios are the built-ins bench autoscale runs, each at
// every seed of autoscaleSeeds, with issue 31's targets: at most 1.1× the
// oracle and 99 % of minutes within the SLA; burst and prefill-heavy at
// most 2×. The burst's SLA target is 90 %: the minute of its 5× step
// cannot be within it while the new replicas start (45 s), whatever the
// policy.
var autoscaleScenarios = []AutoscaleScenario{
	{Scenario: "seed-fleet-autoscale", SLATargetPct: 99, VsOracleTarget: 1.1},
	{Scenario: "noise", SLATargetPct: 99, VsOracleTarget: 1.1},
	{Scenario: "noise-inside", SLATargetPct: 99, VsOracleTarget: 1.1},
	{Scenario: "thrash", SLATargetPct: 99, VsOracleTarget: 1.1},
	{Scenario: "burst", SLATargetPct: 90, VsOracleTarget: 2},
	{Scenario: "prefill-heavy", SLATargetPct: 99, VsOracleTarget: 2},
}

// autoscaleSeeds are the seeds each scenario runs at: the built-ins
// default to 1, and the seed day's policy was tuned at 2 to 4, so a row
// for one seed alone would flatter it (seeds 1 and 5 miss 1.1×).
var autoscaleSeeds = []uint64{1, 2, 3, 4, 5}

// measureScenarios runs autoscaleScenarios at autoscaleSeeds.
func measureScenarios(ctx context.Context) ([]AutoscaleScenario, bool, error) {
	out := make([]AutoscaleScenario, 0, len(autoscaleScenarios)*len(autoscaleSeeds))
	all := true
	for _, target := range autoscaleScenarios {
		for _, seed := range autoscaleSeeds {
			a := target
			a.Seed = seed
			m, err := measureScenario(ctx, a)
			if err != nil {
				return nil, false, err
			}
			all = all && m.Met
			out = append(out, m)
		}
	}
	return out, all, nil
}

// measureScenario runs one built-in at a.Seed against a's targets.
func measureScenario(ctx context.Context, a AutoscaleScenario) (AutoscaleScenario, error) {
	sc, err := scenario.Builtin(a.Scenario)
	if err != nil {
		return a, err
	}
	sc.Seed = a.Seed
	rep, err := scenario.Run(ctx, sc, scenario.Options{})
	if err != nil {
		return a, fmt.Errorf("scenario %s seed %d: %w", a.Scenario, a.Seed, err)
	}
	r := rep.Autoscale
	a.WithinSLAPct, a.GPUHours, a.OracleGPUHours = round3(r.WithinSLAPct), round3(r.GPUHours), round3(r.OracleGPUHours)
	a.VsOracle, a.MaxReplicasUp = round3(r.GPUHoursRatio), r.MaxReplicasUp
	a.Met = a.WithinSLAPct >= a.SLATargetPct && a.VsOracle <= a.VsOracleTarget
	return a, nil
}

const (
	autoscaleEndpoints = 2000
	// autoscaleInterval is the evaluation interval: the lower end of the
	// issue's 2–5 s, so the 1 % target is the stricter 20 ms.
	autoscaleInterval = 2 * time.Second
	// autoscaleWarmup runs a new leader's first 300 s scale-down window,
	// in which nothing scales down, and fills the next one before the
	// timed rounds, as a leader that has run a while has.
	autoscaleWarmup = 300
	autoscaleRounds = 50
)

func runAutoscale(ctx context.Context, cfg Config, out io.Writer) error {
	res := measureAutoscale()
	var err error
	if res.Scenarios, res.ScenariosMet, err = measureScenarios(ctx); err != nil {
		return err
	}
	if cfg.JSON {
		return emit(out, true, res, "")
	}
	var b strings.Builder
	for _, a := range res.Scenarios {
		fmt.Fprintf(&b, "  %s seed %d: %.1f%% of minutes within the SLA (target %.0f%%), %.2f GPU-hours, %.2fx the oracle's %.2f (target %.1fx)\n",
			a.Scenario, a.Seed, a.WithinSLAPct, a.SLATargetPct, a.GPUHours, a.VsOracle, a.OracleGPUHours, a.VsOracleTarget)
	}
	return emit(out, false, res, "autoscale: one round of %d endpoints (%d replicas) in %.3f ms median, %.3f ms max, %.4f of a %.0f ms interval\n%s",
		res.Endpoints, res.Replicas, res.RoundMS, res.RoundMaxMS, res.ShareOfInterval, res.IntervalMS, b.String())
}

// benchEndpoint is one endpoint of the bench fleet: its policy, the state
// the caller keeps, its count and the load its samples follow.
type benchEndpoint struct {
	policy  autoscale.Policy
	state   autoscale.State
	current int
	// load is the endpoint's load in replicas at target, a random walk
	// between 0.3 and 1.8 times the count it was drawn with (base).
	load, base float64
	samples    []autoscale.Sample
}

// measureAutoscale builds 2,000 endpoints of realistic sizes and tasks,
// runs the warm-up rounds, then times the rounds. Samples are generated
// before each round (they are the heartbeats' data, not the decision).
func measureAutoscale() AutoscaleResult {
	r := rand.New(rand.NewPCG(16, 2026))
	eps := make([]benchEndpoint, autoscaleEndpoints)
	for i := range eps {
		eps[i] = newBenchEndpoint(r)
	}
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	res := AutoscaleResult{Name: "autoscale", Endpoints: len(eps), Rounds: autoscaleRounds, IntervalMS: ms(autoscaleInterval)}
	var took []time.Duration
	for round := range autoscaleWarmup + autoscaleRounds {
		replicas := 0
		for i := range eps {
			eps[i].observe(r)
			replicas += len(eps[i].samples)
		}
		changed := 0
		start := time.Now()
		for i := range eps {
			e := &eps[i]
			d := e.state.Decide(&e.policy, autoscale.Input{Now: now, Current: e.current, Ready: e.samples, LastRequest: now})
			if d.Changed {
				e.current = d.Desired
				changed++
			}
		}
		elapsed := time.Since(start)
		if round >= autoscaleWarmup {
			took = append(took, elapsed)
			res.Changed += changed
			res.Replicas = replicas
		}
		now = now.Add(autoscaleInterval)
	}
	res.RoundMS = percentile(took, 0.5)
	res.RoundMaxMS = ms(slices.Max(took))
	res.ShareOfInterval = round3(res.RoundMS/res.IntervalMS*1000) / 1000
	res.TargetMet = res.RoundMS <= 0.01*res.IntervalMS
	res.Load1 = load1()
	return res
}

// newBenchEndpoint draws an endpoint: most are small (1–3 replicas), some
// medium (4–12) or large (13–50), a few very large (51–150, the seed's
// 150-GPU LLM); seven in ten are classic models (a tenth of those on GPUs
// with GPU utilisation as a third signal), the rest LLMs with the seed's
// four signals.
func newBenchEndpoint(r *rand.Rand) benchEndpoint {
	var n int
	switch x := r.Float64(); {
	case x < 0.55:
		n = 1 + r.IntN(3)
	case x < 0.85:
		n = 4 + r.IntN(9)
	case x < 0.97:
		n = 13 + r.IntN(38)
	default:
		n = 51 + r.IntN(100)
	}
	var p autoscale.Policy
	switch x := r.Float64(); {
	case x < 0.63:
		p = autoscale.DefaultPolicy(autoscale.TaskClassification, false, 1)
	case x < 0.7:
		p = autoscale.DefaultPolicy(autoscale.TaskRegression, true, 1)
		p.Signals = append(p.Signals, autoscale.Target{Signal: autoscale.GPUUtil, Target: 0.7})
	default:
		p = autoscale.DefaultPolicy(autoscale.TaskLLM, true, 1)
	}
	p.MaxReplicas = max(200, n)
	base := float64(n)
	return benchEndpoint{policy: p, current: n, base: base, load: base * (0.6 + 0.8*r.Float64())}
}

// observe moves the endpoint's load a step and writes its ready replicas'
// samples: each configured signal at target × load / count, ±10 % per
// replica.
func (e *benchEndpoint) observe(r *rand.Rand) {
	e.load = math.Min(1.8*e.base, math.Max(0.3*e.base, e.load*(0.97+0.06*r.Float64())))
	per := e.load / float64(e.current)
	e.samples = slices.Grow(e.samples[:0], e.current)[:e.current]
	for i := range e.samples {
		var m autoscale.Sample
		for _, t := range e.policy.Signals {
			v := t.Target * per * (0.9 + 0.2*r.Float64())
			if t.Signal == autoscale.KVCache || t.Signal == autoscale.GPUUtil {
				v = math.Min(v, 1)
			}
			m.Set(t.Signal, v)
		}
		e.samples[i] = m
	}
}

// load1 is the one-minute load average (0 where /proc/loadavg is absent).
func load1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(b) + " 0")[0], 64)
	return f
}
