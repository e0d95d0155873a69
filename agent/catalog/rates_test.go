package catalog_test

import (
	"testing"
	"time"

	"modelplane/agent/catalog"
)

func TestRatesTurnCountersIntoTokensPerSecondAndMeanTTFT(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var r catalog.Rates
	steps := []struct {
		name     string
		after    time.Duration
		m        catalog.Metrics
		tps, ttf float64
	}{
		{"first reading has no rate", 0, catalog.Metrics{Tokens: 100, TTFTSeconds: 1, TTFTCount: 10}, 0, 0},
		{"two seconds later", 2 * time.Second, catalog.Metrics{Tokens: 500, TTFTSeconds: 1.5, TTFTCount: 15}, 200, 100},
		{"a reading too soon keeps the last result", 2500 * time.Millisecond, catalog.Metrics{Tokens: 900, TTFTSeconds: 9, TTFTCount: 16}, 200, 100},
		{"no new first token keeps the last mean", 4 * time.Second, catalog.Metrics{Tokens: 700, TTFTSeconds: 1.5, TTFTCount: 15}, 100, 100},
		{"a counter going down is a restarted runtime", 5 * time.Second, catalog.Metrics{Tokens: 10, TTFTSeconds: 0.1, TTFTCount: 1}, 0, 0},
	}
	for _, s := range steps {
		got := r.Update(t0.Add(s.after), s.m)
		if got.TokensPerSecond != s.tps || got.TTFTMS != s.ttf {
			t.Errorf("%s: tokens/s %v, TTFT %v ms; want %v and %v", s.name, got.TokensPerSecond, got.TTFTMS, s.tps, s.ttf)
		}
	}
}

// The batcher's queue time in the heartbeat is the mean wait of the
// requests answered since the last reading, from Triton's since-start
// mean and its request counter.
func TestRatesTurnTheSinceStartQueueMeanIntoTheLastSeconds(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var r catalog.Rates
	steps := []struct {
		name  string
		after time.Duration
		m     catalog.Metrics
		want  float64
	}{
		{"first reading: the mean since start", 0, catalog.Metrics{Requests: 100, BatchQueueMS: 2}, 2},
		// 100 more requests, queue total 200 ms → 1200 ms: 10 ms each.
		{"the requests in between", 2 * time.Second, catalog.Metrics{Requests: 200, BatchQueueMS: 6}, 10},
		{"too soon keeps the last", 2500 * time.Millisecond, catalog.Metrics{Requests: 300, BatchQueueMS: 4}, 10},
		{"no request in between: nobody waited", 4 * time.Second, catalog.Metrics{Requests: 200, BatchQueueMS: 6}, 0},
		{"the counter going down starts over", 5 * time.Second, catalog.Metrics{Requests: 10, BatchQueueMS: 3}, 3},
	}
	for _, s := range steps {
		if got := r.Update(t0.Add(s.after), s.m).BatchQueueMS; got != s.want {
			t.Errorf("%s: batch queue %v ms, want %v", s.name, got, s.want)
		}
	}
}

// From vLLM's queue-time histogram the heartbeat's queue time is the mean
// wait of the requests that started in between: its sum and count, not
// the requests answered.
func TestRatesTakeVLLMQueueTimeOverItsOwnCount(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var r catalog.Rates
	// 40 requests waited 2 ms each; 10 answered.
	if got := r.Update(t0, catalog.Metrics{Requests: 10, BatchQueueMS: 2, QueueCount: 40}).BatchQueueMS; got != 2 {
		t.Errorf("first reading: %v ms, want the mean since start, 2", got)
	}
	// 60 more started, waiting 300 ms in all (5 ms each); 90 more answered.
	if got := r.Update(t0.Add(2*time.Second), catalog.Metrics{Requests: 100, BatchQueueMS: 3.8, QueueCount: 100}).BatchQueueMS; got != 5 {
		t.Errorf("after 60 more: %v ms, want 5, the mean of those 60", got)
	}
}
