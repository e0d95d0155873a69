package bench

import "testing"

// The peak loop does every step into every accumulator: sixteen chains of
// iters multiply-adds of 0.5 × 2 sum to exactly 16·iters.
func TestFMAPeakRunsEveryStep(t *testing.T) {
	t.Parallel()
	for _, iters := range []int{0, 1, 1000} {
		fold, madds, ok := fmaSteps(iters, 0.5, 2)
		if !ok {
			t.Skip("no AVX-512 here: fmaPeak reports 0")
		}
		if want := float32(16 * iters); fold != want {
			t.Errorf("%d steps: fold %v, want %v", iters, fold, want)
		}
		if want := int64(256 * iters); madds != want {
			t.Errorf("%d steps: %d multiply-adds, want %d", iters, madds, want)
		}
	}
	if peak := fmaPeak(1_000_000, 2); peak <= 0 {
		t.Errorf("peak %v multiply-adds a second, want above 0", peak)
	}
}
