package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"modelplane/gguf"
	"modelplane/llm"
	"modelplane/runtime/llmserve"
)

// llmResult is `modelplane bench llm`: the built-in LLM engine on the
// demo GGUF, on one core.
type llmResult struct {
	// Name is "llm", by which `bench summary` finds the result.
	Name       string `json:"name"`
	ModelBytes int64  `json:"model_bytes"`
	GOMAXPROCS int    `json:"gomaxprocs"`

	TokensPerSecBatch1  float64 `json:"tokens_per_s_batch1"`
	TokensPerSecStreams float64 `json:"tokens_per_s_16_streams"`
	TTFTMissP50Ms       float64 `json:"ttft_miss_p50_ms"`
	TTFTMissP99Ms       float64 `json:"ttft_miss_p99_ms"`
	TTFTHitP50Ms        float64 `json:"ttft_prefix_hit_p50_ms"`
	TTFTHitP99Ms        float64 `json:"ttft_prefix_hit_p99_ms"`
	PrefixHitRatio      float64 `json:"prefix_hit_over_miss_p50"`

	// FMAPeakMaddsPerCPUS is one thread's peak float32 multiply-adds per
	// CPU-second here (fmaPeak; 0 without AVX-512 or AVX2): what bounds a step of
	// many sequences, as the read ceiling bounds a step of one.
	FMAPeakMaddsPerCPUS float64 `json:"fma_peak_madds_per_cpu_s"`

	// Continuous against static batching at equal median latency on the
	// demo model (see batchingSweep).
	llmBatching

	// TargetsMet is the targets on the demo model: continuous at
	// least 3× static, and a prefix hit's TTFT at most half a miss's.
	TargetsMet bool `json:"targets_met"`

	// MemoryBound is the same batching comparison on a generated model
	// too big for the CPU caches (bench llm --big); nil without it.
	MemoryBound *llmMemoryBound `json:"memory_bound,omitempty"`

	// LlamaCpp is the engine against llama.cpp on the same memory-bound
	// files, F16 and Q8_0 (see measurePeer).
	LlamaCpp *llmPeer `json:"llamacpp,omitempty"`
}

// llmBatching are batchingSweep's figures.
type llmBatching struct {
	// Continuous against static batching at equal median latency (see
	// batchingSweep): the target is static's median at the highest load
	// it sustains; each scheduler's figures are those of its highest
	// sustained load whose median is within the target, its tokens/s the
	// offered ones, which it delivered (to llmSustained; the sweep has
	// what it measured).
	LatencyTargetMs      float64 `json:"latency_target_ms"`
	ContinuousTokensPerS float64 `json:"continuous_tokens_per_s"`
	StaticTokensPerS     float64 `json:"static_tokens_per_s"`
	ContinuousMedianMs   float64 `json:"continuous_median_latency_ms"`
	StaticMedianMs       float64 `json:"static_median_latency_ms"`
	ContinuousOverStatic float64 `json:"continuous_over_static"`
	KVWasteContinuous    float64 `json:"kv_waste_continuous"`
	KVWasteStatic        float64 `json:"kv_waste_static"`
	// The same comparison against static batching that answers each
	// request at its batch's end instead of at its own last token (the
	// same schedule, so the same static throughput): its median is the
	// target.
	BatchEndLatencyTargetMs      float64 `json:"batch_end_latency_target_ms"`
	BatchEndContinuousTokensPerS float64 `json:"batch_end_continuous_tokens_per_s"`
	BatchEndContinuousMedianMs   float64 `json:"batch_end_continuous_median_latency_ms"`
	BatchEndContinuousOverStatic float64 `json:"batch_end_continuous_over_static"`
	// The sweep itself: requests per load level, each scheduler's
	// throughput with every request arriving at once, and every point.
	BatchingRequests           int        `json:"batching_requests"`
	ContinuousSaturatedTokensS float64    `json:"continuous_saturated_tokens_per_s"`
	StaticSaturatedTokensS     float64    `json:"static_saturated_tokens_per_s"`
	ContinuousSweep            []llmPoint `json:"continuous_sweep"`
	StaticSweep                []llmPoint `json:"static_sweep"`
}

// llmMemoryBound is the batching comparison on a model whose weights do
// not fit the CPU caches, where a decode step streams every weight from
// memory once whatever its batch: the regime of real LLM serving.
type llmMemoryBound struct {
	// Config is the model's shape; ModelBytes its file (F32), WeightBytes
	// its weights in memory (float32, as the runtime holds them), L3Bytes
	// the largest CPU cache the machine reports (0 when it reports none).
	Config      string `json:"config"`
	ModelBytes  int64  `json:"model_bytes"`
	WeightBytes int64  `json:"weight_bytes"`
	L3Bytes     int64  `json:"l3_cache_bytes"`
	// A decode step's CPU time at batch 1, 4 and 16 (the median of a few
	// steps, each sequence with decodeHistory positions before it), and
	// batch 16's over batch 1's: 16 when a step costs its arithmetic, 1
	// when it costs one pass over the weights.
	DecodeStepMsBatch1  float64 `json:"decode_step_ms_batch1"`
	DecodeStepMsBatch4  float64 `json:"decode_step_ms_batch4"`
	DecodeStepMsBatch16 float64 `json:"decode_step_ms_batch16"`
	Batch16OverBatch1   float64 `json:"decode_step_batch16_over_batch1"`
	// The demo model's decode steps, measured the same way, beside them.
	DemoDecodeStepMsBatch1  float64 `json:"demo_decode_step_ms_batch1"`
	DemoDecodeStepMsBatch16 float64 `json:"demo_decode_step_ms_batch16"`
	DemoBatch16OverBatch1   float64 `json:"demo_decode_step_batch16_over_batch1"`
	// Sizes are the workload's sizes, smaller than the demo's (see
	// bigLLMSizes).
	Sizes llmSizes `json:"sizes"`
	llmBatching
	// Bound is what this core allows the steps and continuous over
	// static to be on this model (see measureBound).
	Bound *llmBound `json:"bound"`
}

