package judge

import "modelplane/busapi"

// QuantileMS returns the q-quantile, in milliseconds, of a histogram over
// busapi.LatencyBoundsUS (the request statistics' buckets), interpolating linearly inside the bucket that
// holds the rank q·total; the open last bucket reads as the last bound.
// It is zero for an empty histogram.
func QuantileMS(h []uint64, q float64) float64 {
	var total uint64
	for _, n := range h {
		total += n
	}
	if total == 0 {
		return 0
	}
	bounds := busapi.LatencyBoundsUS()
	rank := q * float64(total)
	var below uint64
	for i, n := range h {
		if n == 0 || float64(below+n) < rank {
			below += n
			continue
		}
		if i >= len(bounds) {
			break
		}
		lo := 0.0
		if i > 0 {
			lo = float64(bounds[i-1])
		}
		hi := float64(bounds[i])
		us := lo + (hi-lo)*(rank-float64(below))/float64(n)
		return us / 1000
	}
	return float64(bounds[len(bounds)-1]) / 1000
}
