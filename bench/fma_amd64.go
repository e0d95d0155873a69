//go:build !purego

package bench

import "golang.org/x/sys/cpu"

// fmaSteps runs the peak loop the CPU has (fmaPeak512 with AVX-512,
// fmaPeakAVX2 with AVX2 and FMA) iters times and returns its fold and the
// multiply-adds it did, or ok false where it has neither.
func fmaSteps(iters int, a, b float32) (fold float32, madds int64, ok bool) {
	switch {
	case cpu.X86.HasAVX512F:
		return fmaPeak512(iters, a, b), int64(iters) * 16 * 16, true
	case cpu.X86.HasAVX2 && cpu.X86.HasFMA:
		return fmaPeakAVX2(iters, a, b), int64(iters) * 14 * 8, true
	}
	return 0, 0, false
}

// fmaLanes is the float32 lanes of one FMA of the peak loop fmaSteps runs.
func fmaLanes() int {
	if cpu.X86.HasAVX512F {
		return 16
	}
	return 8
}

// q8DotSteps runs q8DotPeakAVX2 iters times and returns its fold and the
// multiply-adds it did (32 a block product), or ok false where the CPU
// has no AVX2 with FMA.
func q8DotSteps(iters int) (fold float32, madds int64, ok bool) {
	if !cpu.X86.HasAVX2 || !cpu.X86.HasFMA {
		return 0, 0, false
	}
	return q8DotPeakAVX2(iters), int64(iters) * 8 * 32, true
}

//go:noescape
func q8DotPeakAVX2(iters int) float32

//go:noescape
func fmaPeak512(iters int, a, b float32) float32

//go:noescape
func fmaPeakAVX2(iters int, a, b float32) float32
