package process

import (
	"testing"
	"time"

	"modelplane/agent/catalog"
)

func TestRatesTurnCountersIntoTokensPerSecondAndMeanTTFT(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var r rates
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
		tps, ttft := r.update(t0.Add(s.after), s.m)
		if tps != s.tps || ttft != s.ttf {
			t.Errorf("%s: tokens/s %v, TTFT %v ms; want %v and %v", s.name, tps, ttft, s.tps, s.ttf)
		}
	}
}
