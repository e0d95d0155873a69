package scenario

import (
	"math"
	"time"

	"modelplane/autoscale"
	"modelplane/sim/profile"
)

// The autoscaling built-ins are written in Go rather than YAML: their load
// shapes, policies and synthesised histories have no keys in the scenario
// format yet.

// AutoscaleScale is how far the seed fleet is scaled down in the autoscaling
// built-ins so that each runs in under two minutes on the 2-core machine:
// 1,000 req/s on 210 to 230 GPUs becomes 100 req/s on 21 to 23.
const AutoscaleScale = 10

// chat is chat-assistant v42 of app/demo.go, as in seed-fleet.
var chat = profile.Profile{PrefillMsPerToken: 0.05, DecodeBaseMs: 12, DecodeMsPerSeq: 0.35, KVMBPerToken: 0.8, UsableGB: 13}

// autoscaleSLA is the chat endpoint's SLA: the seed's p99 TPOT of 30 ms,
// and a p99 TTFT of 2 s (the seed gives none; ours).
var autoscaleSLA = SLA{TTFTP99: 2 * time.Second, TPOTP99: 30 * time.Millisecond}

// chatPolicy is the seed's LLM policy (in-flight 200, KV 0.85, queue 4,
// tokens/s 2,000) plus requests/s per replica at rps, the signal a
// diurnal load is followed by.
func chatPolicy(rps float64) autoscale.Policy {
	p := autoscale.DefaultPolicy(autoscale.TaskLLM, true, 1)
	if rps > 0 {
		p.Signals = append([]autoscale.Target{{Signal: autoscale.RPS, Target: rps}}, p.Signals...)
	}
	return p
}

// dayPolicy is the seed day's: the chat policy with requests/s at 4.5 per
// replica (92 % of the 4.86 to 4.93 one serves) inside a 5 % tolerance
// band, so that the band's top (4.73) stays below a replica's capacity, and a
// scale-down window of 120 s. The day is compressed 12×: 120 s of it is
// 24 minutes of a real day, where the seed's 300 s would hold a peak for
// an hour of it. The day's replicas report rates over 15 s rather than
// 30 s, for the same reason: a 30 s window lags the steepest climb by
// about 15 s, which with the 45 s cold start let a queue build there.
// Measured at seeds 2, 3 and 4: 1.099×, 1.097× and 1.097× the oracle's
// GPU-hours, 119 of 120 minutes within the SLA each, where the chat policy
// (4.2, 10 %, 300 s, 30 s windows) gave 1.18× and 1.19× at seeds 2 and 3
// (against an oracle whose capacity came from 1,000 requests: since
// 20,000, 1.10× to 1.125× at seeds 1 to 5; docs/autoscaling.md).
// It scales down to the window's mean load, and follows the request
// rate's trend 45 s ahead (the cold start): fewer GPU-hours at each of
// seeds 1 to 9 than without it, the same minutes within the SLA but at
// seed 6 (119 of 120, was 120; docs/autoscaling.md, "The rate's trend").
func dayPolicy() autoscale.Policy {
	p := chatPolicy(4.5)
	p.Tolerance = 0.05
	p.ScaleDownStabilization = 120 * time.Second
	p.ScaleDownBasis = autoscale.ScaleDownMean
	p.TrendHorizon = 45 * time.Second
	return p
}

// chatRPSTarget is the requests/s per replica the chat built-ins aim for:
// about 86 % of the 4.9 req/s a replica serves of the seed-fleet mix.
const chatRPSTarget = 4.2

