package bench

import (
	"context"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"time"

	"modelplane/gguf"
	"modelplane/llm"
	"modelplane/runtime/llmserve"
)

// llmResult is `modelplane bench llm`: the built-in LLM engine on the
// demo GGUF, on one core.
type llmResult struct {
	ModelBytes int64 `json:"model_bytes"`
	GOMAXPROCS int   `json:"gomaxprocs"`

	TokensPerSecBatch1   float64 `json:"tokens_per_s_batch1"`
	TokensPerSecStreams  float64 `json:"tokens_per_s_16_streams"`
	TTFTMissP50Ms        float64 `json:"ttft_miss_p50_ms"`
	TTFTMissP99Ms        float64 `json:"ttft_miss_p99_ms"`
	TTFTHitP50Ms         float64 `json:"ttft_prefix_hit_p50_ms"`
	TTFTHitP99Ms         float64 `json:"ttft_prefix_hit_p99_ms"`
	PrefixHitRatio       float64 `json:"prefix_hit_over_miss_p50"`
	ContinuousTokensPerS float64 `json:"continuous_tokens_per_s"`
	StaticTokensPerS     float64 `json:"static_tokens_per_s"`
	ContinuousMedianMs   float64 `json:"continuous_median_latency_ms"`
	StaticMedianMs       float64 `json:"static_median_latency_ms"`
	ContinuousOverStatic float64 `json:"continuous_over_static"`
	KVWasteContinuous    float64 `json:"kv_waste_continuous"`
	KVWasteStatic        float64 `json:"kv_waste_static"`
	TargetsMet           bool    `json:"targets_met"`
}

const llmBatch = 16

func runLLM(ctx context.Context, cfg Config, out io.Writer) error {
	prev := goruntime.GOMAXPROCS(1)
	defer goruntime.GOMAXPROCS(prev)
	dir, err := os.MkdirTemp("", "bench-llm")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "demo.gguf")
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := llm.WriteDemo(f, gguf.F32); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	res := llmResult{ModelBytes: st.Size(), GOMAXPROCS: 1}
	m, _, err := llmserve.LoadModel(path, 2048)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(1, 2))
	randPrompt := func(n int) []int {
		p := make([]int, n)
		for i := range p {
			p[i] = 32 + rng.IntN(95)
		}
		return p
	}

	// Tokens per second, batch 1 and 16 streams.
	eng, err := llmserve.New(m, llmserve.Config{MaxBatch: llmBatch})
	if err != nil {
		return err
	}
	defer eng.Stop()
	run := func(reqs []llmserve.Request) ([]time.Duration, int, time.Duration, error) {
		start := time.Now()
		chans := make([]<-chan llmserve.Event, len(reqs))
		for i, r := range reqs {
			_, ch, err := eng.Submit(r)
			if err != nil {
				return nil, 0, 0, err
			}
			chans[i] = ch
		}
		lat := make([]time.Duration, len(reqs))
		tokens := 0
		for i, ch := range chans {
			for ev := range ch {
				if ev.Err != nil {
					return nil, 0, 0, ev.Err
				}
				if !ev.Done {
					tokens++
				}
			}
			lat[i] = time.Since(start)
		}
		return lat, tokens, time.Since(start), nil
	}
	one := llmserve.Request{Prompt: randPrompt(32), MaxTokens: 256, IgnoreEOS: true}
	_, n, d, err := run([]llmserve.Request{one})
	if err != nil {
		return err
	}
	res.TokensPerSecBatch1 = float64(n) / d.Seconds()
	var streams []llmserve.Request
	for range llmBatch {
		streams = append(streams, llmserve.Request{Prompt: randPrompt(32), MaxTokens: 128, IgnoreEOS: true})
	}
	_, n, d, err = run(streams)
	if err != nil {
		return err
	}
	res.TokensPerSecStreams = float64(n) / d.Seconds()

	// TTFT with and without a shared 256-token prefix, beside a running
	// stream that holds the prefix.
	prefix := randPrompt(256)
	anchorID, anchor, err := eng.Submit(llmserve.Request{Prompt: append(slices.Clone(prefix), randPrompt(8)...), MaxTokens: 1500, IgnoreEOS: true, PrefixTokens: 256})
	if err != nil {
		return err
	}
	<-anchor
	ttft := func(p []int) (time.Duration, error) {
		start := time.Now()
		_, ch, err := eng.Submit(llmserve.Request{Prompt: p, MaxTokens: 1, PrefixTokens: 256})
		if err != nil {
			return 0, err
		}
		var first time.Duration
		for ev := range ch {
			if first == 0 {
				first = time.Since(start)
			}
			if ev.Err != nil {
				return 0, ev.Err
			}
		}
		return first, nil
	}
	var hits, misses []time.Duration
	for range 30 {
		h, err := ttft(append(slices.Clone(prefix), randPrompt(16)...))
		if err != nil {
			return err
		}
		mi, err := ttft(randPrompt(272))
		if err != nil {
			return err
		}
		hits, misses = append(hits, h), append(misses, mi)
	}
	eng.Cancel(anchorID)
	for range anchor {
	}
	res.TTFTHitP50Ms, res.TTFTHitP99Ms = percentile(hits, 0.5), percentile(hits, 0.99)
	res.TTFTMissP50Ms, res.TTFTMissP99Ms = percentile(misses, 0.5), percentile(misses, 0.99)
	res.PrefixHitRatio = round3(res.TTFTHitP50Ms / res.TTFTMissP50Ms)

	// Continuous against static batching on one workload of skewed
	// completion lengths, all arriving at once.
	var work []llmserve.Request
	for i := range 3 * llmBatch {
		n := 8 + (i*37)%40
		if i%llmBatch == 5 {
			n = 192
		}
		work = append(work, llmserve.Request{Prompt: randPrompt(24 + i%16), MaxTokens: n, IgnoreEOS: true})
	}
	fresh, err := llmserve.New(m, llmserve.Config{MaxBatch: llmBatch})
	if err != nil {
		return err
	}
	eng.Stop()
	eng = fresh
	lat, n, d, err := run(work)
	if err != nil {
		return err
	}
	res.ContinuousTokensPerS = float64(n) / d.Seconds()
	res.ContinuousMedianMs = percentile(lat, 0.5)
	res.KVWasteContinuous = round3(eng.Counts().KVWaste)
	eng.Stop()
	sLat, sTokens, sDur, waste := static(m, work)
	res.StaticTokensPerS = float64(sTokens) / sDur.Seconds()
	res.StaticMedianMs = percentile(sLat, 0.5)
	res.KVWasteStatic = round3(waste)
	res.ContinuousOverStatic = round3(res.ContinuousTokensPerS / res.StaticTokensPerS)
	res.TargetsMet = res.ContinuousOverStatic >= 3 && res.PrefixHitRatio <= 0.5
	return emit(out, cfg.JSON, res, "llm: demo model %d bytes; %.0f tok/s batch 1, %.0f tok/s 16 streams; TTFT p50 %.1f ms miss, %.1f ms prefix hit (%.2fx); continuous %.0f tok/s vs static %.0f (%.2fx), median %.0f / %.0f ms; KV waste %.2f / %.2f\n",
		res.ModelBytes, res.TokensPerSecBatch1, res.TokensPerSecStreams, res.TTFTMissP50Ms, res.TTFTHitP50Ms, res.PrefixHitRatio,
		res.ContinuousTokensPerS, res.StaticTokensPerS, res.ContinuousOverStatic, res.ContinuousMedianMs, res.StaticMedianMs,
		res.KVWasteContinuous, res.KVWasteStatic)
}

