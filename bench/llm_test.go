package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"os"
	"slices"
	"testing"
	"time"

	"modelplane/gguf"
	"modelplane/llm"
	"modelplane/runtime/llmserve"
)

// stepModel is a model whose forward pass costs a millisecond of its clock
// per sequence, as a CPU forward pass costs about the sum of its
// sequences, and records each batch.
type stepModel struct {
	now     time.Duration
	batches [][]llmserve.Step
}

func (m *stepModel) Forward(batch []llmserve.Step) [][]float32 {
	m.batches = append(m.batches, slices.Clone(batch))
	m.now += time.Duration(len(batch)) * time.Millisecond
	out := make([][]float32, len(batch))
	for i := range out {
		out[i] = make([]float32, m.Vocab())
	}
	return out
}

func (m *stepModel) Vocab() int   { return 8 }
func (m *stepModel) Context() int { return 512 }
func (m *stepModel) EOS() []int   { return nil }
func (m *stepModel) Pages() int   { return 64 }

func (m *stepModel) clock() batchClock {
	return batchClock{
		now: func() time.Duration { return m.now },
		wait: func(t time.Duration) {
			if t > m.now {
				m.now = t
			}
		},
	}
}

// req is a request of prompt tokens arriving at at, wanting max tokens.
func req(at time.Duration, prompt, max int) timedRequest {
	return timedRequest{At: at, Req: llmserve.Request{Prompt: make([]int, prompt), MaxTokens: max}}
}

func rows(batches [][]llmserve.Step) []int {
	var n []int
	for _, b := range batches {
		n = append(n, len(b))
	}
	return n
}

// TestStaticBatchingRunsEachBatchToItsLongest holds the baseline to static
// batching: a batch is the requests that have arrived, it runs every
// sequence (finished ones padded) until its longest completion ends, a
// request arriving meanwhile waits for the next batch; a request's
// latency ends at its own last token, or at the batch's end.
func TestStaticBatchingRunsEachBatchToItsLongest(t *testing.T) {
	t.Parallel()
	m := &stepModel{}
	ms := time.Millisecond
	l := batchLevel{reqs: []timedRequest{req(0, 4, 2), req(0, 4, 5), req(1*ms, 4, 1)}, to: 3, window: [2]time.Duration{0, 10 * ms}}
	r := staticBatching(m, l, 16, 64, m.clock())

	// A and B run five steps together (A padded after its two tokens); C,
	// arriving during them, runs alone after.
	if got, want := rows(m.batches), []int{2, 2, 2, 2, 2, 1}; !slices.Equal(got, want) {
		t.Fatalf("rows per forward pass = %v, want %v", got, want)
	}
	if got := m.batches[4][0].Pos; got != 7 {
		t.Errorf("padded sequence's position in the last step = %d, want 7 (it keeps stepping)", got)
	}
	if got, want := r.latency, []time.Duration{4 * ms, 10 * ms, 10 * ms}; !slices.Equal(got, want) {
		t.Errorf("latency (to the own last token) = %v, want %v", got, want)
	}
	if got, want := r.batchEnd, []time.Duration{10 * ms, 10 * ms, 10 * ms}; !slices.Equal(got, want) {
		t.Errorf("latency to the batch's end = %v, want %v", got, want)
	}
	if r.tokens != 8 || r.windowTokens != 7 || r.makespan != 11*ms {
		t.Errorf("tokens %d, in window %d, makespan %v; want 8, 7, 11ms", r.tokens, r.windowTokens, r.makespan)
	}
	// Held: a page each for five steps of two and one step of one, 176
	// slots; K/V really there: A 4+5+5+5+5, B 4+5+6+7+8, C 4 = 58.
	if got, want := r.kvWaste, 1-58.0/176; math.Abs(got-want) > 1e-12 {
		t.Errorf("KV waste = %v, want %v", got, want)
	}
}

