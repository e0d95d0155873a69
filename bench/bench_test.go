package bench

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestQuantileRanksDown(t *testing.T) {
	t.Parallel()
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(100-i) * time.Millisecond // unsorted on purpose
	}
	tests := []struct {
		name string
		d    []time.Duration
		q    float64
		want time.Duration
	}{
		{"no samples are zero", nil, 0.99, 0},
		{"one sample is every quantile", []time.Duration{7}, 0.5, 7},
		{"the median of three is the middle one", []time.Duration{3, 1, 2}, 0.5, 2},
		{"p99 of 1..100 ms is rank 98, 99 ms", hundred, 0.99, 99 * time.Millisecond},
		{"p50 of 1..100 ms is rank 49, 50 ms", hundred, 0.50, 50 * time.Millisecond},
		{"p100 is the largest", []time.Duration{5, 9, 1}, 1, 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := quantile(slices.Clone(tt.d), tt.q); got != tt.want {
				t.Errorf("quantile(%v, %v) = %v, want %v", tt.d, tt.q, got, tt.want)
			}
		})
	}
}

func TestPercentileIsMillisecondsToTheMicrosecond(t *testing.T) {
	t.Parallel()
	d := []time.Duration{1234567 * time.Nanosecond}
	if got, want := percentile(d, 0.5), 1.234; got != want {
		t.Errorf("percentile(1.234567 ms) = %v, want %v", got, want)
	}
	if got, want := round3(0.1+0.2), 0.3; got != want {
		t.Errorf("round3(0.1+0.2) = %v, want %v", got, want)
	}
}

// TestUsageNamesEveryBenchmark keeps the usage text and the dispatch table
// the same list, so that a new benchmark cannot be left out of either.
func TestUsageNamesEveryBenchmark(t *testing.T) {
	t.Parallel()
	var named []string
	for _, line := range strings.Split(Usage, "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "usage:"))
		if len(f) < 3 || f[0] != "modelplane" || f[1] != "bench" {
			t.Fatalf("usage line %q is not `modelplane bench NAME ...`", line)
		}
		named = append(named, f[2])
	}
	var runnable []string
	for name := range benchmarks {
		runnable = append(runnable, name)
	}
	slices.Sort(named)
	slices.Sort(runnable)
	if !slices.Equal(named, runnable) {
		t.Errorf("usage names %v, Run runs %v", named, runnable)
	}
}

func TestRunRefusesWithoutOneKnownName(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{nil, {"nope"}, {"api", "engine"}} {
		err := Run(context.Background(), Config{}, args, io.Discard)
		if err == nil || err.Error() != Usage {
			t.Errorf("Run(%q) = %v, want the usage", args, err)
		}
	}
}
