package sim

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"modelplane/engine"
	"modelplane/sim/profile"
)

// poisson returns n requests arriving at rate per second from start, made
// by mk from a generator seeded with seed.
func poisson(seed uint64, n int, rate float64, start time.Duration, mk func(r *rand.Rand, i int) engine.Request) []engine.Request {
	r := rand.New(rand.NewPCG(seed, 0xa1))
	reqs := make([]engine.Request, n)
	at := start
	for i := range reqs {
		at += time.Duration(r.ExpFloat64() / rate * float64(time.Second))
		reqs[i] = mk(r, i)
		reqs[i].Arrival = at
	}
	return reqs
}

func p99TTFT(rep Report, tenant string) (time.Duration, int) {
	var xs []time.Duration
	for _, r := range rep.Results {
		if r.Tenant == tenant {
			xs = append(xs, r.TTFT)
		}
	}
	return engine.PercentilesOf(xs).P99, len(xs)
}

// TestTenantFairness: tenant B sends steady traffic (2 req/s for 300 s of
// 300-token prompts and 150-token completions); 5 s in, tenant A bursts 500
// long generations (200-token prompts, 800 to 1,200 tokens out) at once.
// With each tenant capped at half the batch slots and half the pages, B's
// p99 TTFT with A's burst stays within 20 percent of B's alone. Without the
// caps A's burst sits in front of B and B's p99 TTFT grows many times over,
// which is what the caps are for.
//
// What A still costs B is physics, not queueing: each of A's running
// sequences lengthens every step by decode_ms_per_seq, and A's prefills
// lengthen the steps they fall in. When all of A's generations have the
// same length they finish together and A re-admits a wave of prompts in one
// step; B's arrivals during that step then wait longer, which with 1,000
// tokens each pushed B's p99 up 8 to 27 percent over eight seeds.
func TestTenantFairness(t *testing.T) {
	t.Parallel()
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			b := poisson(seed, 600, 2, 0, func(_ *rand.Rand, i int) engine.Request {
				return engine.Request{ID: fmt.Sprint("b", i), Tenant: "b", PromptTokens: 300, OutputTokens: 150}
			})
			r := rand.New(rand.NewPCG(seed, 0xa))
			var burst []engine.Request
			for i := range 500 {
				burst = append(burst, engine.Request{ID: fmt.Sprint("a", i), Tenant: "a", Arrival: 5 * time.Second, PromptTokens: 200, OutputTokens: 800 + r.IntN(401)})
			}
			both := append(append([]engine.Request(nil), b...), burst...)
			run := func(share float64, reqs []engine.Request) (time.Duration, int, Report) {
				p := seedProfile()
				p.TenantBatchShare, p.TenantKVShare = share, share
				rep := RunVirtual(newScheduler(t, p, seed), reqs)
				p99, n := p99TTFT(rep, "b")
				return p99, n, rep
			}
			alone, nAlone, _ := run(0.5, b)
			with, nWith, rep := run(0.5, both)
			if nAlone != len(b) || nWith != len(b) || rep.Completed != len(both) {
				t.Fatalf("completed %d and %d of B's %d, %d of all %d", nAlone, nWith, len(b), rep.Completed, len(both))
			}
			ratio := float64(with) / float64(alone)
			t.Logf("B p99 TTFT alone %v, with A's burst %v (x%.2f); mean batch %.1f", alone, with, ratio, rep.MeanBatch)
			if ratio > 1.2 {
				t.Errorf("B's p99 TTFT %v with A's burst; want at most 1.2 x %v alone", with, alone)
			}
			if rep.PriorityPreemptions != 0 {
				t.Errorf("%d preemptions; want none: a tenant at its cap waits, nobody is evicted", rep.PriorityPreemptions)
			}
			uncapped, _, _ := run(1, both)
			t.Logf("without caps: B p99 TTFT %v", uncapped)
			if uncapped < 5*alone {
				t.Errorf("without caps B's p99 TTFT is %v, under 5 x %v: the burst should hurt B without caps", uncapped, alone)
			}
		})
	}
}

