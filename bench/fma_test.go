package bench

import "testing"

// The peak loop does every step into every accumulator: each chain's
// iters multiply-adds of 0.5 × 2 sum to exactly iters, so the fold (the
// chains' first lanes) is the multiply-adds over the lanes, and a step is
// the same multiply-adds whatever the steps.
func TestFMAPeakRunsEveryStep(t *testing.T) {
	t.Parallel()
	_, step, ok := fmaSteps(1, 0.5, 2)
	if !ok {
		t.Skip("no AVX2 or AVX-512 here: fmaPeak reports 0")
	}
	if step%int64(fmaLanes()) != 0 || step/int64(fmaLanes()) < 8 {
		t.Fatalf("a step does %d multiply-adds of %d lanes: want eight chains or more", step, fmaLanes())
	}
	for _, iters := range []int{0, 1, 1000} {
		fold, madds, _ := fmaSteps(iters, 0.5, 2)
		if want := int64(iters) * step; madds != want {
			t.Errorf("%d steps: %d multiply-adds, want %d", iters, madds, want)
		}
		if want := float32(madds / int64(fmaLanes())); fold != want {
			t.Errorf("%d steps: fold %v, want %v", iters, fold, want)
		}
	}
	if peak := fmaPeak(1_000_000, 2); peak <= 0 {
		t.Errorf("peak %v multiply-adds a second, want above 0", peak)
	}
}

// The Q8_0 peak loop does every block product of every step: each of its
// 32 products of ones adds 0.5·0.25 to a lane's four, 0.5 a step to each
// of eight accumulators' first lanes.
func TestQ8DotPeakRunsEveryStep(t *testing.T) {
	t.Parallel()
	for _, iters := range []int{0, 1, 1000} {
		fold, madds, ok := q8DotSteps(iters)
		if !ok {
			t.Skip("no AVX2 here: q8DotPeak reports 0")
		}
		if want := float32(4 * iters); fold != want {
			t.Errorf("%d steps: fold %v, want %v", iters, fold, want)
		}
		if want := int64(256 * iters); madds != want {
			t.Errorf("%d steps: %d multiply-adds, want %d", iters, madds, want)
		}
	}
	if peak := q8DotPeak(100_000, 2); peak <= 0 {
		t.Errorf("peak %v multiply-adds a second, want above 0", peak)
	}
}
