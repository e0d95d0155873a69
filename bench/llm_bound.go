package bench

import (
	"context"
	"math"
	"sync"
	"time"

	"modelplane/runtime/llmserve"
)

// llmBound is what this core allows a step of the memory-bound model to
// cost, and what continuous over static batching that allows under the
// benchmark's own model of it (its workload, schedulers and sweep).
type llmBound struct {
	// FMAPeakMaddsPerCPUS is one thread's peak float32 multiply-adds per
	// CPU-second (fmaPeak); ReadCeilingBytesPerCPUS the most one thread
	// reads of a buffer of the weights' size (readCeiling); MaddsPerRow
	// the multiply-adds of the weight products for one token.
	FMAPeakMaddsPerCPUS     float64 `json:"fma_peak_madds_per_cpu_s"`
	ReadCeilingBytesPerCPUS float64 `json:"read_ceiling_bytes_per_cpu_s"`
	MaddsPerRow             int64   `json:"madds_per_row"`
	// A step of r rows costs at least max(weights / read ceiling, r ·
	// multiply-adds per row / FMA peak): one read of every weight, and
	// every row's arithmetic at the peak. Attention, norms and the rest
	// are left out, so these are bounds from below.
	StepMsBatch1      float64 `json:"step_ms_batch1"`
	StepMsBatch16     float64 `json:"step_ms_batch16"`
	Batch16OverBatch1 float64 `json:"step_batch16_over_batch1"`
	// ContinuousOverStatic is batchingSweep's ratio with every step
	// costing the bound instead of a real forward pass: the most the
	// benchmark can show on this core. ContinuousOverStaticAtMeasuredSteps
	// is the same sweep with a step costing the line through the measured
	// decode steps at batch 1 and 16: beside the measured ratio, it says
	// how far the cost model alone explains it.
	ContinuousOverStatic                float64 `json:"continuous_over_static"`
	ContinuousOverStaticAtMeasuredSteps float64 `json:"continuous_over_static_at_measured_steps"`
}

// measureBound fills an llmBound for a model of weightBytes bytes of
// float32 weights and madds multiply-adds a row, given the FMA peak, the
// read ceiling and the measured decode steps (ms) at batch 1 and 16, by
// running batchingSweep on stepCostModels shaped as m.
func measureBound(ctx context.Context, m llmserve.Model, work []llmserve.Request, sz llmSizes, weightBytes, madds int64,
	fmaPeak, ceiling, measured1, measured16 float64) (*llmBound, error) {
	b := &llmBound{FMAPeakMaddsPerCPUS: round3(fmaPeak), ReadCeilingBytesPerCPUS: round3(ceiling), MaddsPerRow: madds}
	if fmaPeak <= 0 || ceiling <= 0 {
		return b, nil // no AVX-512 or AVX2: nothing to bound with
	}
	read := float64(weightBytes) / ceiling
	bound := func(rows int) time.Duration {
		return time.Duration(math.Max(read, float64(rows)*float64(madds)/fmaPeak) * float64(time.Second))
	}
	b.StepMsBatch1, b.StepMsBatch16 = round3(ms(bound(1))), round3(ms(bound(16)))
	b.Batch16OverBatch1 = round3(float64(bound(16)) / float64(bound(1)))
	sweep := func(cost func(rows int) time.Duration) (float64, error) {
		cm := newStepCostModel(m, cost)
		var res llmBatching
		err := batchingSweep(ctx, cm, work, sz, cm.clock, &res)
		return res.ContinuousOverStatic, err
	}
	var err error
	if b.ContinuousOverStatic, err = sweep(bound); err != nil {
		return nil, err
	}
	slope := (measured16 - measured1) / 15
	line := func(rows int) time.Duration {
		return time.Duration((measured1 + slope*float64(rows-1)) * float64(time.Millisecond))
	}
	if b.ContinuousOverStaticAtMeasuredSteps, err = sweep(line); err != nil {
		return nil, err
	}
	return b, nil
}

// stepCostModel is a model of m's shape whose forward pass computes
// nothing and costs cost(rows) of its own clock, rows being the tokens of
// the step: batchingSweep run on it (with its clock as the sweep's)
// measures the schedulers under that cost alone. Its logits are zeros
// (the workload ignores end-of-sequence tokens).
type stepCostModel struct {
	llmserve.Model
	cost func(rows int) time.Duration

	mu  sync.Mutex
	now time.Duration
}

func newStepCostModel(m llmserve.Model, cost func(rows int) time.Duration) *stepCostModel {
	return &stepCostModel{Model: m, cost: cost}
}

// Forward advances the model's clock by the step's cost.
func (s *stepCostModel) Forward(batch []llmserve.Step) [][]float32 {
	rows := 0
	for _, st := range batch {
		rows += len(st.Tokens)
	}
	s.mu.Lock()
	s.now += s.cost(rows)
	s.mu.Unlock()
	out := make([][]float32, len(batch))
	for i := range out {
		out[i] = make([]float32, s.Vocab())
	}
	return out
}

// clock is the model's time: the cost of every step so far.
func (s *stepCostModel) clock() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}