// llmPoint is one load level of the batching sweep. Its times and rates
// are on the sweep's cpuClock: seconds of one core's work.
type llmPoint struct {
	// Load is the offered request rate as a multiple of static batching's
	// saturated rate (every request at once); OfferedRPS that rate
	// (Poisson arrivals).
	Load              float64 `json:"load"`
	OfferedRPS        float64 `json:"offered_requests_per_s"`
	OfferedTokensPerS float64 `json:"offered_tokens_per_s"`
	// TokensPerS are the tokens generated between the first and the last
	// measured arrival, over that time; Sustained whether they are at
	// least llmSustained of the offered. MedianMs and P99Ms are of each
	// measured request's latency, from its arrival to its last token;
	// BatchEndMedianMs, static only, to its batch's end.
	TokensPerS       float64 `json:"tokens_per_s"`
	Sustained        bool    `json:"sustained"`
	MedianMs         float64 `json:"median_latency_ms"`
	P99Ms            float64 `json:"p99_latency_ms"`
	BatchEndMedianMs float64 `json:"batch_end_median_latency_ms,omitempty"`
	// KVWaste is the share of held page slots without a token, over the
	// level's steps.
	KVWaste float64 `json:"kv_waste"`
}

const llmBatch = 16

// llmSizes size the benchmark; tests run it small.
type llmSizes struct {
	Batch1Tokens, StreamTokens int
	TTFTSamples, Prefix        int
	// Requests are the measured requests of a load level and Warm its
	// warm-up ones. Prompts are Prompt to Prompt+15 tokens; completions
	// Short to 6·Short-1 tokens, but Long for one in every llmBatch.
	Requests, Warm      int
	Prompt, Short, Long int
	// Loads are the offered loads, ascending, as multiples of static
	// batching's saturated request rate; Refine the bisections at a
	// sweep's edge (see batchingSweep and climb).
	Loads  []float64
	Refine int
}

var defaultLLMSizes = llmSizes{Batch1Tokens: 256, StreamTokens: 128, TTFTSamples: 30, Prefix: 256, Requests: 48, Warm: llmBatch,
	Prompt: 24, Short: 8, Long: 192, Refine: 2,
	Loads: []float64{0.5, 0.7, 0.85, 1, 1.2, 1.4, 1.7, 2, 2.4, 2.9, 3.5, 4.2, 5, 6, 7.2, 8.6}}

func runLLM(ctx context.Context, cfg Config, out io.Writer) error {
	var big *llm.Config
	if cfg.LLMBig {
		big = &bigLLMConfig
	}
	res, err := measureLLM(ctx, defaultLLMSizes, big, bigLLMSizes)
	if err != nil {
		return err
	}
	if res.LlamaCpp, err = measurePeer(ctx, defaultPeerSizes()); err != nil {
		return fmt.Errorf("llama.cpp comparison: %w", err)
	}
	if err := emit(out, cfg.JSON, res, "llm: demo model %d bytes; %.0f tok/s batch 1, %.0f tok/s 16 streams; TTFT p50 %.1f ms miss, %.1f ms prefix hit (%.2fx); at median latency <= %.0f ms continuous %.0f tok/s vs static %.0f (%.2fx), median %.0f / %.0f ms; against static answering at its batch's end %.2fx; KV waste %.2f / %.2f\n",
		res.ModelBytes, res.TokensPerSecBatch1, res.TokensPerSecStreams, res.TTFTMissP50Ms, res.TTFTHitP50Ms, res.PrefixHitRatio,
		res.LatencyTargetMs, res.ContinuousTokensPerS, res.StaticTokensPerS, res.ContinuousOverStatic, res.ContinuousMedianMs, res.StaticMedianMs,
		res.BatchEndContinuousOverStatic, res.KVWasteContinuous, res.KVWasteStatic); err != nil {
		return err
	}
	if p := res.LlamaCpp; !cfg.JSON {
		if p.Skipped != "" {
			if _, err := fmt.Fprintf(out, "llm vs llama.cpp: skipped (%s); ours alone below\n", p.Skipped); err != nil {
				return err
			}
		}
		for _, f := range p.Models {
			if _, err := fmt.Fprintf(out, "llm vs llama.cpp %s, %d thread(s): batch 1 %.1f vs %.1f tok/s (%.2fx, CPU time %.2fx; target %.1fx), %d seqs %.1f vs %.1f tok/s (%.2fx, CPU time %.2fx; target %.1fx); batch 1 draws %.1f vs %.1f GB/s of a %.1f GB/s stream, %.1f GB/s read ceiling\n",
				f.Type, f.Threads, f.OursBatch1, f.PeerBatch1, f.RatioBatch1, f.RatioCPUBatch1, p.TargetBatch1,
				p.Seqs, f.OursSeqs, f.PeerSeqs, f.RatioSeqs, f.RatioCPUSeqs, p.TargetSeqs,
				f.OursBytesPerCPUS/1e9, f.PeerBytesPerCPUS/1e9, f.StreamBytesPerCPUS/1e9, f.ReadCeilingBytesPerCPUS/1e9); err != nil {
				return err
			}
		}
	}
	if mb := res.MemoryBound; mb != nil && !cfg.JSON {
		_, err = fmt.Fprintf(out, "llm memory-bound: model %d bytes (L3 %d); decode step %.1f ms batch 1, %.1f ms batch 16 (%.2fx; demo %.2fx); at median latency <= %.0f ms continuous %.1f tok/s vs static %.1f (%.2fx)\n",
			mb.ModelBytes, mb.L3Bytes, mb.DecodeStepMsBatch1, mb.DecodeStepMsBatch16, mb.Batch16OverBatch1, mb.DemoBatch16OverBatch1,
			mb.LatencyTargetMs, mb.ContinuousTokensPerS, mb.StaticTokensPerS, mb.ContinuousOverStatic)
		if b := mb.Bound; err == nil && b.StepMsBatch1 > 0 {
			_, err = fmt.Fprintf(out, "llm memory-bound, at this core's limits (FMA peak %.1f G madd/s, read ceiling %.1f GB/s): step %.1f ms batch 1, %.1f ms batch 16 (%.2fx); continuous over static at most %.2fx (%.2fx at the measured steps)\n",
				b.FMAPeakMaddsPerCPUS/1e9, b.ReadCeilingBytesPerCPUS/1e9, b.StepMsBatch1, b.StepMsBatch16, b.Batch16OverBatch1,
				b.ContinuousOverStatic, b.ContinuousOverStaticAtMeasuredSteps)
		}
	}
	return err
}

