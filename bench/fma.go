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
	return peakRate(reps, func() (int64, bool) {
		_, madds, ok := fmaSteps(iters, 1e-7, 1)
		return madds, ok
	})
}

// q8DotPeak is one thread's peak rate of llama.cpp's AVX2 Q8_0 block
// product (q8DotPeakAVX2: sign, VPMADDUBSW, VPMADDWD, conversion, scale
// and FMA, on registers only) in multiply-adds per CPU-second, the best
// of reps runs of iters steps: what bounds the Q8_0 products of a step of
// many sequences on a core without AVX-512 VNNI, as fmaPeak bounds the
// float ones. 0 where the CPU has no AVX2 with FMA.
func q8DotPeak(iters, reps int) float64 {
	return peakRate(reps, func() (int64, bool) {
		_, madds, ok := q8DotSteps(iters)
		return madds, ok
	})
}

// peakRate is the best of reps runs of run, in its multiply-adds per
// CPU-second of one thread; 0 when run cannot run here.
func peakRate(reps int, run func() (madds int64, ok bool)) float64 {
	prev := goruntime.GOMAXPROCS(1)
	defer goruntime.GOMAXPROCS(prev)
	best := 0.0
	for range reps {
		c0 := cpuTime()
		madds, ok := run()
		if !ok {
			return 0
		}
		if d := (cpuTime() - c0).Seconds(); d > 0 {
			best = max(best, float64(madds)/d)
		}
	}
	return best
}
