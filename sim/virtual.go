package sim

import (
	"cmp"
	"slices"
	"time"

	"modelplane/engine"
)

// Report is what a virtual-time run measured, all in model time.
type Report struct {
	// Requests were offered; Rejected of them failed Submit; Completed
	// produced their last token.
	Requests  int
	Rejected  int
	Completed int
	// Duration is the model time from 0 to the end of the last step.
	Duration time.Duration
	// Steps counts the forward passes run.
	Steps int
	// Token totals of completed requests: prompt tokens, those served from
	// shared prefix pages, those prefilled (re-prefills included),
	// completion tokens, and tokens streamed (TokenEvents seen).
	PromptTokens     int64
	CachedTokens     int64
	PrefillTokens    int64
	CompletionTokens int64
	StreamedTokens   int64
	// StreamErrors counts token events out of order: an index repeated or
	// skipped. Always 0 unless the scheduler has a bug.
	StreamErrors int
	// TokensPerSecond is completion tokens over Duration; RequestsPerSecond
	// completed requests over Duration.
	TokensPerSecond   float64
	RequestsPerSecond float64
	// TTFT and TPOT over the completed requests (see engine.Finished).
	TTFT engine.Percentiles
	TPOT engine.Percentiles
	// MeanBatch is the time-weighted mean of sequences per step over
	// Duration (idle time counts as 0), MaxBatch the largest; likewise for
	// the fraction of KV pages held after a step.
	MeanBatch         float64
	MaxBatch          int
	MeanKVUtilization float64
	MaxKVUtilization  float64
	// Preemptions for a higher-priority request, and for growth under
	// engine.ReserveStep; GrowFailures as in engine.Stats (always 0 unless a bug).
	PriorityPreemptions int
	GrowthPreemptions   int
	GrowFailures        int
	// Stalled counts requests left waiting when nothing could run and
	// nothing more would arrive. Always 0 unless the scheduler has a bug.
	Stalled int
	// Results are the completed requests, in the order they finished.
	Results []Result
}

// Result is one completed request of a virtual run.
type Result struct {
	ID               string
	Tenant           string
	Priority         int
	Reason           engine.FinishReason
	Arrival          time.Duration
	Done             time.Duration
	TTFT             time.Duration
	TPOT             time.Duration
	PromptTokens     int
	CachedTokens     int
	PrefillTokens    int
	CompletionTokens int
	// Streamed counts the TokenEvents the run saw for the request.
	Streamed    int
	Preemptions int
}

// RunVirtual runs arrivals through s in virtual time and reports what
// happened. It submits each request at its Arrival, steps the scheduler
// back to back while it has work (each step starting when the previous one
// ended), jumps the clock to the next arrival when it has none, and stops
// when every request has finished. s should be fresh; the run is
// deterministic for a given scheduler seed and arrivals.
func RunVirtual(s *engine.Scheduler, arrivals []engine.Request) Report {
	reqs := slices.Clone(arrivals)
	slices.SortStableFunc(reqs, func(a, b engine.Request) int { return cmp.Compare(a.Arrival, b.Arrival) })
	rep := Report{Requests: len(reqs)}
	streamed := map[string]int{}
	kvTotal := float64(s.KVPages())
	var ttft, tpot []time.Duration
	var batchTime, kvTime float64
	var now time.Duration
	i := 0
	for {
		for i < len(reqs) && reqs[i].Arrival <= now {
			if err := s.Submit(reqs[i]); err != nil {
				rep.Rejected++
			}
			i++
		}
		res := s.Step(now)
		if res.Duration == 0 {
			if len(res.Preempted) > 0 {
				continue // evictions made room; the next step admits
			}
			if i == len(reqs) {
				rep.Stalled = res.Waiting
				break // nothing runs and nothing more arrives
			}
			now = max(now, reqs[i].Arrival)
			continue
		}
		now = res.End()
		rep.Steps++
		d := res.Duration.Seconds()
		kv := float64(res.KVPagesUsed) / kvTotal
		batchTime += float64(res.Batch) * d
		kvTime += kv * d
		rep.MaxBatch = max(rep.MaxBatch, res.Batch)
		rep.MaxKVUtilization = max(rep.MaxKVUtilization, kv)
		for _, ev := range res.Events {
			if ev.Index != streamed[ev.ID] {
				rep.StreamErrors++
			}
			streamed[ev.ID]++
		}
		for _, f := range res.Finished {
			n := streamed[f.ID]
			delete(streamed, f.ID)
			r := Result{
				ID: f.ID, Tenant: f.Tenant, Priority: f.Priority, Reason: f.Reason,
				Arrival: f.Arrival, Done: f.Done, TTFT: f.TTFT(), TPOT: f.TPOT(),
				PromptTokens: f.PromptTokens, CachedTokens: f.CachedTokens, PrefillTokens: f.PrefillTokens,
				CompletionTokens: f.CompletionTokens, Streamed: n, Preemptions: f.Preemptions,
			}
			rep.Results = append(rep.Results, r)
			rep.Completed++
			rep.PromptTokens += int64(r.PromptTokens)
			rep.CachedTokens += int64(r.CachedTokens)
			rep.PrefillTokens += int64(r.PrefillTokens)
			rep.CompletionTokens += int64(r.CompletionTokens)
			rep.StreamedTokens += int64(n)
			ttft = append(ttft, r.TTFT)
			if r.CompletionTokens > 1 {
				tpot = append(tpot, r.TPOT)
			}
		}
	}
	st := s.Stats(now)
	rep.PriorityPreemptions = int(st.PriorityPreemptions)
	rep.GrowthPreemptions = int(st.GrowthPreemptions)
	rep.GrowFailures = int(st.GrowFailures)
	rep.Duration = now
	if secs := now.Seconds(); secs > 0 {
		rep.TokensPerSecond = float64(rep.CompletionTokens) / secs
		rep.RequestsPerSecond = float64(rep.Completed) / secs
		rep.MeanBatch = batchTime / secs
		rep.MeanKVUtilization = kvTime / secs
	}
	rep.TTFT, rep.TPOT = engine.PercentilesOf(ttft), engine.PercentilesOf(tpot)
	return rep
}