// measureLLM runs the benchmark on the demo model sized by sz and, when
// big is not nil, the memory-bound comparison on a model of shape *big
// sized by bigSz.
func measureLLM(ctx context.Context, sz llmSizes, big *llm.Config, bigSz llmSizes) (llmResult, error) {
	prev := goruntime.GOMAXPROCS(1)
	defer goruntime.GOMAXPROCS(prev)
	loaded, size, err := generatedModel(llm.DemoConfig, 2048)
	if err != nil {
		return llmResult{}, err
	}
	res := llmResult{Name: "llm", ModelBytes: size, GOMAXPROCS: 1, FMAPeakMaddsPerCPUS: round3(fmaPeak(fmaPeakSteps, 5))}
	m := yielding{loaded}
	rng := rand.New(rand.NewPCG(1, 2))
	randPrompt := promptsOf(rng)

	// Tokens per second, batch 1 and 16 streams.
	eng, err := llmserve.New(m, llmserve.Config{MaxBatch: llmBatch})
	if err != nil {
		return llmResult{}, err
	}
	defer func() { eng.Stop() }()
	run := func(reqs []llmserve.Request) (int, time.Duration, error) {
		start := time.Now()
		chans := make([]<-chan llmserve.Event, len(reqs))
		for i, r := range reqs {
			_, ch, err := eng.Submit(r)
			if err != nil {
				return 0, 0, err
			}
			chans[i] = ch
		}
		tokens := 0
		for _, ch := range chans {
			for ev := range ch {
				if ev.Err != nil {
					return 0, 0, ev.Err
				}
				if !ev.Done {
					tokens++
				}
			}
		}
		return tokens, time.Since(start), nil
	}
	one := llmserve.Request{Prompt: randPrompt(32), MaxTokens: sz.Batch1Tokens, IgnoreEOS: true}
	n, d, err := run([]llmserve.Request{one})
	if err != nil {
		return llmResult{}, err
	}
	res.TokensPerSecBatch1 = float64(n) / d.Seconds()
	var streams []llmserve.Request
	for range llmBatch {
		streams = append(streams, llmserve.Request{Prompt: randPrompt(32), MaxTokens: sz.StreamTokens, IgnoreEOS: true})
	}
	n, d, err = run(streams)
	if err != nil {
		return llmResult{}, err
	}
	res.TokensPerSecStreams = float64(n) / d.Seconds()

	// TTFT with and without a shared sz.Prefix-token prefix (256), beside
	// a running stream that holds the prefix.
	prefix := randPrompt(sz.Prefix)
	anchorID, anchor, err := eng.Submit(llmserve.Request{Prompt: append(slices.Clone(prefix), randPrompt(8)...), MaxTokens: 1500, IgnoreEOS: true})
	if err != nil {
		return llmResult{}, err
	}
	<-anchor
	ttft := func(p []int) (time.Duration, error) {
		start := time.Now()
		_, ch, err := eng.Submit(llmserve.Request{Prompt: p, MaxTokens: 1})
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
	for range sz.TTFTSamples {
		h, err := ttft(append(slices.Clone(prefix), randPrompt(16)...))
		if err != nil {
			return llmResult{}, err
		}
		mi, err := ttft(randPrompt(sz.Prefix + 16))
		if err != nil {
			return llmResult{}, err
		}
		hits, misses = append(hits, h), append(misses, mi)
	}
	eng.Cancel(anchorID)
	for range anchor {
	}
	eng.Stop()
	res.TTFTHitP50Ms, res.TTFTHitP99Ms = percentile(hits, 0.5), percentile(hits, 0.99)
	res.TTFTMissP50Ms, res.TTFTMissP99Ms = percentile(misses, 0.5), percentile(misses, 0.99)
	res.PrefixHitRatio = round3(res.TTFTHitP50Ms / res.TTFTMissP50Ms)

	// Continuous against static batching at equal median latency.
	if err := batchingSweep(ctx, m, batchingWork(sz, randPrompt), sz, cpuTime, &res.llmBatching); err != nil {
		return llmResult{}, err
	}
	res.TargetsMet = res.ContinuousOverStatic >= 3 && res.PrefixHitRatio <= 0.5
	if big != nil {
		mb, err := measureMemoryBound(ctx, *big, bigSz, m, res.FMAPeakMaddsPerCPUS)
		if err != nil {
			return llmResult{}, err
		}
		res.MemoryBound = mb
	}
	return res, nil
}

// generatedModel writes llm.WriteModel's model of shape c (F32) to a
// temporary file, loads it with pages pages of KV store, removes the file
// and returns the model and the file's size.
func generatedModel(c llm.Config, pages int) (llmserve.Model, int64, error) {
	dir, err := os.MkdirTemp("", "bench-llm")
	if err != nil {
		return nil, 0, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "model.gguf")
	f, err := os.Create(path)
	if err != nil {
		return nil, 0, err
	}
	if err := llm.WriteModel(f, c, gguf.F32); err != nil {
		f.Close()
		return nil, 0, err
	}
	if err := f.Close(); err != nil {
		return nil, 0, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, 0, err
	}
	m, _, err := llmserve.LoadModel(path, pages)
	if err != nil {
		return nil, 0, err
	}
	return m, st.Size(), nil
}

// promptsOf returns a maker of random printable-byte prompts drawn from
// rng.
func promptsOf(rng *rand.Rand) func(n int) []int {
	return func(n int) []int {
		p := make([]int, n)
		for i := range p {
			p[i] = 32 + rng.IntN(95)
		}
		return p
	}
}

// batchingWork is the batching sweep's requests for sz: prompts of
// sz.Prompt to sz.Prompt+15 tokens, completions of sz.Short to
// 6·sz.Short-1 tokens but sz.Long for one in every llmBatch.
func batchingWork(sz llmSizes, randPrompt func(int) []int) []llmserve.Request {
	var work []llmserve.Request
	for i := range sz.Warm + 2*sz.Requests {
		n := sz.Short + (i*37)%(5*sz.Short)
		if i%llmBatch == 5 {
			n = sz.Long
		}
		work = append(work, llmserve.Request{Prompt: randPrompt(sz.Prompt + i%16), MaxTokens: n, IgnoreEOS: true})
	}
	return work
}

// bigLLMConfig is the memory-bound measurement's model: TinyLlama-1.1B's
// layer (width 2048, 32 query heads sharing 4 K/V heads of 64, a 5,632-wide
// SwiGLU) six times over, with the demo's byte vocabulary: 264 million
// weights, 1.06 GB in float32, twice and more the largest L3 cache of the
// machines bench llm has run on (480 MiB).
var bigLLMConfig = llm.Config{Layers: 6, Dim: 2048, Heads: 32, KVHeads: 4, HeadDim: 64, FFN: 5632,
	Vocab: llm.DemoConfig.Vocab, Context: 2048, RopeTheta: 10000, NormEps: 1e-5}

// bigLLMSizes size the memory-bound sweep. A token there costs about two
// thousand times the demo's, so the workload is the demo's scaled by a
// quarter: completions of 2 to 11 tokens but 48 for one in every
// llmBatch (the demo's 8 to 47 and 192), prompts of 1 to 16 tokens (the
// demo's 24 to 39: the spread of 16 is batchingWork's), 16 measured
// requests a level after 8 of warm-up (the demo's 48 and 16), a coarser
// load grid and one bisection.
var bigLLMSizes = llmSizes{Requests: 16, Warm: 8, Prompt: 1, Short: 2, Long: 48, Refine: 1,
	Loads: []float64{0.5, 0.7, 1, 1.4, 2, 2.8, 4, 5.6, 8}}

// fmaPeakSteps are the steps of one fmaPeak run: 5 G multiply-adds,
// tens of milliseconds, long past the CPU time's resolution.
const fmaPeakSteps = 20_000_000

// q8DotPeakSteps are the steps of one q8DotPeak run: 1.3 G multiply-adds,
// about 40 ms at this rate on a 2-core Zen 2.
const q8DotPeakSteps = 5_000_000

// decodeHistory is the positions before each sequence's token in
// decodeStepMs's steps.
const decodeHistory = 64

// decodeStepMs is the median CPU time, in ms, of reps decode steps of
// batch sequences on m, each one token at position decodeHistory (the K/V
// before it is whatever the store holds: attention costs the same). m's
// store needs batch·⌈(decodeHistory+1)/PageTokens⌉ pages.
func decodeStepMs(m llmserve.Model, batch, reps int) float64 {
	per := (decodeHistory + llmserve.PageTokens) / llmserve.PageTokens
	steps := make([]llmserve.Step, batch)
	for i := range steps {
		pages := make([]int32, per)
		for j := range pages {
			pages[j] = int32(i*per + j)
		}
		steps[i] = llmserve.Step{Tokens: []int{'a' + i}, Pos: decodeHistory, Pages: pages}
	}
	m.Forward(steps) // the weights' first touch
	var d []time.Duration
	for range reps {
		t := cpuTime()
		m.Forward(steps)
		d = append(d, cpuTime()-t)
	}
	return percentile(d, 0.5)
}

// l3Bytes is the largest CPU cache cpu0 reports in sysfs; 0 when none.
func l3Bytes() int64 {
	var most int64
	paths, _ := filepath.Glob("/sys/devices/system/cpu/cpu0/cache/index*/size")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var n int64
		var unit string
		if _, err := fmt.Sscanf(string(b), "%d%s", &n, &unit); err != nil {
			continue
		}
		switch unit {
		case "K":
			n <<= 10
		case "M":
			n <<= 20
		}
		most = max(most, n)
	}
	return most
}

