package scenario

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"modelplane/engine"
)

// Report is what a fleet run measured. Times are simulated unless named
// wall; latencies are in milliseconds.
type Report struct {
	Scenario string  `json:"scenario"`
	Seed     uint64  `json:"seed"`
	Process  Process `json:"arrival_process"`
	// Rate is the offered load in requests per second.
	Rate float64 `json:"arrival_rate"`
	GPUs int     `json:"gpus"`
	// SimSeconds is the simulated time covered: the duration, or longer
	// when the scenario drains. MeasuredSeconds is the part after warmup.
	SimSeconds      float64 `json:"sim_seconds"`
	MeasuredSeconds float64 `json:"measured_seconds"`
	// WallSeconds is the real time the run took and SpeedUp is
	// SimSeconds / WallSeconds; both 0 when Options.Now is not set.
	WallSeconds float64 `json:"wall_seconds"`
	SpeedUp     float64 `json:"speedup_vs_realtime"`
	// Requests arrived; Steps is the number of forward passes simulated and
	// Tokens the tokens they streamed, over the whole fleet.
	Requests int   `json:"requests"`
	Steps    int64 `json:"steps"`
	Tokens   int64 `json:"tokens"`
	// MeanPromptTokens and MeanOutputTokens are the means of the lengths
	// drawn (the output mean is 0 when the profiles draw them).
	MeanPromptTokens float64         `json:"mean_prompt_tokens"`
	MeanOutputTokens float64         `json:"mean_output_tokens"`
	Versions         []VersionReport `json:"versions"`
	Tenants          []TenantReport  `json:"tenants,omitempty"`
	// Rollout is what the scenario's rollout did; nil without one.
	Rollout *RolloutReport `json:"rollout,omitempty"`
	// Autoscale is what the scenario's autoscaling did; nil without it.
	Autoscale *AutoscaleReport `json:"autoscale,omitempty"`
}

// VersionReport is one version's part of a Report.
type VersionReport struct {
	Name string `json:"name"`
	// Kind is "llm" (a scheduler per GPU) or "classic" (a classifier or
	// regressor answering after a drawn latency; see classic.go).
	Kind string `json:"kind"`
	GPUs int    `json:"gpus"`
	// Share is the version's routing weight over the sum of weights.
	Share float64 `json:"traffic_share"`
	// KVPages is one GPU's KV cache in pages of PageTokens tokens.
	KVPages    int `json:"kv_pages_per_gpu"`
	PageTokens int `json:"page_tokens"`
	// Requests were routed to the version. Of them, Shed were refused by
	// the router (shed_outstanding), Rejected by the scheduler (too large
	// for the context window or the cache), Completed finished, and
	// Unfinished were still queued or running when the run stopped.
	Requests  int `json:"requests"`
	Shed      int `json:"shed"`
	Rejected  int `json:"rejected"`
	Completed int `json:"completed"`
	// Errors are a classic version's requests failed at its error_rate.
	Errors     int `json:"errors"`
	Unfinished int `json:"unfinished"`
	// CompletedPerSecond and TokensPerSecond are completions and streamed
	// tokens per second of measured time, over all the version's GPUs.
	CompletedPerSecond float64 `json:"completed_per_second"`
	TokensPerSecond    float64 `json:"tokens_per_second"`
	// TTFT, TPOT (see engine.Finished) and end-to-end latency (arrival to last
	// token) of the requests that arrived after warmup and completed.
	TTFT Latency `json:"ttft_ms"`
	TPOT Latency `json:"tpot_ms"`
	E2E  Latency `json:"e2e_ms"`
	// MeanBatch is the time-weighted mean of sequences in a step per GPU
	// over the measured time (idle time counts 0); MaxBatch the most in one
	// step. KVUtilization is the time-weighted mean of the pages held over
	// the pages of the cache, MaxKVUtilization the highest after a step.
	MeanBatch        float64 `json:"mean_batch_per_gpu"`
	MaxBatch         int     `json:"max_batch"`
	KVUtilization    float64 `json:"kv_utilization"`
	MaxKVUtilization float64 `json:"max_kv_utilization"`
	// KVWastePagedPct is the share of allocated KV token slots (pages ×
	// page tokens) that hold no token, time-weighted over the measured
	// steps: the last, partly filled page of each sequence.
	KVWastePagedPct float64 `json:"kv_waste_paged_pct"`
	// Contiguous compares with engines that reserve a fixed max length
	// per sequence, one entry per contiguous_max_len.
	Contiguous []Contiguous `json:"contiguous"`
	// Preemptions counts sequences evicted back to the queue (priority and
	// growth); GrowFailures is engine.Stats.GrowFailures (0 unless a bug).
	Preemptions  int `json:"preemptions"`
	GrowFailures int `json:"grow_failures"`
	// Claims are the scenario's published figures for the version.
	Claims *ClaimsReport `json:"claims,omitempty"`
	// Output is a classic version's outputs (score or value) over every
	// answer of the run; nil for an LLM version.
	Output *OutputStats `json:"output,omitempty"`
}

