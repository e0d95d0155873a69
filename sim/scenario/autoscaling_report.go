package scenario

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"modelplane/engine"
)

const streamNoise = 0x40 // the noise of an autoscaled scenario's load

func newRand(seed, stream uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, stream)) }

// AutoscaleReport is what an autoscaled run measured.
type AutoscaleReport struct {
	Version    string  `json:"version"`
	Predictive string  `json:"predictive"`
	IntervalS  float64 `json:"interval_s"`
	HeartbeatS float64 `json:"heartbeat_s"`
	ColdStartS float64 `json:"cold_start_s"`
	// CapacityRPS is the measured requests/s one replica serves (every
	// request of the mix queued at once): what the oracle divides by.
	CapacityRPS  float64 `json:"capacity_rps_per_replica"`
	SLATTFTP99MS float64 `json:"sla_ttft_p99_ms"`
	SLATPOTP99MS float64 `json:"sla_tpot_p99_ms"`
	// Minutes is each minute of arrivals; MinutesWithinSLA those whose p99
	// TTFT and p99 TPOT were within the SLA (a minute without requests is).
	Minutes          []MinuteReport `json:"minutes"`
	MinutesWithinSLA int            `json:"minutes_within_sla"`
	WithinSLAPct     float64        `json:"within_sla_pct"`
	// GPUHours counts every replica up (starting, ready or draining) over
	// the duration; OracleGPUHours, per minute, ceil(offered load /
	// CapacityRPS) replicas, cold starts ignored.
	GPUHours       float64 `json:"gpu_hours"`
	OracleGPUHours float64 `json:"oracle_gpu_hours"`
	GPUHoursRatio  float64 `json:"gpu_hours_vs_oracle"`
	// Decisions are the evaluations that changed the count.
	ScaleUps         int                `json:"scale_ups"`
	ScaleDowns       int                `json:"scale_downs"`
	Reversals        int                `json:"reversals"`
	ReversalsPerHour float64            `json:"reversals_per_hour"`
	ScaleUpSignals   map[string]int     `json:"scale_up_signals"`
	InitialReplicas  int                `json:"initial_replicas"`
	MaxReplicasUp    int                `json:"max_replicas_up"`
	MaxPredicted     int                `json:"max_predicted,omitempty"`
	MaxFleetKV       float64            `json:"max_fleet_mean_kv"`
	MeanFleetKV      float64            `json:"mean_fleet_kv"`
	Steps            []StepReport       `json:"steps,omitempty"`
	Decisions        []DecisionReport   `json:"decisions"`
	PredictiveOff    *AutoscaleReport   `json:"predictive_off,omitempty"`
	Comparison       *PredictiveCompare `json:"predictive_comparison,omitempty"`
}

// MinuteReport is one minute of arrivals.
type MinuteReport struct {
	Minute     int     `json:"minute"`
	OfferedRPS float64 `json:"offered_rps"`
	Replicas   float64 `json:"replicas"` // mean replicas up
	Oracle     int     `json:"oracle_replicas"`
	Requests   int     `json:"requests"`
	TTFTP99MS  float64 `json:"ttft_p99_ms"`
	TPOTP99MS  float64 `json:"tpot_p99_ms"`
	WithinSLA  bool    `json:"within_sla"`
}

// StepReport times the scale-up after a load step.
type StepReport struct {
	AtS float64 `json:"at_s"`
	// FirstHeartbeatS is the first heartbeat after the step (the first
	// whose period holds arrivals at the new rate), FirstEvaluationS the
	// first evaluation at or after it, FirstScaleUpS the first evaluation
	// that scaled up (-1: none before the next step or the end).
	FirstHeartbeatS   float64 `json:"first_heartbeat_s"`
	FirstEvaluationS  float64 `json:"first_evaluation_s"`
	FirstScaleUpS     float64 `json:"first_scale_up_s"`
	TimeToScaleUpS    float64 `json:"time_to_first_scale_up_s"`
	AtFirstEvaluation bool    `json:"scaled_at_first_evaluation"`
	// Target is the oracle's count for the new load, FirstScaleUpTo the
	// count the first scale-up asked for; DecisionsToTarget how many
	// scale-ups it took to ask for Target.
	Target            int  `json:"target"`
	FirstScaleUpTo    int  `json:"first_scale_up_to"`
	DecisionsToTarget int  `json:"decisions_to_target"`
	OneDecision       bool `json:"target_in_one_decision"`
}

// DecisionReport is an evaluation that changed the count.
type DecisionReport struct {
	AtSeconds float64 `json:"at_s"`
	From      int     `json:"from"`
	To        int     `json:"to"`
	Signal    string  `json:"signal,omitempty"`
	Panic     bool    `json:"panic,omitempty"`
	Reason    string  `json:"reason"`
}