// measureMemoryBound runs the batching comparison of measureLLM on a
// generated model of shape c, sized by sz, after timing its decode steps
// and demo's beside them, and its bound given the FMA peak.
func measureMemoryBound(ctx context.Context, c llm.Config, sz llmSizes, demo llmserve.Model, fmaPeak float64) (*llmMemoryBound, error) {
	work := batchingWork(sz, promptsOf(rand.New(rand.NewPCG(1, 2))))
	longest := 0
	for _, r := range work {
		longest = max(longest, len(r.Prompt)+r.MaxTokens)
	}
	pages := llmBatch * max((longest+llmserve.PageTokens-1)/llmserve.PageTokens, (decodeHistory+llmserve.PageTokens)/llmserve.PageTokens)
	loaded, size, err := generatedModel(c, pages)
	if err != nil {
		return nil, err
	}
	mb := &llmMemoryBound{Config: fmt.Sprintf("%+v", c), ModelBytes: size, WeightBytes: 4 * weights(c), L3Bytes: l3Bytes(), Sizes: sz}
	m := yielding{loaded}
	mb.DecodeStepMsBatch1 = decodeStepMs(m, 1, 5)
	mb.DecodeStepMsBatch4 = decodeStepMs(m, 4, 3)
	mb.DecodeStepMsBatch16 = decodeStepMs(m, 16, 3)
	mb.Batch16OverBatch1 = round3(mb.DecodeStepMsBatch16 / mb.DecodeStepMsBatch1)
	mb.DemoDecodeStepMsBatch1 = decodeStepMs(demo, 1, 50)
	mb.DemoDecodeStepMsBatch16 = decodeStepMs(demo, 16, 50)
	mb.DemoBatch16OverBatch1 = round3(mb.DemoDecodeStepMsBatch16 / mb.DemoDecodeStepMsBatch1)
	if err := batchingSweep(ctx, m, work, sz, cpuTime, &mb.llmBatching); err != nil {
		return nil, err
	}
	ceiling, _ := readCeiling(mb.WeightBytes, 3)
	if mb.Bound, err = measureBound(ctx, m, work, sz, mb.WeightBytes, weights(c), fmaPeak, ceiling,
		mb.DecodeStepMsBatch1, mb.DecodeStepMsBatch16); err != nil {
		return nil, err
	}
	return mb, nil
}