// mixedRequest is a prompt of 200 to 800 tokens and a completion of 50 to
// 350.
func mixedRequest(r *rand.Rand, i int) engine.Request {
	return engine.Request{ID: fmt.Sprint("r", i), PromptTokens: 200 + r.IntN(601), OutputTokens: 50 + r.IntN(301)}
}

// TestOverload: arrivals at twice the capacity keep the throughput within 10
// percent of capacity, with no preemption at all: admission does not take
// what it cannot finish, so nothing thrashes. Capacity is the throughput
// with the queue never empty (every request queued at once).
func TestOverload(t *testing.T) {
	t.Parallel()
	for _, seed := range []uint64{1, 2} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			saturated := poisson(seed, 600, 1e9, 0, mixedRequest)
			capacity := RunVirtual(newScheduler(t, seedProfile(), seed), saturated)
			rate := 2 * capacity.RequestsPerSecond
			over := RunVirtual(newScheduler(t, seedProfile(), seed), poisson(seed+100, int(rate*120), rate, 0, mixedRequest))
			t.Logf("capacity %.0f tokens/s (%.2f req/s, mean batch %.1f); at 2x arrivals %.0f tokens/s, mean batch %.1f, p50 TTFT %v",
				capacity.TokensPerSecond, capacity.RequestsPerSecond, capacity.MeanBatch, over.TokensPerSecond, over.MeanBatch, over.TTFT.P50)
			if got, want := over.TokensPerSecond, capacity.TokensPerSecond; got < 0.9*want || got > 1.1*want {
				t.Errorf("throughput at 2x arrivals %.0f tokens/s; want within 10%% of capacity %.0f", got, want)
			}
			for _, rep := range []Report{capacity, over} {
				if rep.PriorityPreemptions+rep.GrowthPreemptions+rep.GrowFailures != 0 {
					t.Errorf("%d + %d preemptions, %d grow failures; want none", rep.PriorityPreemptions, rep.GrowthPreemptions, rep.GrowFailures)
				}
			}
		})
	}
}

// TestStreamedEqualsCompletion: for every request of a mixed virtual run,
// under every reserve policy, with priorities and shared prefixes, the
// number of streamed tokens equals the usage block's completion tokens.
func TestStreamedEqualsCompletion(t *testing.T) {
	t.Parallel()
	for _, reserve := range []profile.Reserve{profile.ReserveFinal, profile.ReserveMaxTokens, profile.ReserveStep} {
		t.Run(string(reserve), func(t *testing.T) {
			t.Parallel()
			p := seedProfile()
			p.KVReserve, p.MaxPrefillTokens = reserve, 512
			p.OutputTokens = &profile.LengthDist{Mean: 150, SD: 100, Max: 600}
			reqs := poisson(7, 2000, 40, 0, func(r *rand.Rand, i int) engine.Request {
				q := engine.Request{ID: fmt.Sprint("r", i), Tenant: fmt.Sprint("t", r.IntN(4)), Priority: r.IntN(2), PromptTokens: 1 + r.IntN(1500), MaxTokens: 400}
				if r.IntN(2) == 0 {
					q.PrefixKey, q.PrefixTokens = "sys", 256
				}
				return q
			})
			rep := RunVirtual(newScheduler(t, p, 7), reqs)
			if rep.Completed+rep.Rejected != len(reqs) || rep.Stalled != 0 {
				t.Fatalf("completed %d + rejected %d of %d, %d stalled", rep.Completed, rep.Rejected, len(reqs), rep.Stalled)
			}
			if rep.StreamErrors != 0 || rep.GrowFailures != 0 {
				t.Errorf("%d stream errors, %d grow failures; want none", rep.StreamErrors, rep.GrowFailures)
			}
			for _, r := range rep.Results {
				if r.Streamed != r.CompletionTokens {
					t.Errorf("%s: streamed %d tokens; usage says %d", r.ID, r.Streamed, r.CompletionTokens)
				}
			}
			if rep.StreamedTokens != rep.CompletionTokens {
				t.Errorf("streamed %d tokens in all; usage says %d", rep.StreamedTokens, rep.CompletionTokens)
			}
			t.Logf("%s: %d preempted for priority, %d for growth", reserve, rep.PriorityPreemptions, rep.GrowthPreemptions)
		})
	}
}