// PredictiveCompare is predictive on against off, same arrivals.
type PredictiveCompare struct {
	ViolatingMinutesOn  int     `json:"violating_minutes_on"`
	ViolatingMinutesOff int     `json:"violating_minutes_off"`
	ViolationsCutPct    float64 `json:"violations_cut_pct"`
	GPUHoursOn          float64 `json:"gpu_hours_on"`
	GPUHoursOff         float64 `json:"gpu_hours_off"`
	ExtraGPUHoursPct    float64 `json:"extra_gpu_hours_pct"`
}

func (r *autoscaleRun) report(f *fleet) *AutoscaleReport {
	cfg := r.cfg
	out := &AutoscaleReport{Version: cfg.Version, Predictive: string(cfg.Policy.Predictive),
		IntervalS: cfg.Interval.Seconds(), HeartbeatS: cfg.Heartbeat.Seconds(), ColdStartS: cfg.ColdStart.Seconds(),
		CapacityRPS: r.capacity, SLATTFTP99MS: ms(cfg.SLA.TTFTP99), SLATPOTP99MS: ms(cfg.SLA.TPOTP99),
		GPUHours: r.gpuSeconds / 3600, Reversals: r.reversals, ScaleUpSignals: map[string]int{},
		InitialReplicas: f.sc.Versions[r.vi].GPUs, MaxReplicasUp: r.maxUp, MaxPredicted: r.predicted, MaxFleetKV: r.maxKV,
		Decisions: r.decisions}
	if r.kvN > 0 {
		out.MeanFleetKV = r.kvSum / float64(r.kvN)
	}
	if out.Decisions == nil {
		out.Decisions = []DecisionReport{}
	}
	for s, n := range r.scaleUps {
		out.ScaleUpSignals[string(s)] = n
	}
	oracleSec := 0.0
	for k := range r.minutes {
		m := &r.minutes[k]
		span := min(time.Minute, f.sc.Duration-time.Duration(k)*time.Minute)
		mr := MinuteReport{Minute: k, OfferedRPS: float64(m.arrivals) / span.Seconds(), Requests: m.arrivals,
			Replicas: m.replicaSec / span.Seconds()}
		if r.capacity > 0 {
			mr.Oracle = int(math.Ceil(mr.OfferedRPS/r.capacity - 1e-9))
		}
		oracleSec += float64(mr.Oracle) * span.Seconds()
		mr.TTFTP99MS = ms(engine.PercentilesOf(m.ttft).P99)
		mr.TPOTP99MS = ms(engine.PercentilesOf(m.tpot).P99)
		mr.WithinSLA = mr.TTFTP99MS <= out.SLATTFTP99MS && mr.TPOTP99MS <= out.SLATPOTP99MS
		if mr.WithinSLA {
			out.MinutesWithinSLA++
		}
		out.Minutes = append(out.Minutes, mr)
	}
	if n := len(out.Minutes); n > 0 {
		out.WithinSLAPct = 100 * float64(out.MinutesWithinSLA) / float64(n)
	}
	out.OracleGPUHours = oracleSec / 3600
	if out.OracleGPUHours > 0 {
		out.GPUHoursRatio = out.GPUHours / out.OracleGPUHours
	}
	for _, d := range r.decisions {
		if d.To > d.From {
			out.ScaleUps++
		} else {
			out.ScaleDowns++
		}
	}
	if h := f.sc.Duration.Hours(); h > 0 {
		out.ReversalsPerHour = float64(r.reversals) / h
	}
	for k, at := range cfg.Steps {
		next := f.sc.Duration + time.Hour
		if k+1 < len(cfg.Steps) {
			next = cfg.Steps[k+1]
		}
		hb := (at/cfg.Heartbeat + 1) * cfg.Heartbeat
		ev := ((hb + cfg.Interval - 1) / cfg.Interval) * cfg.Interval
		s := StepReport{AtS: at.Seconds(), FirstHeartbeatS: hb.Seconds(), FirstEvaluationS: ev.Seconds(), FirstScaleUpS: -1,
			TimeToScaleUpS: -1}
		if r.capacity > 0 {
			s.Target = int(math.Ceil(f.sc.Arrivals.Rate*cfg.mult(at+time.Millisecond)/r.capacity - 1e-9))
		}
		for _, d := range r.decisions {
			t := time.Duration(d.AtSeconds * float64(time.Second))
			if t < at || t >= next || d.To <= d.From {
				continue
			}
			s.DecisionsToTarget++
			if s.FirstScaleUpS < 0 {
				s.FirstScaleUpS, s.TimeToScaleUpS, s.FirstScaleUpTo = d.AtSeconds, (t - at).Seconds(), d.To
				s.AtFirstEvaluation = t == ev
			}
			if d.To >= s.Target {
				break
			}
		}
		s.OneDecision = s.FirstScaleUpTo >= s.Target && s.DecisionsToTarget == 1
		out.Steps = append(out.Steps, s)
	}
	return out
}