// weights is the number of weights of a model of shape c (untied output).
func weights(c llm.Config) int64 {
	d, kv := int64(c.Dim), int64(c.KVDim())
	layer := 2*d + d*d + 2*kv*d + d*d + 3*int64(c.FFN)*d
	return int64(c.Layers)*layer + d + 2*int64(c.Vocab)*d
}

// yielding lets the other goroutines run before each forward pass. On one
// P the engine's loop never blocks while it has work, so without it the
// clients' reads of their tokens would wait for the Go runtime's 10 ms
// preemption, and every TTFT would carry it.
type yielding struct{ llmserve.Model }

func (y yielding) Forward(batch []llmserve.Step) [][]float32 {
	goruntime.Gosched()
	return y.Model.Forward(batch)
}

// batchingSweep compares continuous and static batching at equal median
// latency and fills res's batching figures.
//
// Both schedulers get the same batch cap (llmBatch), the same KV budget
// (enough pages for a full batch of the longest prompt and completion, so
// neither ever waits for pages) and the same requests: work's skewed
// completion lengths, arriving open-loop at unit Poisson gaps drawn once
// from a fixed seed and divided by the offered rate. Time is a cpuClock's:
// the forward passes run for real, on one core, and the time they and the
// scheduling cost is the process's CPU time. A load level is sz.Warm
// requests of warm-up, then sz.Requests measured ones (their latencies
// make the median), while the rest keep arriving until the measured ones
// are done; its throughput is the tokens generated from the first measured
// arrival to the last one, so that neither the empty start nor the tail of
// the last long completion counts. A level is sustained when that is at
// least llmSustained of the offered tokens/s.
//
// The offered rates are sz.Loads times static's saturated request rate
// (every request at once). Static climbs them from 1 until a level is not
// sustained (see climb); the latency target is its median at its highest
// sustained load. Continuous climbs from that load while it is sustained
// within the target. Each scheduler's figure is its highest sustained load
// within the target (for static, the target's own).
func batchingSweep(ctx context.Context, m llmserve.Model, work []llmserve.Request, sz llmSizes, src clockSource, res *llmBatching) error {
	measured, loads := sz.Requests, sz.Loads
	longest, tokens := 0, 0
	for _, r := range work {
		longest = max(longest, len(r.Prompt)+r.MaxTokens)
		tokens += r.MaxTokens
	}
	meanTokens := float64(tokens) / float64(len(work))
	pages := llmBatch * ((longest + llmserve.PageTokens - 1) / llmserve.PageTokens)
	res.BatchingRequests = measured
	gaps := rand.New(rand.NewPCG(7, 11))
	unit := make([]float64, len(work)) // arrival times at one request a second
	for i := 1; i < len(work); i++ {
		unit[i] = unit[i-1] + gaps.ExpFloat64()
	}
	for i := range unit { // exactly one a second on average
		unit[i] *= float64(len(work)-1) / unit[len(work)-1]
	}
	level := func(rps float64) batchLevel {
		l := batchLevel{from: sz.Warm, to: sz.Warm + measured}
		for i, r := range work {
			l.reqs = append(l.reqs, timedRequest{At: time.Duration(unit[i] / rps * float64(time.Second)), Req: r})
		}
		l.window = [2]time.Duration{l.reqs[l.from].At, l.reqs[l.to-1].At}
		return l
	}
	burst := batchLevel{reqs: make([]timedRequest, measured), to: measured}
	for i := range burst.reqs {
		burst.reqs[i] = timedRequest{Req: work[sz.Warm+i]}
	}
	point := func(r batchRun, load, rps float64) llmPoint {
		p := llmPoint{Load: load, OfferedRPS: round3(rps), OfferedTokensPerS: round3(rps * meanTokens),
			TokensPerS: round3(r.tokensPerS()), MedianMs: percentile(r.latency, 0.5), P99Ms: percentile(r.latency, 0.99),
			BatchEndMedianMs: percentile(r.batchEnd, 0.5), KVWaste: round3(r.kvWaste)}
		p.Sustained = p.TokensPerS >= llmSustained*p.OfferedTokensPerS
		return p
	}

	sb := staticBatching(m, burst, llmBatch, pages, cpuBatchClock(src))
	res.StaticSaturatedTokensS = round3(sb.tokensPerS())
	saturatedRPS := float64(measured) / sb.makespan.Seconds()
	cb, err := continuousBatching(m, burst, llmBatch, pages, src)
	if err != nil {
		return err
	}
	res.ContinuousSaturatedTokensS = round3(cb.tokensPerS())

	runStatic := func(load float64) (llmPoint, error) {
		if err := ctx.Err(); err != nil {
			return llmPoint{}, err
		}
		rps := load * saturatedRPS
		return point(staticBatching(m, level(rps), llmBatch, pages, cpuBatchClock(src)), load, rps), nil
	}
	ran := map[float64]llmPoint{} // continuous climbs twice
	runContinuous := func(load float64) (llmPoint, error) {
		if p, ok := ran[load]; ok {
			return p, nil
		}
		if err := ctx.Err(); err != nil {
			return llmPoint{}, err
		}
		rps := load * saturatedRPS
		r, err := continuousBatching(m, level(rps), llmBatch, pages, src)
		if err != nil {
			return llmPoint{}, err
		}
		ran[load] = point(r, load, rps)
		return ran[load], nil
	}
	res.StaticSweep, err = climb(loads, 1, sz.Refine, runStatic, func(p llmPoint) bool { return p.Sustained })
	if err != nil {
		return err
	}
	st, ok := highestWithin(res.StaticSweep, math.Inf(1))
	if !ok {
		return fmt.Errorf("static batching sustained none of the loads %v", loads)
	}
	res.LatencyTargetMs, res.BatchEndLatencyTargetMs = st.MedianMs, st.BatchEndMedianMs
	res.StaticTokensPerS, res.StaticMedianMs, res.KVWasteStatic = st.OfferedTokensPerS, st.MedianMs, st.KVWaste
	// Continuous from the target's load, where its median is lower, to
	// each target.
	for _, target := range []float64{res.LatencyTargetMs, res.BatchEndLatencyTargetMs} {
		if _, err := climb(loads, st.Load, sz.Refine, runContinuous, func(p llmPoint) bool {
			return p.Sustained && p.MedianMs <= target
		}); err != nil {
			return err
		}
	}
	for _, p := range ran {
		res.ContinuousSweep = append(res.ContinuousSweep, p)
	}
	slices.SortFunc(res.ContinuousSweep, func(a, b llmPoint) int { return cmp.Compare(a.Load, b.Load) })
	if p, ok := highestWithin(res.ContinuousSweep, res.LatencyTargetMs); ok {
		res.ContinuousTokensPerS, res.ContinuousMedianMs, res.KVWasteContinuous = p.OfferedTokensPerS, p.MedianMs, p.KVWaste
		res.ContinuousOverStatic = round3(p.OfferedTokensPerS / st.OfferedTokensPerS)
	}
	if p, ok := highestWithin(res.ContinuousSweep, res.BatchEndLatencyTargetMs); ok {
		res.BatchEndContinuousTokensPerS, res.BatchEndContinuousMedianMs = p.OfferedTokensPerS, p.MedianMs
		res.BatchEndContinuousOverStatic = round3(p.OfferedTokensPerS / st.OfferedTokensPerS)
	}
	return nil
}

