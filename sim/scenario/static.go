package scenario

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"modelplane/engine"
	"modelplane/sim/profile"
)

// RunStatic serves requests with static batching, the baseline continuous
// batching is measured against, on one simulated GPU with the step-time
// model of engine.Scheduler:
//
//   - when the GPU is free, a batch takes the requests that have arrived,
//     in arrival order, up to maxBatch and up to what the KV cache holds
//     (below); if none has arrived, the GPU waits for the next one. It never
//     waits to fill a batch, which is static batching at its best: at low
//     load it runs small batches at once, under load its batches are full;
//   - the batch's first step prefills every prompt and makes each request's
//     first token: decode_base_ms + prefill_ms_per_token × prompt tokens,
//     as an engine.Scheduler step of only new sequences costs;
//   - then the batch decodes one token per step until its longest
//     completion is done. Every step costs decode_base_ms +
//     decode_ms_per_seq × the batch size: a sequence that has finished
//     keeps its slot in the batch's tensors until the batch ends. That idle
//     slot, and the arrivals that wait for the whole batch, are what static
//     batching wastes;
//   - the batch's tensors are padded to its longest prompt plus its longest
//     completion, for every sequence, and must fit the KV cache:
//     size × ceil((longest prompt + longest completion) / page_tokens) <=
//     pages. A request too large to run alone is rejected.
//
// Each request's tokens are streamed as they are made, so its latency ends
// at its own last token, not the batch's (again the generous reading).
// Requests must fix their completion length (OutputTokens, else
// MaxTokens): static batching does not change what the model generates.
func RunStatic(p profile.Profile, maxBatch int, reqs []engine.Request) (StaticReport, error) {
	p = p.WithDefaults()
	if err := p.Validate(); err != nil {
		return StaticReport{}, err
	}
	if !p.IsLLM() {
		return StaticReport{}, errors.New("static batching needs an LLM profile")
	}
	if maxBatch < 1 {
		return StaticReport{}, fmt.Errorf("batch size %d; want at least 1", maxBatch)
	}
	type job struct {
		arrival     time.Duration
		prompt, out int
	}
	jobs := make([]job, 0, len(reqs))
	for _, r := range reqs {
		out := r.OutputTokens
		if r.MaxTokens > 0 && (out == 0 || out > r.MaxTokens) {
			out = r.MaxTokens
		}
		if out < 1 || r.PromptTokens < 1 {
			return StaticReport{}, fmt.Errorf("request %q: want a prompt and a fixed completion length", r.ID)
		}
		jobs = append(jobs, job{r.Arrival, r.PromptTokens, out})
	}
	slices.SortStableFunc(jobs, func(a, b job) int { return cmp.Compare(a.arrival, b.arrival) })

	pt, pages := p.PageTokens, p.Pages()
	stepDur := func(ms float64) time.Duration {
		return max(1, time.Duration(math.Round(ms*float64(time.Millisecond))))
	}
	rep := StaticReport{Requests: len(jobs), MaxBatch: maxBatch}
	var e2e, ttft []time.Duration
	var free time.Duration // when the GPU is next free
	var batched int
	for i := 0; i < len(jobs); {
		start := max(free, jobs[i].arrival)
		// Take the arrived requests while they fit.
		j, longPrompt, longOut, promptSum := i, 0, 0, 0
		for j < len(jobs) && j-i < maxBatch && jobs[j].arrival <= start {
			lp, lo := max(longPrompt, jobs[j].prompt), max(longOut, jobs[j].out)
			if (j-i+1)*((lp+lo+pt-1)/pt) > pages {
				break
			}
			longPrompt, longOut, promptSum = lp, lo, promptSum+jobs[j].prompt
			j++
		}
		if j == i { // too large to run even alone
			rep.Rejected++
			i++
			continue
		}
		n := j - i
		first := start + stepDur(p.DecodeBaseMs+p.PrefillMsPerToken*float64(promptSum))
		decode := stepDur(p.DecodeBaseMs + p.DecodeMsPerSeq*float64(n))
		for _, q := range jobs[i:j] {
			done := first + time.Duration(q.out-1)*decode
			ttft = append(ttft, first-q.arrival)
			e2e = append(e2e, done-q.arrival)
			rep.CompletionTokens += int64(q.out)
		}
		free = first + time.Duration(longOut-1)*decode
		rep.Batches++
		batched += n
		i = j
	}
	rep.Completed = len(e2e)
	rep.Duration = free
	if rep.Batches > 0 {
		rep.MeanBatch = float64(batched) / float64(rep.Batches)
	}
	if s := free.Seconds(); s > 0 {
		rep.RequestsPerSecond = float64(rep.Completed) / s
		rep.TokensPerSecond = float64(rep.CompletionTokens) / s
	}
	rep.TTFT, rep.E2E = engine.PercentilesOf(ttft), engine.PercentilesOf(e2e)
	return rep, nil
}

// StaticReport is what RunStatic measured, in model time.
type StaticReport struct {
	Requests, Rejected, Completed int
	// MaxBatch is the batch size asked for; MeanBatch the mean run.
	MaxBatch  int
	Batches   int
	MeanBatch float64
	// Duration is from 0 to the end of the last batch.
	Duration          time.Duration
	CompletionTokens  int64
	RequestsPerSecond float64
	TokensPerSecond   float64
	TTFT, E2E         engine.Percentiles
}