func TestStaticBatchingKeepsABatchWithinTheKVBudget(t *testing.T) {
	t.Parallel()
	m := &stepModel{}
	l := batchLevel{reqs: []timedRequest{req(0, 4, 2), req(0, 4, 5), req(time.Millisecond, 4, 1)}, to: 3}
	staticBatching(m, l, 16, 1, m.clock()) // one page: one sequence at a time
	if got, want := rows(m.batches), []int{1, 1, 1, 1, 1, 1, 1, 1}; !slices.Equal(got, want) {
		t.Errorf("rows per forward pass = %v, want %v", got, want)
	}
}

func TestClimbBisectsBetweenTheLastGoodLoadAndTheFirstBad(t *testing.T) {
	t.Parallel()
	loads := []float64{0.5, 1, 2, 4}
	tests := []struct {
		name  string
		from  float64
		limit float64 // loads up to it are good
		want  []float64
	}{
		{"up from 1, then between 2 and 4", 1, 3, []float64{1, 2, 2.828, 3.363, 4}},
		{"down from 1 when 1 is bad", 1, 0.75, []float64{0.5, 0.707, 0.841, 1}},
		{"from a load between the grid's", 1.5, 100, []float64{1.5, 2, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ran []float64
			points, err := climb(loads, tt.from, 2, func(l float64) (llmPoint, error) {
				ran = append(ran, l)
				return llmPoint{Load: l, Sustained: l <= tt.limit}, nil
			}, func(p llmPoint) bool { return p.Sustained })
			if err != nil {
				t.Fatal(err)
			}
			var got []float64
			for _, p := range points {
				got = append(got, p.Load)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("climb ran %v (points %v), want points %v", ran, got, tt.want)
			}
		})
	}
}

func TestHighestWithinTakesTheHighestSustainedLoadWithinTheTarget(t *testing.T) {
	t.Parallel()
	points := []llmPoint{
		{Load: 1, Sustained: true, MedianMs: 10, TokensPerS: 120},
		{Load: 2, Sustained: true, MedianMs: 30, TokensPerS: 110}, // the measure is noisy; the load ranks
		{Load: 3, Sustained: true, MedianMs: 80},
		{Load: 4, Sustained: false, MedianMs: 20},
	}
	for _, tt := range []struct {
		target float64
		want   float64
		ok     bool
	}{{5, 0, false}, {10, 1, true}, {50, 2, true}, {math.Inf(1), 3, true}} {
		p, ok := highestWithin(points, tt.target)
		if ok != tt.ok || p.Load != tt.want {
			t.Errorf("highestWithin(%v) = load %v, %v; want %v, %v", tt.target, p.Load, ok, tt.want, tt.ok)
		}
	}
}