func chatScenario(name, desc string, rate float64, replicas int, d time.Duration, a *Autoscale) Scenario {
	a.Version = "v42"
	if a.Interval == 0 {
		a.Interval = 2 * time.Second
	}
	if a.Heartbeat == 0 {
		a.Heartbeat = time.Second
	}
	if a.RateWindow == 0 {
		a.RateWindow = autoscale.RateWindow
	}
	if a.ColdStart == 0 {
		a.ColdStart = 45 * time.Second
	}
	if a.SLA == (SLA{}) {
		a.SLA = autoscaleSLA
	}
	if a.Policy.MaxReplicas == 0 {
		a.Policy = chatPolicy(chatRPSTarget)
	}
	out := profile.LengthDist{Mean: 200, SD: 150, Max: 512}
	return Scenario{
		Name: name, Description: desc, Seed: 1, Duration: d, Drain: true,
		Arrivals: Arrivals{Process: Poisson, Rate: rate},
		// The gateway refuses (429) past 48 requests on a replica, about
		// twice what one holds, so a burst's backlog stays bounded.
		ShedOutstanding: 48,
		PromptTokens:    profile.LengthDist{Mean: 500, SD: 300, Max: 1536}, OutputTokens: &out,
		Versions:  []Version{{Name: "v42", GPUs: replicas, Weight: 100, Profile: chat.WithDefaults()}},
		Autoscale: a,
	}
}

// dayShare is the diurnal shape of the seed fleet's load as a share of its
// peak at hour h of the day: a third at night, the peak in the afternoon
// (demo/backfill's weekday curve).
func dayShare(h float64) float64 {
	if h < 6 || h > 22 {
		return 0.35
	}
	return 0.35 + 0.65*math.Pow(math.Sin(math.Pi*(h-6)/16), 2)
}

// officeShare is the weekly scenario's weekday: a third of the peak at
// night, a sharp climb at 09:00 (to the peak within 15 minutes), the
// afternoon at the peak, an evening decline; weekends at 40 % all day.
func officeShare(t time.Time) float64 {
	if wd := t.Weekday(); wd == time.Saturday || wd == time.Sunday {
		return 0.4
	}
	h := float64(t.Hour()) + float64(t.Minute())/60 + float64(t.Second())/3600
	switch {
	case h < 9:
		return 0.3
	case h < 9.25:
		return 0.3 + 0.7*(h-9)/0.25
	case h < 17:
		return 1
	case h < 20:
		return 1 - 0.7*(h-17)/3
	}
	return 0.3
}

// curve samples share over a compressed day of d, every step.
func curve(d, step time.Duration, share func(h float64) float64) []LoadPoint {
	var pts []LoadPoint
	for t := time.Duration(0); t <= d; t += step {
		pts = append(pts, LoadPoint{At: t, Mult: share(24 * float64(t) / float64(d))})
	}
	return pts
}

// square alternates hi and lo every half period.
func square(d, half time.Duration, hi, lo float64) []LoadPoint {
	var pts []LoadPoint
	for t, up := time.Duration(0), true; t < d; t, up = t+half, !up {
		m := lo
		if up {
			m = hi
		}
		pts = append(pts, LoadPoint{At: t, Mult: m}, LoadPoint{At: t + half - time.Millisecond, Mult: m})
	}
	return pts
}

// WeeklyStart is the calendar day the weekly built-in simulates, a
// Wednesday; its history is the two weeks before.
var WeeklyStart = time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)

// weeklyHistory synthesises weeks of hourly request rates before start:
// each hour the mean of peak × officeShare over its minutes, times a
// deterministic wobble of ±5 %.
func weeklyHistory(start time.Time, weeks int, peak float64, seed uint64) autoscale.History {
	r := newRand(seed, streamNoise+1)
	var h autoscale.History
	for t := start.Add(-time.Duration(weeks) * autoscale.Week); t.Before(start); t = t.Add(time.Hour) {
		sum := 0.0
		for m := range 60 {
			sum += officeShare(t.Add(time.Duration(m)*time.Minute + 30*time.Second))
		}
		h = append(h, autoscale.HourRate{Hour: t, RPS: peak * sum / 60 * (1 + 0.1*(r.Float64()-0.5))})
	}
	return h
}