// TestPrefixSharing: requests sharing a 512-token system prompt hold fewer
// pages and prefill less, so they start sooner, than the same requests
// without the shared prefix.
func TestPrefixSharing(t *testing.T) {
	t.Parallel()
	mk := func(key string) []engine.Request {
		return poisson(3, 300, 8, 0, func(r *rand.Rand, i int) engine.Request {
			return engine.Request{ID: fmt.Sprint("r", i), PromptTokens: 512 + 1 + r.IntN(200), OutputTokens: 100, PrefixKey: key, PrefixTokens: 512}
		})
	}
	plain := RunVirtual(newScheduler(t, seedProfile(), 3), mk(""))
	shared := RunVirtual(newScheduler(t, seedProfile(), 3), mk("system-prompt-v1"))
	t.Logf("prefill tokens %d -> %d, mean KV use %.3f -> %.3f, p50 TTFT %v -> %v, p99 TTFT %v -> %v",
		plain.PrefillTokens, shared.PrefillTokens, plain.MeanKVUtilization, shared.MeanKVUtilization,
		plain.TTFT.P50, shared.TTFT.P50, plain.TTFT.P99, shared.TTFT.P99)
	if plain.CachedTokens != 0 || plain.PrefillTokens != plain.PromptTokens {
		t.Errorf("without a prefix key: %d cached, %d of %d prefilled; want 0 cached, all prefilled", plain.CachedTokens, plain.PrefillTokens, plain.PromptTokens)
	}
	// All but the first request (and any admitted before its prefix was
	// computed) reuse the 32 pages of the prefix.
	if min := int64(512 * (len(shared.Results) - 2)); shared.CachedTokens < min {
		t.Errorf("cached %d prompt tokens; want at least %d", shared.CachedTokens, min)
	}
	if shared.PrefillTokens+shared.CachedTokens != shared.PromptTokens {
		t.Errorf("prefilled %d + cached %d != prompt %d", shared.PrefillTokens, shared.CachedTokens, shared.PromptTokens)
	}
	if shared.MeanKVUtilization >= 0.5*plain.MeanKVUtilization {
		t.Errorf("mean KV use %.3f with sharing; want under half of %.3f", shared.MeanKVUtilization, plain.MeanKVUtilization)
	}
	if shared.TTFT.P50 >= plain.TTFT.P50 {
		t.Errorf("p50 TTFT %v with sharing; want under %v", shared.TTFT.P50, plain.TTFT.P50)
	}
}

// TestDeterminism: the same seed and arrivals give the identical report;
// another seed draws other completion lengths; a request's token ids do not
// depend on what else runs.
func TestDeterminism(t *testing.T) {
	t.Parallel()
	p := seedProfile()
	p.OutputTokens = &profile.LengthDist{Mean: 120, SD: 80}
	p.TenantBatchShare, p.TenantKVShare = 0.5, 0.5
	reqs := poisson(11, 800, 12, 0, func(r *rand.Rand, i int) engine.Request {
		return engine.Request{ID: fmt.Sprint("r", i), Tenant: fmt.Sprint("t", r.IntN(3)), Priority: r.IntN(2), PromptTokens: 1 + r.IntN(900), PrefixKey: "sys", PrefixTokens: r.IntN(300)}
	})
	a := RunVirtual(newScheduler(t, p, 42), reqs)
	b := RunVirtual(newScheduler(t, p, 42), reqs)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("two runs with seed 42 differ: %+v vs %+v", a.TTFT, b.TTFT)
	}
	c := RunVirtual(newScheduler(t, p, 43), reqs)
	if a.CompletionTokens == c.CompletionTokens {
		t.Errorf("seeds 42 and 43 both made %d completion tokens; want other draws", a.CompletionTokens)
	}

	tokens := func(extra int) []int {
		s := newScheduler(t, seedProfile(), 5)
		_ = s.Submit(engine.Request{ID: "x", PromptTokens: 50, OutputTokens: 40})
		for i := range extra {
			_ = s.Submit(engine.Request{ID: fmt.Sprint("other", i), PromptTokens: 30, OutputTokens: 60})
		}
		var got []int
		for _, res := range stepAll(t, s) {
			for _, ev := range res.Events {
				if ev.ID == "x" {
					got = append(got, ev.Token)
				}
			}
		}
		return got
	}
	if alone, crowded := tokens(0), tokens(20); !reflect.DeepEqual(alone, crowded) {
		t.Errorf("x's tokens alone %v; among 20 others %v", alone, crowded)
	}
}