// TestLLMBenchRunsASmallSweep runs the whole benchmark, small, on the
// demo model and, as its memory-bound measurement, on a generated model
// smaller still (not in parallel: it sets GOMAXPROCS and reads the
// process's CPU time). Its figures are not asserted, only that they are
// the sweeps'.
func TestLLMBenchRunsASmallSweep(t *testing.T) {
	sz := llmSizes{Batch1Tokens: 4, StreamTokens: 2, TTFTSamples: 1, Prefix: 32, Requests: 8, Warm: 2,
		Prompt: 4, Short: 2, Long: 16, Loads: []float64{0.5, 1, 2}, Refine: 1}
	tiny := llm.Config{Layers: 1, Dim: 32, Heads: 2, KVHeads: 1, HeadDim: 16, FFN: 64,
		Vocab: llm.DemoConfig.Vocab, Context: 512, RopeTheta: 10000, NormEps: 1e-5}
	res, err := measureLLM(context.Background(), sz, &tiny, sz)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"continuous_over_static", "latency_target_ms", "static_sweep", "targets_met", "memory_bound"} {
		if _, ok := keys[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, b)
		}
	}
	// `make bench`'s table finds it: without a name it reported the llm
	// benchmark as printing no result, and failed.
	if results, err := readResults(bytes.NewReader(b), io.Discard); err != nil || results["llm"] == nil {
		t.Errorf("bench summary does not find the result (%v): %.200s", err, b)
	}
	checkSweep(t, "demo", res.llmBatching)
	mb := res.MemoryBound
	if mb == nil {
		t.Fatal("no memory-bound figures with a big model")
	}
	if want := 4 * weights(tiny); mb.WeightBytes != want || mb.ModelBytes < want {
		t.Errorf("memory-bound model %d bytes, weights %d; want weights %d and a file holding them", mb.ModelBytes, mb.WeightBytes, want)
	}
	for name, ms := range map[string]float64{"batch 1": mb.DecodeStepMsBatch1, "batch 4": mb.DecodeStepMsBatch4, "batch 16": mb.DecodeStepMsBatch16,
		"demo batch 1": mb.DemoDecodeStepMsBatch1, "demo batch 16": mb.DemoDecodeStepMsBatch16} {
		if ms <= 0 {
			t.Errorf("decode step at %s: %v ms, want above 0", name, ms)
		}
	}
	if mb.Batch16OverBatch1 != round3(mb.DecodeStepMsBatch16/mb.DecodeStepMsBatch1) {
		t.Errorf("batch 16 over batch 1 = %v, want %v / %v", mb.Batch16OverBatch1, mb.DecodeStepMsBatch16, mb.DecodeStepMsBatch1)
	}
	checkSweep(t, "memory-bound", mb.llmBatching)
	if b := mb.Bound; b == nil || b.MaddsPerRow != weights(tiny) {
		t.Errorf("bound %+v, want one with %d multiply-adds a row", b, weights(tiny))
	} else if b.FMAPeakMaddsPerCPUS > 0 && b.ReadCeilingBytesPerCPUS > 0 &&
		(b.StepMsBatch1 <= 0 || b.StepMsBatch16 < b.StepMsBatch1 || b.ContinuousOverStatic <= 0 || b.ContinuousOverStaticAtMeasuredSteps <= 0) {
		t.Errorf("bound %+v: want steps above 0, 16 rows no cheaper than one, and both sweeps' ratios", b)
	}
	if b := mb.Bound; b != nil && b.FMAPeakMaddsPerCPUS != res.FMAPeakMaddsPerCPUS {
		t.Errorf("bound's FMA peak %v, want the run's %v", b.FMAPeakMaddsPerCPUS, res.FMAPeakMaddsPerCPUS)
	}
	if res.TargetsMet != (res.ContinuousOverStatic >= 3 && res.PrefixHitRatio <= 0.5) {
		t.Errorf("targets_met %v, want it of the demo model's figures alone (%v, %v)", res.TargetsMet, res.ContinuousOverStatic, res.PrefixHitRatio)
	}
}

