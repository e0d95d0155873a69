// Package backfill makes a plausible past for the demo: a week of usage,
// request statistics and prediction samples of the demo endpoints, as the
// agents and gateways would have published them, so that a newcomer's first
// `modelplane dev` shows traffic charts, a drift reference and a chargeback
// report with data at once. It only builds rows (deterministically, from a
// seed and the period); package ingest stores them.
//
// The period is cut into days (Day): each day's rows are built and stored
// on their own, and every id names the backfill (IDPrefix), so a loader can
// tell which days are stored already and add only the missing ones.
package backfill

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"modelplane/busapi"
)

// IDPrefix starts every batch, statistics and sample id of the backfill.
const IDPrefix = "demo-backfill/"

// Gateway is the gateway name the backfilled statistics carry.
const Gateway = "demo-backfill"

// Window is the length of a backfilled statistics window; usage batches
// are an hour of one node.
const Window = 5 * time.Minute

// Endpoint is one demo endpoint and what served it.
type Endpoint struct {
	ID                         int64
	Name, Team, Model, Version string
	// Chat makes it an LLM endpoint: every request a streamed completion
	// with tokens, time to first token and time per output token.
	Chat bool
	// PeakRPS is the request rate at the busiest hour of a weekday; nights
	// and weekends are quieter.
	PeakRPS float64
	// LatencyMS is the median latency of a prediction (of the first token,
	// for a chat endpoint); TPOTMS the median time per output token.
	LatencyMS, TPOTMS float64
	// SamplesPerHour is how many sampled predictions each hour has (the
	// gateway samples a share of requests; the backfill keeps it moderate).
	// Zero samples nothing.
	SamplesPerHour int
	// FeatureNames and Sample make a sampled prediction's instance: Sample
	// draws the features, parallel to FeatureNames, and the model's score
	// and label for them.
	FeatureNames []string
	Sample       func(r *rand.Rand) busapi.SampleInstance
	Replicas     []Replica
}

// Replica is one replica metered every second of the period.
type Replica struct {
	Name, Node       string
	GPUType, Profile string
	// Slots are the GPU (and slice) or, on a CPU node (GPUType
	// busapi.CPUType), the cores it holds: one usage record per slot.
	Slots    []busapi.Slot
	MemoryMB int
}

// Plan is what to backfill: the endpoints over [To − Days·24h, To).
type Plan struct {
	To        time.Time
	Days      int
	Seed      uint64
	Endpoints []Endpoint
}

// Day is the start of day d (0 is the oldest) of the plan.
func (p Plan) Day(d int) time.Time {
	return p.To.Add(-time.Duration(p.Days-d) * 24 * time.Hour)
}

// rng is the deterministic generator of one day and one kind of row.
func (p Plan) rng(d int, kind uint64) *rand.Rand {
	return rand.New(rand.NewPCG(p.Seed^uint64(p.Day(d).Unix()), kind))
}

// load is the share of the peak rate at t: a day curve peaking in the
// afternoon (UTC), at a third of the peak at night, and weekends at 60 %.
func load(t time.Time) float64 {
	h := float64(t.Hour()) + float64(t.Minute())/60
	day := 0.35 + 0.65*math.Pow(math.Max(0, math.Sin(math.Pi*(h-6)/16)), 2)
	if h < 6 || h > 22 {
		day = 0.35
	}
	if wd := t.Weekday(); wd == time.Saturday || wd == time.Sunday {
		day *= 0.6
	}
	return day
}

// poisson draws a count with mean m (normal above 50).
func poisson(r *rand.Rand, m float64) uint64 {
	if m <= 0 {
		return 0
	}
	if m > 50 {
		return uint64(math.Max(0, math.Round(m+r.NormFloat64()*math.Sqrt(m))))
	}
	l, k, p := math.Exp(-m), uint64(0), 1.0
	for {
		p *= r.Float64()
		if p <= l {
			return k
		}
		k++
	}
}

// Usage is day d's usage: one batch per node and hour, one record per
// replica slot and second, its requests the replica's share of the load.
func (p Plan) Usage(d int) []busapi.UsageBatch {
	r := p.rng(d, 1)
	start := p.Day(d)
	type key struct {
		node string
		hour int64
	}
	var order []key
	batches := map[key]*busapi.UsageBatch{}
	for _, e := range p.Endpoints {
		for _, rep := range e.Replicas {
			for s := range int64(24 * 3600) {
				t := start.Unix() + s
				k := key{rep.Node, t - t%3600}
				b := batches[k]
				if b == nil {
					b = &busapi.UsageBatch{ID: fmt.Sprintf("%s%s/%d", IDPrefix, k.node, k.hour), Node: k.node}
					batches[k] = b
					order = append(order, k)
				}
				share := load(time.Unix(t, 0).UTC())
				rps := e.PeakRPS * share / float64(len(e.Replicas))
				util := math.Min(95, 8+70*share+2*r.NormFloat64())
				for i, sl := range rep.Slots {
					rec := busapi.Usage{Time: t, Node: rep.Node, GPU: sl.GPU, Slice: sl.Slice, GPUType: rep.GPUType, Profile: rep.Profile,
						Team: e.Team, Endpoint: e.Name, Model: e.Model, Version: e.Version, Replica: rep.Name,
						UtilPct: math.Max(1, util), MemoryMB: int64(rep.MemoryMB)}
					if i == 0 {
						rec.Requests = int64(poisson(r, rps))
					}
					b.Records = append(b.Records, rec)
				}
			}
		}
	}
	out := make([]busapi.UsageBatch, 0, len(order))
	for _, k := range order {
		out = append(out, *batches[k])
	}
	return out
}