// The kinds of version (VersionReport.Kind).
const (
	KindLLM     = "llm"
	KindClassic = "classic"
)

// Contiguous is the comparison with a contiguous max-length reservation.
type Contiguous struct {
	MaxLen int `json:"max_len"`
	// SequencesPerGPU is how many sequences fit one GPU when each reserves
	// MaxLen tokens: floor(pages / ceil(max_len / page_tokens)).
	SequencesPerGPU int `json:"sequences_per_gpu"`
	// WastePct is the share of reserved slots holding no token had the
	// run's sequences each reserved max(MaxLen, their length),
	// time-weighted like KVWastePagedPct.
	WastePct float64 `json:"waste_pct"`
}

// ClaimsReport is Claims, for JSON.
type ClaimsReport struct {
	PagedSequencesPerGPU      float64 `json:"paged_sequences_per_gpu,omitempty"`
	ContiguousSequencesPerGPU float64 `json:"contiguous_sequences_per_gpu,omitempty"`
	TPOTP99Ms                 float64 `json:"tpot_p99_ms,omitempty"`
}

// TenantReport is one tenant's requests over the whole fleet.
type TenantReport struct {
	Name      string  `json:"name"`
	Requests  int     `json:"requests"`
	Completed int     `json:"completed"`
	TTFT      Latency `json:"ttft_ms"`
	TPOT      Latency `json:"tpot_ms"`
}

// Latency is a latency distribution in milliseconds, by nearest rank.
type Latency struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

