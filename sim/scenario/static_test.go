package scenario

import (
	"context"
	"strings"
	"testing"
	"time"

	"modelplane/engine"
	"modelplane/sim/profile"
)

func msDur(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }

// TestRunStatic checks the static engine against schedules worked by hand.
// The profile: base 10 ms, 1 ms per sequence, 0.1 ms per prompt token, and
// a cache of 10 pages of 16 tokens.
func TestRunStatic(t *testing.T) {
	t.Parallel()
	p := profile.Profile{DecodeBaseMs: 10, DecodeMsPerSeq: 1, PrefillMsPerToken: 0.1, KVMBPerToken: 1, UsableGB: 0.16}
	req := func(id string, at time.Duration, prompt, out int) engine.Request {
		return engine.Request{ID: id, Arrival: at, PromptTokens: prompt, OutputTokens: out}
	}
	tests := []struct {
		name     string
		batch    int
		reqs     []engine.Request
		wantE2E  []time.Duration // sorted
		wantDur  time.Duration
		batches  int
		rejected int
	}{
		{
			// One batch of two: prefill 10 + 0.1 × 20 = 12 ms gives both first
			// tokens; each decode step is 10 + 1 × 2 = 12 ms, the finished
			// sequence's slot included. a ends after 3 tokens at 36 ms, b
			// after 5 at 60 ms.
			name: "together", batch: 4,
			reqs:    []engine.Request{req("a", 0, 10, 3), req("b", 0, 10, 5)},
			wantE2E: []time.Duration{msDur(36), msDur(60)}, wantDur: msDur(60), batches: 1,
		},
		{
			// Batch size 1: a runs alone (11 + 2 × 11 = 33 ms), then b
			// (33 + 11 + 4 × 11 = 88 ms).
			name: "one at a time", batch: 1,
			reqs:    []engine.Request{req("a", 0, 10, 3), req("b", 0, 10, 5)},
			wantE2E: []time.Duration{msDur(33), msDur(88)}, wantDur: msDur(88), batches: 2,
		},
		{
			// b arrives while a's batch runs and waits for all of it: a takes
			// 11 + 9 × 11 = 110 ms; b starts then and ends at 110 + 11 = 121,
			// 116 ms after it arrived.
			name: "late arrival waits for the batch", batch: 4,
			reqs:    []engine.Request{req("a", 0, 10, 10), req("b", msDur(5), 10, 1)},
			wantE2E: []time.Duration{msDur(110), msDur(116)}, wantDur: msDur(121), batches: 2,
		},
		{
			// Padded to 60 + 20 = 80 tokens, 5 pages each: two fit the 10
			// pages, the third waits for the next batch. The first batch
			// prefills 70 tokens (17 ms) and decodes 19 steps of 12 ms: 245
			// ms; c then takes 10 + 1 = 11 ms.
			name: "the cache caps the batch", batch: 8,
			reqs:    []engine.Request{req("a", 0, 60, 1), req("b", 0, 10, 20), req("c", 0, 10, 1)},
			wantE2E: []time.Duration{msDur(17), msDur(245), msDur(256)}, wantDur: msDur(256), batches: 2,
		},
		{
			name: "too large alone", batch: 8,
			reqs:    []engine.Request{req("a", 0, 200, 1), req("b", 0, 10, 1)},
			wantE2E: []time.Duration{msDur(11)}, wantDur: msDur(11), batches: 1, rejected: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rep, err := RunStatic(p, tt.batch, tt.reqs)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Batches != tt.batches || rep.Rejected != tt.rejected || rep.Duration != tt.wantDur {
				t.Errorf("%d batches, %d rejected, took %v; want %d, %d, %v", rep.Batches, rep.Rejected, rep.Duration, tt.batches, tt.rejected, tt.wantDur)
			}
			if want := engine.PercentilesOf(tt.wantE2E); rep.E2E != want {
				t.Errorf("e2e %+v; want %+v", rep.E2E, want)
			}
		})
	}
	if _, err := RunStatic(p, 1, []engine.Request{{ID: "x", PromptTokens: 5}}); err == nil || !strings.Contains(err.Error(), "fixed completion length") {
		t.Errorf("a request without a completion length: %v; want an error", err)
	}
}

// TestCompareBatching: on the seed fleet's GPU and length mix, continuous
// batching serves more at the same median latency than static batching,
// and both medians sit at the target.
func TestCompareBatching(t *testing.T) {
	t.Parallel()
	s, err := Builtin("seed-fleet")
	if err != nil {
		t.Fatal(err)
	}
	c, err := CompareBatching(context.Background(), s, "v42", 300)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", c)
	if c.CapacityRPS < 3 || c.CapacityRPS > 7 {
		t.Errorf("capacity %.2f req/s; want 3 to 7 for v42's GPU", c.CapacityRPS)
	}
	if c.ContinuousMedian > c.LatencyTarget || c.StaticMedian > c.LatencyTarget || c.StaticRPS <= 0 {
		t.Errorf("medians %.0f and %.0f ms, target %.0f; static %.3f req/s", c.ContinuousMedian, c.StaticMedian, c.LatencyTarget, c.StaticRPS)
	}
	if c.Ratio < 2 {
		t.Errorf("continuous/static %.2f at equal median latency; want at least 2", c.Ratio)
	}
	if c.StaticCapacityRPS >= c.CapacityRPS {
		t.Errorf("static batching's capacity %.2f req/s; want under continuous batching's %.2f", c.StaticCapacityRPS, c.CapacityRPS)
	}
	if _, err := CompareBatching(context.Background(), s, "v9", 300); err == nil {
		t.Error("comparing a version the scenario lacks succeeded")
	}
}
