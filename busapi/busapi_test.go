package busapi_test

import (
	"math"
	"testing"

	"modelplane/busapi"
)

// hist is a histogram with n in each of the given buckets.
func hist(n uint64, buckets ...int) []uint64 {
	h := make([]uint64, busapi.LatencyBuckets)
	for _, b := range buckets {
		h[b] += n
	}
	return h
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

func TestQuantile(t *testing.T) {
	t.Parallel()
	b := busapi.LatencyBoundsUS()
	tests := []struct {
		name string
		h    []uint64
		q    float64
		want float64
	}{
		{"empty", make([]uint64, busapi.LatencyBuckets), 0.5, 0},
		{"first bucket from zero", hist(10, 0), 0.5, float64(b[0]) / 2 / 1000},
		{"middle of a bucket", hist(100, 5), 0.5, (float64(b[4]) + float64(b[5]-b[4])*0.5) / 1000},
		{"p99 in upper bucket", func() []uint64 { h := hist(98, 2); h[10] = 2; return h }(), 0.99,
			(float64(b[9]) + float64(b[10]-b[9])*0.5) / 1000},
		{"open last bucket reads as last bound", hist(4, busapi.LatencyBuckets-1), 0.5, float64(b[len(b)-1]) / 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := busapi.QuantileMS(tt.h, tt.q); !near(got, tt.want) {
				t.Errorf("QuantileMS = %v, want %v", got, tt.want)
			}
		})
	}
}