// llmSustained is the share of the offered tokens/s a sustained level
// delivers.
const llmSustained = 0.9

// climb runs levels with run from load from upwards along loads (the
// ones above from) while good holds of them; if even from's does not, it
// runs loads below from downwards until one does. Between the last good
// load and the first bad one it then bisects refine times (geometric
// means), so that the edge is found finer than the grid. It returns the
// points by load.
func climb(loads []float64, from float64, refine int, run func(load float64) (llmPoint, error), good func(llmPoint) bool) ([]llmPoint, error) {
	var points []llmPoint
	try := func(load float64) (bool, error) {
		p, err := run(load)
		if err != nil {
			return false, err
		}
		points = append(points, p)
		return good(p), nil
	}
	lo, hi := 0.0, 0.0 // the last good load, the first bad one
	up := []float64{from}
	for _, l := range loads {
		if l > from {
			up = append(up, l)
		}
	}
	for _, l := range up {
		ok, err := try(l)
		if err != nil {
			return nil, err
		}
		if !ok {
			hi = l
			break
		}
		lo = l
	}
	for i := len(loads) - 1; i >= 0 && lo == 0; i-- {
		if loads[i] >= from {
			continue
		}
		ok, err := try(loads[i])
		if err != nil {
			return nil, err
		}
		if ok {
			lo = loads[i]
		} else {
			hi = loads[i]
		}
	}
	for range refine {
		if lo == 0 || hi == 0 {
			break
		}
		mid := round3(math.Sqrt(lo * hi))
		ok, err := try(mid)
		if err != nil {
			return nil, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	slices.SortFunc(points, func(a, b llmPoint) int { return cmp.Compare(a.Load, b.Load) })
	return points, nil
}

// highestWithin is the sustained point of points at the highest load
// whose median latency is within targetMs; false when none is. The load,
// not the measured tokens/s, ranks them: a sustained level delivers its
// offered load, and the measure is noisier than the order of the loads.
func highestWithin(points []llmPoint, targetMs float64) (llmPoint, bool) {
	var best llmPoint
	ok := false
	for _, p := range points {
		if p.Sustained && p.MedianMs <= targetMs && (!ok || p.Load > best.Load) {
			best, ok = p, true
		}
	}
	return best, ok
}

// timedRequest is a request of the batching workload and when it arrives,
// from the run's start.
type timedRequest struct {
	At  time.Duration
	Req llmserve.Request
}

// batchLevel is one run of the batching workload: reqs in arrival order,
// of which reqs[from:to] are measured. The tokens generated within window
// are the throughput; a zero window (every request arriving at once) takes
// all the tokens over the makespan instead.
type batchLevel struct {
	reqs     []timedRequest
	from, to int
	window   [2]time.Duration
}

func (l batchLevel) inWindow(t time.Duration) bool { return t >= l.window[0] && t <= l.window[1] }

// batchRun is one scheduler's run of a level.
type batchRun struct {
	// latency is each measured request's time from its arrival to its
	// last token; batchEnd, static only, to its batch's end.
	latency, batchEnd []time.Duration
	// windowTokens are the tokens generated in the level's window, window
	// its length; tokens and makespan those of the whole run.
	windowTokens, tokens int
	window               time.Duration
	makespan             time.Duration
	kvWaste              float64
}

func (r batchRun) tokensPerS() float64 {
	if r.window > 0 {
		return float64(r.windowTokens) / r.window.Seconds()
	}
	return float64(r.tokens) / r.makespan.Seconds()
}

// continuousBatching runs l on the engine (continuous batching), on a
// fresh engine with batch and pages and its own cpuClock: each request is
// submitted when the clock reaches its arrival (at the start of a step, or
// by a jump when the engine is idle) until the measured ones are done,
// its latency taken from that arrival to its last token.
func continuousBatching(m llmserve.Model, l batchLevel, batch, pages int, src clockSource) (batchRun, error) {
	clk := newCPUClock(src)
	d := &loadDriver{l: l, clk: clk, clients: make([]client, len(l.reqs)), left: l.to - l.from}
	d.cond = sync.NewCond(&d.mu)
	eng, err := llmserve.New(injecting{m, d}, llmserve.Config{MaxBatch: batch, Pages: pages,
		Clock: newEngineClock(time.Now(), clk)})
	if err != nil {
		return batchRun{}, err
	}
	d.eng = eng
	d.mu.Lock()
	for d.left > 0 && d.err == nil {
		if d.outstanding > 0 {
			d.cond.Wait()
			continue
		}
		if d.next == len(l.reqs) {
			break
		}
		clk.jump(l.reqs[d.next].At) // idle until the next arrival
		d.arrive()
	}
	err = d.err
	d.mu.Unlock()
	r := batchRun{kvWaste: eng.Counts().KVWaste, window: l.window[1] - l.window[0]}
	eng.Stop() // the unmeasured requests still open end here
	d.all.Wait()
	if err != nil {
		return batchRun{}, err
	}
	for i, c := range d.clients[l.from:l.to] {
		if c.err != nil {
			return batchRun{}, c.err
		}
		r.latency = append(r.latency, c.done-l.reqs[l.from+i].At)
	}
	for _, c := range d.clients {
		r.tokens += c.tokens
		r.windowTokens += c.windowTokens
		r.makespan = max(r.makespan, c.done)
	}
	return r, nil
}

// loadDriver submits a level's requests to the engine as its clock reaches
// their arrivals, and reads their tokens.
type loadDriver struct {
	l       batchLevel
	clk     *cpuClock
	eng     *llmserve.Engine
	clients []client
	all     sync.WaitGroup

	mu   sync.Mutex
	cond *sync.Cond
	// next is the next request to submit; outstanding those submitted and
	// not done; left the measured ones not done.
	next, outstanding, left int
	err                     error
}

// client is one request's reader.
type client struct {
	done                 time.Duration
	tokens, windowTokens int
	err                  error
}

// arrive submits the requests whose arrival the clock has reached; d.mu
// is held.
func (d *loadDriver) arrive() {
	for d.err == nil && d.left > 0 && d.next < len(d.l.reqs) && d.l.reqs[d.next].At <= d.clk.now() {
		i := d.next
		d.next++
		_, ch, err := d.eng.Submit(d.l.reqs[i].Req)
		if err != nil {
			d.err = err
			d.cond.Broadcast()
			return
		}
		d.outstanding++
		d.all.Go(func() {
			c := &d.clients[i]
			for ev := range ch {
				t := d.clk.now()
				if ev.Err != nil {
					c.err = ev.Err
				}
				if !ev.Done {
					c.tokens++
					if d.l.inWindow(t) {
						c.windowTokens++
					}
				}
				c.done = t
			}
			d.mu.Lock()
			d.outstanding--
			if i >= d.l.from && i < d.l.to {
				d.left--
			}
			d.cond.Broadcast()
			d.mu.Unlock()
		})
	}
}

// injecting is the engine's model during the batching sweep: before each
// forward pass it submits the requests that have arrived by then, and
// lets the readers take the last step's tokens (see yielding).
type injecting struct {
	llmserve.Model
	d *loadDriver
}

func (w injecting) Forward(batch []llmserve.Step) [][]float32 {
	w.d.mu.Lock()
	w.d.arrive()
	w.d.mu.Unlock()
	goruntime.Gosched()
	return w.Model.Forward(batch)
}

// cpuClock is the batching sweep's time: the process's CPU time while
// there is work (one core, as GOMAXPROCS is 1), and a jump to the next
// arrival when there is none. Forward passes, scheduling and the readers
// all count as they cost; waiting for an arrival does not take real time,
// and the time the shared machine gives other processes does not count,
// so a sweep reads the same on a busy machine and on an idle one.
type cpuClock struct {
	src          clockSource
	mu           sync.Mutex
	start, jumps time.Duration
}

// cpuClock's src is the time it runs on: the process's CPU time
// (cpuTime), or a step cost model's total (see stepCostModel).
type clockSource func() time.Duration

func newCPUClock(src clockSource) *cpuClock { return &cpuClock{src: src, start: src()} }

func (c *cpuClock) now() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.src() - c.start + c.jumps
}

// jump moves the clock on to t, if it is not there yet.
func (c *cpuClock) jump(t time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := c.src() - c.start + c.jumps; t > now {
		c.jumps += t - now
	}
}

// cpuTime is the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(fmt.Sprintf("getrusage: %v", err)) // cannot fail for RUSAGE_SELF
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// batchClock is static batching's time: now since the run's start, and a
// wait until a later time when nothing has arrived.
type batchClock struct {
	now  func() time.Duration
	wait func(until time.Duration)
}

func cpuBatchClock(src clockSource) batchClock {
	c := newCPUClock(src)
	return batchClock{now: c.now, wait: c.jump}
}

// staticBatching runs l with static batching on the same model, batch cap
// and KV budget (pages) as the engine: when the batcher is idle it forms a
// batch of the requests that have arrived, in arrival order, up to batch
// of them while their pages fit (it does not wait to fill a batch). The
// batch runs as one fixed shape until its longest completion ends: every
// sequence reserves pages for its prompt plus that longest completion, and
// one that has finished keeps stepping (padding) until then; requests
// arriving meanwhile wait for the next batch, none joins. A request's
// latency ends at its own last token, as a streaming client sees it (the
// best case for static batching); its batch's end, when a non-streaming
// static batcher answers, is kept too (batchEnd). It stops forming
// batches once the measured requests are done. KV waste is counted as the
// engine counts it: page slots held in each step without a token of the
// sequence.
func staticBatching(m llmserve.Model, l batchLevel, batch, pages int, clk batchClock) batchRun {
	r := batchRun{window: l.window[1] - l.window[0]}
	var held, used int64
	next, left := 0, l.to-l.from
	for next < len(l.reqs) && left > 0 {
		if l.reqs[next].At > clk.now() {
			clk.wait(l.reqs[next].At)
		}
		now := clk.now()
		end := next // the batch is l.reqs[next:end]
		longest := 0
		for end < len(l.reqs) && end-next < batch && l.reqs[end].At <= now {
			grown := max(longest, l.reqs[end].Req.MaxTokens)
			need := 0
			for _, w := range l.reqs[next : end+1] {
				need += (len(w.Req.Prompt) + grown + llmserve.PageTokens - 1) / llmserve.PageTokens
			}
			if need > pages && end > next {
				break
			}
			longest = grown
			end++
		}
		b := l.reqs[next:end]
		steps := make([]llmserve.Step, len(b))
		page := int32(0)
		for i, w := range b {
			table := make([]int32, (len(w.Req.Prompt)+longest+llmserve.PageTokens-1)/llmserve.PageTokens)
			for j := range table {
				table[j] = page
				page++
			}
			steps[i] = llmserve.Step{Tokens: w.Req.Prompt, Pages: table}
		}
		for k := range longest {
			for i, s := range steps {
				held += int64(len(s.Pages) * llmserve.PageTokens)
				// The K/V a sequence really has: its prompt and all but its
				// last token, which is never fed back.
				used += int64(min(s.Pos+len(s.Tokens), len(b[i].Req.Prompt)+b[i].Req.MaxTokens-1))
			}
			logits := m.Forward(steps)
			t := clk.now()
			for i := range steps {
				steps[i].Pos += len(steps[i].Tokens)
				steps[i].Tokens = []int{argmax(logits[i])}
				if k >= b[i].Req.MaxTokens {
					continue // padding
				}
				r.tokens++
				if l.inWindow(t) {
					r.windowTokens++
				}
				if k == b[i].Req.MaxTokens-1 && next+i >= l.from && next+i < l.to {
					r.latency = append(r.latency, t-b[i].At)
					left--
				}
			}
		}
		r.makespan = clk.now()
		for i, w := range b {
			if next+i >= l.from && next+i < l.to {
				r.batchEnd = append(r.batchEnd, r.makespan-w.At)
			}
		}
		next = end
	}
	if held > 0 {
		r.kvWaste = 1 - float64(used)/float64(held)
	}
	return r
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