// bucket is the index of the latency bucket of ms.
func bucket(bounds []uint64, ms float64) int {
	us := uint64(math.Max(0, ms*1000))
	for i, b := range bounds {
		if us <= b {
			return i
		}
	}
	return len(bounds)
}

// lognormal draws around median with a spread of sigma (log scale).
func lognormal(r *rand.Rand, median, sigma float64) float64 {
	return median * math.Exp(sigma*r.NormFloat64())
}

// maxDraws bounds the latencies drawn per window; a busier window's
// histogram is the drawn one scaled to its count.
const maxDraws = 400

// Stats is day d's request statistics: one row per endpoint and window.
func (p Plan) Stats(d int) []busapi.ReqStats {
	r := p.rng(d, 2)
	bounds := busapi.LatencyBoundsUS()
	start := p.Day(d)
	var out []busapi.ReqStats
	for _, e := range p.Endpoints {
		for w := start; w.Before(start.Add(24 * time.Hour)); w = w.Add(Window) {
			n := poisson(r, e.PeakRPS*load(w)*Window.Seconds())
			s := busapi.ReqStats{ID: busapi.ReqStatsID(Gateway, e.Name, e.Version, w.UnixMilli()),
				WindowStart: w.UnixMilli(), WindowEnd: w.Add(Window).UnixMilli(), Gateway: Gateway,
				Endpoint: e.Name, Team: e.Team, Version: e.Version, Count: n, EndpointID: e.ID}
			draws := min(n, maxDraws)
			scale := 1.0
			if draws > 0 {
				scale = float64(n) / float64(draws)
			}
			lat := make([]uint64, busapi.LatencyBuckets)
			var ttft, tpot []uint64
			if e.Chat {
				ttft, tpot = make([]uint64, busapi.LatencyBuckets), make([]uint64, busapi.LatencyBuckets)
			}
			var sum, ttftSum, tpotSum, tokens float64
			for range draws {
				first := lognormal(r, e.LatencyMS, 0.35)
				total := first
				if e.Chat {
					toks := 40 + r.IntN(200)
					per := lognormal(r, e.TPOTMS, 0.15)
					total += per * float64(toks-1)
					ttft[bucket(bounds, first)]++
					tpot[bucket(bounds, per)]++
					ttftSum += first
					tpotSum += per
					tokens += float64(toks)
				}
				lat[bucket(bounds, total)]++
				sum += total
			}
			s.Latency = scaleTo(lat, n)
			s.LatencySumMS = sum * scale
			if e.Chat {
				s.Streams = n
				s.TTFT, s.TTFTSumMS = scaleTo(ttft, n), ttftSum*scale
				s.TPOT, s.TPOTSumMS = scaleTo(tpot, n), tpotSum*scale
				s.Tokens = uint64(math.Round(tokens * scale))
			}
			// A few upstream errors, as any week has.
			s.Errors.Upstream = poisson(r, float64(n)*0.0005)
			s.Errors.Client = poisson(r, float64(n)*0.002)
			out = append(out, s)
		}
	}
	return out
}

// scaleTo scales histogram h to sum to n, exactly: the rounding remainder
// goes to the fullest bucket.
func scaleTo(h []uint64, n uint64) []uint64 {
	var total uint64
	for _, c := range h {
		total += c
	}
	if total == 0 || total == n {
		return h
	}
	out := make([]uint64, len(h))
	var sum uint64
	top := 0
	for i, c := range h {
		out[i] = c * n / total
		sum += out[i]
		if h[i] > h[top] {
			top = i
		}
	}
	out[top] += n - sum
	return out
}

// Samples is day d's sampled predictions: SamplesPerHour an hour, more in
// busy hours, each one instance.
func (p Plan) Samples(d int) []busapi.PredictionSample {
	r := p.rng(d, 3)
	start := p.Day(d)
	var out []busapi.PredictionSample
	for _, e := range p.Endpoints {
		if e.SamplesPerHour <= 0 || e.Sample == nil {
			continue
		}
		for h := range 24 {
			hour := start.Add(time.Duration(h) * time.Hour)
			n := int(poisson(r, float64(e.SamplesPerHour)*load(hour)/0.7))
			for i := range n {
				t := hour.Add(time.Duration(r.Int64N(int64(time.Hour))))
				in := e.Sample(r)
				out = append(out, busapi.PredictionSample{ID: fmt.Sprintf("%s%s/%d/%d", IDPrefix, e.Name, hour.Unix(), i),
					Time: t.UnixMilli(), Endpoint: e.Name, Team: e.Team, Version: e.Version, EndpointID: e.ID,
					LatencyMS: lognormal(r, e.LatencyMS, 0.35), FeatureNames: e.FeatureNames,
					Instances: []busapi.SampleInstance{in}})
			}
		}
	}
	return out
}