// ViolatingMinutes is the minutes outside the SLA.
func (a *AutoscaleReport) ViolatingMinutes() int { return len(a.Minutes) - a.MinutesWithinSLA }

func compareWithoutPredictive(on, off *AutoscaleReport) *PredictiveCompare {
	c := &PredictiveCompare{ViolatingMinutesOn: on.ViolatingMinutes(), ViolatingMinutesOff: off.ViolatingMinutes(),
		GPUHoursOn: on.GPUHours, GPUHoursOff: off.GPUHours}
	if c.ViolatingMinutesOff > 0 {
		c.ViolationsCutPct = 100 * float64(c.ViolatingMinutesOff-c.ViolatingMinutesOn) / float64(c.ViolatingMinutesOff)
	}
	if off.GPUHours > 0 {
		c.ExtraGPUHoursPct = 100 * (on.GPUHours - off.GPUHours) / off.GPUHours
	}
	return c
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// writeText prints the autoscaling figures.
func (a *AutoscaleReport) writeText(w io.Writer) {
	var b strings.Builder
	fmt.Fprintf(&b, "\nautoscaling %s (predictive %s): evaluation every %gs, heartbeat %gs, cold start %gs, %.2f req/s per replica measured\n",
		a.Version, a.Predictive, a.IntervalS, a.HeartbeatS, a.ColdStartS, a.CapacityRPS)
	fmt.Fprintf(&b, "SLA p99 TTFT %.0f ms, p99 TPOT %.0f ms: %d of %d minutes within (%.1f%%)\n",
		a.SLATTFTP99MS, a.SLATPOTP99MS, a.MinutesWithinSLA, len(a.Minutes), a.WithinSLAPct)
	fmt.Fprintf(&b, "GPU-hours %.2f, oracle %.2f (%.3fx); replicas %d at start, at most %d up", a.GPUHours, a.OracleGPUHours, a.GPUHoursRatio, a.InitialReplicas, a.MaxReplicasUp)
	if a.MaxPredicted > 0 {
		fmt.Fprintf(&b, ", forecast asked at most %d", a.MaxPredicted)
	}
	fmt.Fprintf(&b, "\n%d scale-ups, %d scale-downs, %d reversals (%.1f per hour); fleet mean KV use %.2f on average, %.2f at most\n",
		a.ScaleUps, a.ScaleDowns, a.Reversals, a.ReversalsPerHour, a.MeanFleetKV, a.MaxFleetKV)
	if len(a.ScaleUpSignals) > 0 {
		keys := make([]string, 0, len(a.ScaleUpSignals))
		for k := range a.ScaleUpSignals {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b.WriteString("scale-ups won by:")
		for _, k := range keys {
			fmt.Fprintf(&b, " %s %d", k, a.ScaleUpSignals[k])
		}
		b.WriteString("\n")
	}
	for _, s := range a.Steps {
		fmt.Fprintf(&b, "load step at %gs: first heartbeat %gs, first evaluation %gs, first scale-up %gs (%gs after the step, at the first evaluation: %v) to %d; target %d in %d decision(s)\n",
			s.AtS, s.FirstHeartbeatS, s.FirstEvaluationS, s.FirstScaleUpS, s.TimeToScaleUpS, s.AtFirstEvaluation, s.FirstScaleUpTo, s.Target, s.DecisionsToTarget)
	}
	if c := a.Comparison; c != nil {
		fmt.Fprintf(&b, "predictive on vs off: %d vs %d minutes outside the SLA (%.0f%% fewer), %.2f vs %.2f GPU-hours (%+.1f%%)\n",
			c.ViolatingMinutesOn, c.ViolatingMinutesOff, c.ViolationsCutPct, c.GPUHoursOn, c.GPUHoursOff, c.ExtraGPUHoursPct)
	}
	b.WriteString("\nper minute (by arrival)\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "minute\toffered req/s\treplicas\toracle\tTTFT p99 ms\tTPOT p99 ms\twithin SLA\t")
	for _, m := range a.Minutes {
		fmt.Fprintf(tw, "%d\t%.1f\t%.1f\t%d\t%.0f\t%.1f\t%v\t\n", m.Minute, m.OfferedRPS, m.Replicas, m.Oracle, m.TTFTP99MS, m.TPOTP99MS, m.WithinSLA)
	}
	tw.Flush()
	io.WriteString(w, b.String())
	if a.PredictiveOff != nil {
		io.WriteString(w, "\nthe same run with predictive off:")
		a.PredictiveOff.writeText(w)
	}
}