// static runs the workload with static batching: batches of llmBatch in
// arrival order, each waiting for the last to end, every sequence of a
// batch stepping (padded) until its longest completion is done, its pages
// reserved for the prompt plus that longest completion. It returns each
// request's latency, the useful tokens, the time and the KV waste.
func static(m llmserve.Model, work []llmserve.Request) ([]time.Duration, int, time.Duration, float64) {
	start := time.Now()
	var lat []time.Duration
	tokens := 0
	var held, used int
	for b := 0; b < len(work); b += llmBatch {
		batch := work[b:min(b+llmBatch, len(work))]
		longest := 0
		for _, r := range batch {
			longest = max(longest, r.MaxTokens)
		}
		steps := make([]llmserve.Step, len(batch))
		next := int32(0)
		for i, r := range batch {
			pages := (len(r.Prompt) + longest + llmserve.PageTokens - 1) / llmserve.PageTokens
			held += pages * llmserve.PageTokens
			used += len(r.Prompt) + r.MaxTokens
			table := make([]int32, pages)
			for j := range table {
				table[j] = next
				next++
			}
			steps[i] = llmserve.Step{Tokens: r.Prompt, Pages: table}
		}
		done := make([]time.Duration, len(batch))
		for k := range longest {
			logits := m.Forward(steps)
			for i := range steps {
				tok := argmax(logits[i])
				steps[i].Pos += len(steps[i].Tokens)
				steps[i].Tokens = []int{tok}
				if k < batch[i].MaxTokens {
					tokens++
				}
			}
		}
		for i := range done {
			done[i] = time.Since(start) // a static batch answers when it ends
		}
		lat = append(lat, done...)
	}
	return lat, tokens, time.Since(start), 1 - float64(used)/float64(held)
}

func argmax(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}