func latencyOf(samples []time.Duration) Latency {
	p := engine.PercentilesOf(samples)
	return Latency{N: p.N, P50: msOf(p.P50), P90: msOf(p.P90), P99: msOf(p.P99), Max: msOf(p.Max)}
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Version returns the report of the named version, and false when there is
// none.
func (r Report) Version(name string) (VersionReport, bool) {
	for _, v := range r.Versions {
		if v.Name == name {
			return v, true
		}
	}
	return VersionReport{}, false
}

// WriteText prints the report as aligned tables for a terminal.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	name := r.Scenario
	if name == "" {
		name = "(unnamed)"
	}
	fmt.Fprintf(&b, "scenario %s (seed %d): %s arrivals at %g req/s on %d GPUs\n", name, r.Seed, r.Process, r.Rate, r.GPUs)
	fmt.Fprintf(&b, "%d requests", r.Requests)
	if r.MeanPromptTokens > 0 {
		fmt.Fprintf(&b, ", mean prompt %.0f tokens", r.MeanPromptTokens)
	}
	if r.MeanOutputTokens > 0 {
		fmt.Fprintf(&b, ", mean output %.0f tokens", r.MeanOutputTokens)
	}
	fmt.Fprintf(&b, "; simulated %.1f s (%.1f s measured), %d steps, %d tokens", r.SimSeconds, r.MeasuredSeconds, r.Steps, r.Tokens)
	if r.WallSeconds > 0 {
		fmt.Fprintf(&b, " in %.2f s wall: %.1fx real time", r.WallSeconds, r.SpeedUp)
	}
	b.WriteString("\n\n")

	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "version\tGPUs\tshare\trequests\tcompleted\tunfinished\tshed+rejected\tcompleted/s\ttokens/s\tbatch mean/max\tKV util\tpreempt\t")
	for _, v := range r.Versions {
		fmt.Fprintf(tw, "%s\t%d\t%.1f%%\t%d\t%d\t%d\t%d\t%.1f\t%.0f\t%.1f/%d\t%.1f%%\t%d\t\n",
			v.Name, v.GPUs, 100*v.Share, v.Requests, v.Completed, v.Unfinished, v.Shed+v.Rejected,
			v.CompletedPerSecond, v.TokensPerSecond, v.MeanBatch, v.MaxBatch, 100*v.KVUtilization, v.Preemptions)
	}
	tw.Flush()
	b.WriteString("\nlatency, ms (requests that arrived after warmup and completed)\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "version\tTTFT p50\tp90\tp99\tTPOT p50\tp90\tp99\tseed TPOT p99\tE2E p50\tp99\t")
	for _, v := range r.Versions {
		claim := "-"
		if v.Claims != nil && v.Claims.TPOTP99Ms > 0 {
			claim = fmt.Sprintf("~%g", v.Claims.TPOTP99Ms)
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%.2f\t%.2f\t%.2f\t%s\t%.0f\t%.0f\t\n", v.Name,
			v.TTFT.P50, v.TTFT.P90, v.TTFT.P99, v.TPOT.P50, v.TPOT.P90, v.TPOT.P99, claim, v.E2E.P50, v.E2E.P99)
	}
	tw.Flush()

	llm, classic := -1, false
	for i, v := range r.Versions {
		if v.Kind == KindClassic {
			classic = true
			continue
		}
		if llm < 0 {
			llm = i
		}
	}
	if classic {
		b.WriteString("\nclassic versions: errors and outputs (score or value) over every answer\n")
		tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "version\terrors\tlatency p50\tp99\toutputs\tmean\tsd\t")
		for _, v := range r.Versions {
			if o := v.Output; o != nil {
				fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%d\t%.3f\t%.3f\t\n", v.Name, v.Errors, v.E2E.P50, v.E2E.P99, o.N, o.Mean, o.SD)
			}
		}
		tw.Flush()
	}
	if llm < 0 {
		if r.Rollout != nil {
			r.Rollout.writeText(&b)
		}
		_, err := io.WriteString(w, b.String())
		return err
	}

	b.WriteString("\nKV cache per GPU: concurrent sequences and waste, paged vs contiguous max-length reservation\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "version\tpages\tpaged max\tpaged mean\tpaged waste"
	for _, c := range r.Versions[llm].Contiguous {
		head += fmt.Sprintf("\tcontig@%d seqs\twaste", c.MaxLen)
	}
	fmt.Fprintln(tw, head+"\tseed claims (paged / contiguous)\t")
	for _, v := range r.Versions {
		if v.Kind == KindClassic {
			continue
		}
		line := fmt.Sprintf("%s\t%d×%d\t%d\t%.1f\t%.1f%%", v.Name, v.KVPages, v.PageTokens, v.MaxBatch, v.MeanBatch, v.KVWastePagedPct)
		for _, c := range v.Contiguous {
			line += fmt.Sprintf("\t%d\t%.1f%%", c.SequencesPerGPU, c.WastePct)
		}
		claim := "-"
		if c := v.Claims; c != nil && (c.PagedSequencesPerGPU > 0 || c.ContiguousSequencesPerGPU > 0) {
			claim = fmt.Sprintf("~%g / ~%g", c.PagedSequencesPerGPU, c.ContiguousSequencesPerGPU)
		}
		fmt.Fprintln(tw, line+"\t"+claim+"\t")
	}
	tw.Flush()

	if len(r.Tenants) > 0 {
		b.WriteString("\ntenants\n")
		tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "tenant\trequests\tcompleted\tTTFT p50\tp99\tTPOT p50\tp99\t")
		for _, t := range r.Tenants {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%.1f\t%.2f\t%.2f\t\n", t.Name, t.Requests, t.Completed, t.TTFT.P50, t.TTFT.P99, t.TPOT.P50, t.TPOT.P99)
		}
		tw.Flush()
	}
	if r.Rollout != nil {
		r.Rollout.writeText(&b)
	}
	if r.Autoscale != nil {
		r.Autoscale.writeText(&b)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (ro *RolloutReport) writeText(b *strings.Builder) {
	fmt.Fprintf(b, "\nrollout %s over %s: %s at step %d, %g%% (evaluation every %gs over %gs; %d evaluations)\n",
		ro.Candidate, ro.Incumbent, ro.State, ro.Step, ro.WeightPct, ro.IntervalSeconds, ro.WindowSeconds, ro.Evaluations)
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	classic := !ro.LLM
	if classic {
		fmt.Fprintln(tw, "t (s)\tstep\tweight\tdecision\tcandidate requests/p99 latency\tincumbent requests/p99 latency\treason")
	} else {
		fmt.Fprintln(tw, "t (s)\tstep\tweight\tdecision\tcandidate streams/p99 TPOT\tincumbent streams/p99 TPOT\treason")
	}
	for _, e := range ro.Timeline {
		c, i := "-", "-"
		switch {
		case e.Candidate == nil:
		case classic:
			c = fmt.Sprintf("%d / %.2f ms", e.Candidate.Requests, e.Candidate.P99LatencyMS)
			i = fmt.Sprintf("%d / %.2f ms", e.Incumbent.Requests, e.Incumbent.P99LatencyMS)
		default:
			c = fmt.Sprintf("%d / %.2f ms", e.Candidate.Streams, e.Candidate.P99TPOTMS)
			i = fmt.Sprintf("%d / %.2f ms", e.Incumbent.Streams, e.Incumbent.P99TPOTMS)
		}
		fmt.Fprintf(tw, "%.0f\t%d\t%g%%\t%s\t%s\t%s\t%s\n", e.AtSeconds, e.Step, e.WeightPct, e.Decision, c, i, e.Reason)
	}
	tw.Flush()
	if rb := ro.Rollback; rb != nil {
		fmt.Fprintf(b, "rolled back at %.0f s (%.0f s after the start): %s\n", rb.AtSeconds, rb.AfterStartSeconds, rb.Verdict.Reason)
		fmt.Fprintf(b, "%s served %d requests before the rollback (%.1f req/s), %d still in flight then, the last done at %.1f s\n",
			ro.Candidate, rb.CandidateRequests, rb.CandidatePerSecond, rb.CandidateInFlight, rb.CandidateLastDoneSeconds)
		if d := rb.Drift; d != nil {
			fmt.Fprintf(b, "drift at the rollback: %s %.3f against %.3f (W1 %.4f / spread %.4f), samples %d and %d (at least %d); sampled means %.3f and %.3f, sds %.3f and %.3f (%s, %s)\n",
				d.Metric, d.Value, d.Threshold, d.W1, d.Spread, d.CandidateSamples, d.IncumbentSamples, d.MinSamples,
				d.CandidateMean, d.IncumbentMean, d.CandidateSD, d.IncumbentSD, ro.Candidate, ro.Incumbent)
		}
	}
	if rb := ro.Rollback; rb != nil && rb.IncumbentTPOTBefore.N+rb.IncumbentTPOTAfter.N > 0 {
		fmt.Fprintf(b, "%s TPOT p50/p90/p99: before %.2f/%.2f/%.2f ms (n %d), after %.2f/%.2f/%.2f ms (n %d)\n", ro.Incumbent,
			rb.IncumbentTPOTBefore.P50, rb.IncumbentTPOTBefore.P90, rb.IncumbentTPOTBefore.P99, rb.IncumbentTPOTBefore.N,
			rb.IncumbentTPOTAfter.P50, rb.IncumbentTPOTAfter.P90, rb.IncumbentTPOTAfter.P99, rb.IncumbentTPOTAfter.N)
	}
	if n := ro.Naive; n != nil {
		fmt.Fprintf(b, "naive flip (%s at 100%% on %d GPUs, no judge): TPOT p50/p90/p99 %.2f/%.2f/%.2f ms for everyone",
			ro.Candidate, n.GPUs, n.TPOT.P50, n.TPOT.P90, n.TPOT.P99)
		if n.SLAP99TPOTMS > 0 {
			fmt.Fprintf(b, " (SLA p99 %g ms: over %v)", n.SLAP99TPOTMS, n.OverSLA)
		}
		b.WriteString("\n")
	}
	if n := ro.NoDriftGate; n != nil {
		fmt.Fprintf(b, "without the drift gate: %s at step %d, %g%% after %d evaluations", n.State, n.Step, n.WeightPct, n.Evaluations)
		if n.WaitingSinceSeconds != nil {
			fmt.Fprintf(b, " (waiting for approval since %.0f s)", *n.WaitingSinceSeconds)
		}
		fmt.Fprintf(b, "; %s served %d requests", ro.Candidate, n.CandidateRequests)
		if o := n.CandidateOutput; o != nil {
			fmt.Fprintf(b, ", outputs mean %.3f sd %.3f", o.Mean, o.SD)
		}
		if o := n.IncumbentOutput; o != nil {
			fmt.Fprintf(b, " (%s: mean %.3f sd %.3f)", ro.Incumbent, o.Mean, o.SD)
		}
		b.WriteString("\n")
	}
}
