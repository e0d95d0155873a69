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

//go:noescape
func fmaPeak512(iters int, a, b float32) float32

//go:noescape
func fmaPeakAVX2(iters int, a, b float32) float32
