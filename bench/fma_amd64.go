//go:build !purego

package bench

import "golang.org/x/sys/cpu"

// fmaSteps runs fmaPeak512's loop iters times and returns its fold and the
// multiply-adds it did, or ok false where the CPU has no AVX-512.
func fmaSteps(iters int, a, b float32) (fold float32, madds int64, ok bool) {
	if !cpu.X86.HasAVX512F {
		return 0, 0, false
	}
	return fmaPeak512(iters, a, b), int64(iters) * fmaStepMadds, true
}

// fmaStepMadds are the multiply-adds of one step of fmaPeak512: sixteen
// FMAs of sixteen lanes.
const fmaStepMadds = 16 * 16

//go:noescape
func fmaPeak512(iters int, a, b float32) float32