// checkSweep holds a batching sweep's figures to its points.
func checkSweep(t *testing.T, name string, res llmBatching) {
	t.Helper()
	t.Logf("%s sweep: continuous over static %v at %v ms", name, res.ContinuousOverStatic, res.LatencyTargetMs)
	if len(res.StaticSweep) == 0 || len(res.ContinuousSweep) == 0 {
		t.Fatalf("sweeps: static %d points, continuous %d", len(res.StaticSweep), len(res.ContinuousSweep))
	}
	st, ok := highestWithin(res.StaticSweep, math.Inf(1))
	if !ok || res.LatencyTargetMs != st.MedianMs || res.StaticTokensPerS != st.OfferedTokensPerS || res.BatchEndLatencyTargetMs != st.BatchEndMedianMs {
		t.Errorf("target %v ms, static %v tok/s; want those of static's highest sustained load %+v", res.LatencyTargetMs, res.StaticTokensPerS, st)
	}
	for i := 1; i < len(res.ContinuousSweep); i++ {
		if res.ContinuousSweep[i-1].Load >= res.ContinuousSweep[i].Load {
			t.Errorf("continuous sweep loads %v and %v out of order or twice", res.ContinuousSweep[i-1].Load, res.ContinuousSweep[i].Load)
		}
	}
	if !slices.ContainsFunc(res.ContinuousSweep, func(p llmPoint) bool { return p.Load == st.Load }) {
		t.Errorf("continuous sweep %+v lacks the target's load %v, where it starts", res.ContinuousSweep, st.Load)
	}
	if c, ok := highestWithin(res.ContinuousSweep, res.LatencyTargetMs); ok {
		if res.ContinuousTokensPerS != c.OfferedTokensPerS || res.ContinuousOverStatic != round3(c.OfferedTokensPerS/st.OfferedTokensPerS) {
			t.Errorf("continuous %v tok/s (%vx), want its point %+v over static's", res.ContinuousTokensPerS, res.ContinuousOverStatic, c)
		}
	} else if res.ContinuousTokensPerS != 0 {
		t.Errorf("continuous %v tok/s with no point within the target", res.ContinuousTokensPerS)
	}
	for _, p := range slices.Concat(res.StaticSweep, res.ContinuousSweep) {
		if p.TokensPerS <= 0 || p.MedianMs <= 0 || p.KVWaste < 0 || p.KVWaste >= 1 {
			t.Errorf("point %+v: want tokens, a median and a KV waste in [0, 1)", p)
		}
	}
	if res.ContinuousSaturatedTokensS <= 0 || res.StaticSaturatedTokensS <= 0 {
		t.Errorf("saturated tokens/s %v and %v, want both above 0", res.ContinuousSaturatedTokensS, res.StaticSaturatedTokensS)
	}
}

// TestLLMPeerComparesOnTheSameFiles runs the llama.cpp comparison small:
// every figure is there, and the ratios are ours over the peer's (or,
// when the peer cannot be had, it says why and has our figures alone).
func TestLLMPeerComparesOnTheSameFiles(t *testing.T) {
	tiny := llm.Config{Layers: 1, Dim: 64, Heads: 2, KVHeads: 1, HeadDim: 32, FFN: 128,
		Vocab: llm.DemoConfig.Vocab, Context: 256, RopeTheta: 10000, NormEps: 1e-5}
	sz := llmPeerSizes{Config: tiny, Types: []gguf.TensorType{gguf.F16, gguf.Q8_0}, Prompt: 4, Decode: 4, Seqs: 3, Reps: 1, Threads: []int{1}}
	res, err := measurePeer(context.Background(), sz)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Models) != 2 {
		t.Fatalf("%d figures, want one a type: %+v", len(res.Models), res.Models)
	}
	if _, err := os.Stat("/sys/kernel/mm/transparent_hugepage/enabled"); err == nil && !slices.Contains([]string{"always", "madvise", "never"}, res.TransparentHugePages) {
		t.Errorf("transparent_hugepages %q, want the kernel's setting", res.TransparentHugePages)
	}
	for _, f := range res.Models {
		if f.OursBatch1 <= 0 || f.OursSeqs <= 0 || f.OursCPUBatch1 <= 0 || f.OursCPUSeqs <= 0 || f.WeightBytes <= 0 || f.FileBytes < f.WeightBytes {
			t.Errorf("%s: our figures %+v, want all above 0 and the file holding the weights", f.Type, f)
		}
		if f.OursBytesPerCPUS != round3(float64(f.WeightBytes)*f.OursCPUBatch1) || f.StreamBytesPerCPUS < 0 ||
			(f.StreamBytesPerCPUS > 0) != (f.OursShareOfStream > 0) {
			t.Errorf("%s: bandwidth %+v, want the weights times CPU tokens/s, and its share of the stream when measured", f.Type, f)
		}
		if res.Skipped != "" {
			t.Logf("peer skipped: %s", res.Skipped)
			continue
		}
		if f.PeerBytesPerCPUS != round3(float64(f.WeightBytes)*f.PeerCPUBatch1) {
			t.Errorf("%s: peer draws %v bytes/s, want its weights times its CPU tokens/s", f.Type, f.PeerBytesPerCPUS)
		}
		if f.PeerBatch1 <= 0 || f.PeerSeqs <= 0 || f.RatioBatch1 != round3(f.OursBatch1/f.PeerBatch1) || f.RatioCPUSeqs != round3(f.OursCPUSeqs/f.PeerCPUSeqs) {
			t.Errorf("%s: %+v, want the peer's figures and ours over them", f.Type, f)
		}
	}
	if res.Skipped == "" && res.Peer == "" {
		t.Error("the peer ran but its build is not named")
	}
}