// TestSeedCapacity measures how many sequences of a 500-token prompt and a
// 200-token completion one GPU of the seed documents (0.8 MB/token, 13 GB
// usable, 1,015 pages of 16 tokens) holds at once, and compares it with
// contiguous max-length reservation. The seed documents claim ~45 paged
// against ~23 contiguous; 45 cannot fit: 45 prompts alone need
// 45 × 32 = 1,440 pages.
func TestSeedCapacity(t *testing.T) {
	t.Parallel()
	p := seedProfile()
	kv := engine.NewKV(p.Pages(), p.PageTokens)
	atAdmission := p.Pages() / kv.PagesFor(500) // 32 pages each
	atFinish := p.Pages() / kv.PagesFor(700)    // 44 pages each
	contiguous := func(maxLen int) int {
		return int(int64(p.UsableGB*1e9) / (int64(maxLen) * p.KVBytesPerToken()))
	}
	if atAdmission != 31 || atFinish != 23 || contiguous(700) != 23 || contiguous(2048) != 7 || contiguous(4096) != 3 {
		t.Errorf("arithmetic: %d at admission, %d at finish, contiguous %d/%d/%d for 700/2048/4096 tokens; want 31, 23, 23/7/3",
			atAdmission, atFinish, contiguous(700), contiguous(2048), contiguous(4096))
	}
	if need := 45 * kv.PagesFor(500); need <= p.Pages() {
		t.Errorf("45 prompts need %d pages; the seed claim would fit", need)
	}

	tests := []struct {
		reserve       profile.Reserve
		wantMaxBatch  int
		wantPreempted bool
	}{
		{profile.ReserveFinal, 23, false},
		{profile.ReserveMaxTokens, 23, false},
		{profile.ReserveStep, 31, true},
	}
	for _, tt := range tests {
		t.Run(string(tt.reserve), func(t *testing.T) {
			t.Parallel()
			p := seedProfile()
			p.KVReserve = tt.reserve
			// A steady overload: arrivals at twice what the GPU serves.
			reqs := poisson(1, 3000, 12, 0, func(_ *rand.Rand, i int) engine.Request {
				return engine.Request{ID: fmt.Sprint(i), PromptTokens: 500, OutputTokens: 200, MaxTokens: 200}
			})
			rep := RunVirtual(newScheduler(t, p, 1), reqs)
			t.Logf("%s: max batch %d, mean batch %.1f, mean KV use %.1f%%, %.0f tokens/s, p50/p99 TPOT %v/%v, %d growth preemptions per %d requests",
				tt.reserve, rep.MaxBatch, rep.MeanBatch, 100*rep.MeanKVUtilization, rep.TokensPerSecond, rep.TPOT.P50, rep.TPOT.P99, rep.GrowthPreemptions, rep.Completed)
			if rep.MaxBatch != tt.wantMaxBatch {
				t.Errorf("max batch %d; want %d", rep.MaxBatch, tt.wantMaxBatch)
			}
			if got := rep.GrowthPreemptions > 0; got != tt.wantPreempted {
				t.Errorf("%d growth preemptions; want some: %v", rep.GrowthPreemptions, tt.wantPreempted)
			}
			if rep.GrowFailures != 0 || rep.Completed != len(reqs) {
				t.Errorf("%d grow failures, %d of %d completed", rep.GrowFailures, rep.Completed, len(reqs))
			}
		})
	}
}
