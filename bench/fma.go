package bench

import goruntime "runtime"

// fmaPeak is one thread's peak float32 multiply-add rate here, in
// multiply-adds per CPU-second: the best of reps runs of fmaSteps (FMAs on
// registers only, enough independent chains to fill every FMA port), each
// iters steps long and timed by the process's CPU time as the engines'
// tokens/s are. It is the bound of any float32 kernel's arithmetic on one
// core: a step of many sequences, where each weight feeds one multiply-add
// per sequence, costs at least its multiply-adds over this. 0 where the
// CPU has neither AVX-512 nor AVX2 with FMA.
func fmaPeak(iters, reps int) float64 {
	prev := goruntime.GOMAXPROCS(1)
	defer goruntime.GOMAXPROCS(prev)
	best := 0.0
	for range reps {
		c0 := cpuTime()
		_, madds, ok := fmaSteps(iters, 1e-7, 1)
		if !ok {
			return 0
		}
		if d := (cpuTime() - c0).Seconds(); d > 0 {
			best = max(best, float64(madds)/d)
		}
	}
	return best
}