// The bound of a step is the slower of one read of the weights and every
// row's arithmetic at the FMA peak, and the sweep under it allows
// continuous batching more over static when a step of many rows costs
// what a step of one does than when it costs each row's arithmetic.
func TestBoundIsTheSlowerOfReadAndArithmetic(t *testing.T) {
	t.Parallel()
	sz := llmSizes{Requests: 16, Warm: 4, Prompt: 2, Short: 2, Long: 24, Refine: 1,
		Loads: []float64{0.5, 0.7, 1, 1.4, 2, 2.8, 4, 5.6, 8}}
	work := batchingWork(sz, func(n int) []int { return make([]int, n) })
	m := &stepModel{}
	// 1 GB at 50 GB/s is 20 ms a step; 1e6 multiply-adds a row at 1e11 a
	// second 0.01 ms a row: a step of 16 costs what a step of one does.
	flat, err := measureBound(context.Background(), m, work, sz, 1e9, 1e6, 1e11, 50e9, 20, 20)
	if err != nil {
		t.Fatal(err)
	}
	if flat.StepMsBatch1 != 20 || flat.StepMsBatch16 != 20 || flat.Batch16OverBatch1 != 1 {
		t.Errorf("flat: steps %v and %v ms (%vx), want 20, 20 (1x)", flat.StepMsBatch1, flat.StepMsBatch16, flat.Batch16OverBatch1)
	}
	// 1e9 multiply-adds a row at 1e11 a second: 10 ms a row, so a step of
	// one is the read's 20 ms and a step of 16 the arithmetic's 160.
	steep, err := measureBound(context.Background(), m, work, sz, 1e9, 1e9, 1e11, 50e9, 20, 160)
	if err != nil {
		t.Fatal(err)
	}
	if steep.StepMsBatch1 != 20 || steep.StepMsBatch16 != 160 || steep.Batch16OverBatch1 != 8 {
		t.Errorf("steep: steps %v and %v ms (%vx), want 20, 160 (8x)", steep.StepMsBatch1, steep.StepMsBatch16, steep.Batch16OverBatch1)
	}
	t.Logf("continuous over static: flat %v (at the measured line %v), steep %v (%v)", flat.ContinuousOverStatic,
		flat.ContinuousOverStaticAtMeasuredSteps, steep.ContinuousOverStatic, steep.ContinuousOverStaticAtMeasuredSteps)
	if steep.ContinuousOverStatic <= 0 || flat.ContinuousOverStatic <= steep.ContinuousOverStatic {
		t.Errorf("continuous over static %v with flat steps, %v with steep ones: want both above 0 and flat above steep",
			flat.ContinuousOverStatic, steep.ContinuousOverStatic)
	}
	if flat.ContinuousOverStaticAtMeasuredSteps <= 0 || steep.ContinuousOverStaticAtMeasuredSteps <= 0 {
		t.Errorf("at the measured steps %v and %v, want both above 0", flat.ContinuousOverStaticAtMeasuredSteps, steep.ContinuousOverStaticAtMeasuredSteps)
	}
}