func autoscaleBuiltins() []Scenario {
	const peak = 1000.0 / AutoscaleScale
	day := 2 * time.Hour
	weeklyDay := time.Hour
	weekly := chatPolicy(chatRPSTarget)
	weekly.Predictive = autoscale.PredictiveOn
	return []Scenario{
		chatScenario("seed-fleet-autoscale",
			"The seed fleet's diurnal day (trough to peak, compressed into 2 hours) scaled 1/10: 100 req/s at the peak on about 22 GPUs (210 to 230 at full scale).",
			peak, 8, day, &Autoscale{Policy: dayPolicy(), Load: curve(day, 30*time.Second, dayShare)}),
		chatScenario("burst", "A 1x to 5x step at 5 minutes: 10 to 50 req/s.",
			10, 3, 12*time.Minute, &Autoscale{
				Load:  []LoadPoint{{At: 5 * time.Minute, Mult: 1}, {At: 5*time.Minute + time.Millisecond, Mult: 5}},
				Steps: []time.Duration{5 * time.Minute}}),
		chatScenario("noise", "A constant 40 req/s moving ±20 % every 30 s.",
			40, 10, 30*time.Minute, &Autoscale{Noise: 0.2, NoisePeriod: 30 * time.Second}),
		chatScenario("noise-inside", "A constant 40 req/s moving ±4 % every 30 s, inside the 10 % tolerance.",
			40, 10, 20*time.Minute, &Autoscale{Noise: 0.04, NoisePeriod: 30 * time.Second}),
		prefillHeavy(),
		chatScenario("thrash", "Seed walkthrough 3: a square wave, 40 req/s for 30 s, 4 req/s for 30 s.",
			40, 10, 30*time.Minute, &Autoscale{Load: square(30*time.Minute, 30*time.Second, 1, 0.1)}),
		chatScenario("weekly",
			"Two weeks of hourly history, then a weekday (compressed into 1 hour, 40 req/s at the peak, sharp 09:00 climb) with predictive on against off.",
			40, 4, weeklyDay, &Autoscale{Policy: weekly, ComparePredictive: true,
				Load:    curve(weeklyDay, 5*time.Second, func(h float64) float64 { return officeShare(WeeklyStart.Add(time.Duration(h * float64(time.Hour)))) }),
				History: weeklyHistory(WeeklyStart, 2, 40, 1),
				Clock:   Clock{Start: WeeklyStart, Compression: 24}}),
	}
}

// prefillHeavy is llm-d#662: long prompts and short answers on a replica
// that prefills at most 1,024 tokens a step (chunked prefill), so the
// replica is busy prefilling while its KV cache holds a few sequences: under
// overload the queue grows and KV use stays near 0.3. The policy is the
// seed's LLM one (in flight 200, KV 0.85, tokens/s 2,000) scaled on the
// prefill work asked of a replica: prompt tokens received per second,
// 12,000 per replica (about 75 % of the 16,400 a replica of this mix
// prefills). Its queue target is 16 requests, about a second of a
// replica's prefill work here, in place of 4: four 1,000-token prompts are
// a quarter of a second of work, so a queue of 4 is no overload, and as a
// backlog the queue asked for twice the replicas the load needs. No
// requests/s target; the replicas' rates are over 10 s rather than 30 s,
// so that the prompt tokens/s of a step is seen within 10 s (no requests/s
// target here to be inflated on a new replica). The SLA's TPOT ceiling is 300 ms: a 4-token answer's
// steps are mostly other requests' prefills.
func prefillHeavy() Scenario {
	p := chatPolicy(0)
	p.MinReplicas = 2
	for i := range p.Signals {
		if p.Signals[i].Signal == autoscale.QueueDepth {
			p.Signals[i].Target = 16
		}
	}
	p.Signals = append(p.Signals, autoscale.Target{Signal: autoscale.PromptTokensPerSecond, Target: 12000})
	sc := chatScenario("prefill-heavy",
		"Long prompts (1,000 tokens), 4-token answers, chunked prefill, 8 to 32 req/s at 2 minutes: the queue grows while KV use stays near 0.3 (llm-d#662).",
		8, 2, 8*time.Minute, &Autoscale{Policy: p, SLA: SLA{TTFTP99: 2 * time.Second, TPOTP99: 300 * time.Millisecond},
			Load:  []LoadPoint{{At: 2 * time.Minute, Mult: 1}, {At: 2*time.Minute + time.Millisecond, Mult: 4}},
			Steps: []time.Duration{2 * time.Minute}})
	out := profile.LengthDist{Mean: 4}
	sc.PromptTokens = profile.LengthDist{Mean: 1000, SD: 100, Max: 1024}
	sc.OutputTokens = &out
	prof := chat
	prof.MaxPrefillTokens = 1024
	sc.Versions[0].Profile = prof.WithDefaults()
	return sc
}
