//go:build !purego

package llm

import "golang.org/x/sys/cpu"

// kern is the kernel set in use, chosen once by what the CPU has: AVX2
// with FMA and F16C (every x86 server since 2013), else pure Go.
var kern = pickKernels()

// kernelSets are the sets this machine can run, for the tests.
var kernelSets = availableKernels()

func availableKernels() []kernelSet {
	sets := []kernelSet{goKernels}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C {
		sets = append(sets, avx2Kernels)
	}
	return sets
}

func pickKernels() kernelSet {
	s := availableKernels()
	return s[len(s)-1]
}

var avx2Kernels = kernelSet{
	name: "avx2",
	f32: func(dst []float32, ds int, x []float32, xs int, w []float32, rows int) {
		n := len(w)
		m := n &^ 7
		_ = dst[(rows-1)*ds]
		_ = x[(rows-1)*xs+n-1]
		if m > 0 {
			f32DotAVX2(&dst[0], ds, &x[0], xs, &w[0], m, rows)
		} else {
			for k := range rows {
				dst[k*ds] = 0
			}
		}
		if m < n { // the tail past the last eight, in Go, after
			for k := range rows {
				dst[k*ds] += dotGo(x[k*xs+m:k*xs+n], w[m:])
			}
		}
	},
	f16: func(dst []float32, ds int, x []float32, xs int, w []byte, rows int) {
		n := len(w) / 2
		m := n &^ 7
		_ = dst[(rows-1)*ds]
		_ = x[(rows-1)*xs+n-1]
		if m > 0 {
			f16DotAVX2(&dst[0], ds, &x[0], xs, &w[0], m, rows)
		} else {
			for k := range rows {
				dst[k*ds] = 0
			}
		}
		if m < n {
			for k := range rows {
				dst[k*ds] += dotF16Go(x[k*xs+m:k*xs+n], w[2*m:])
			}
		}
	},
	q8_0: qKernel(q8_0DotAVX2, q8_0Bytes),
	q4_0: qKernel(q4_0DotAVX2, q4_0Bytes),
	q4_K: eachRow(dotQ4_KGo),
	q6_K: eachRow(dotQ6_KGo),
}

// qKernel wraps an assembly kernel of Q8_0-activation blocks. The rows of
// x must be consecutive rows of one acts: prepare lays each row's values
// and scales right after the previous row's, so the strides are a row's
// lengths.
func qKernel(k func(dst *float32, ds int, xq *int8, xqs int, xd *float32, xds int, w *byte, nb int, rows int), blockBytes int) func(dst []float32, ds int, x []q8Row, w []byte, rows int) {
	return func(dst []float32, ds int, x []q8Row, w []byte, rows int) {
		nb := len(x[0].d)
		_ = dst[(rows-1)*ds]
		_ = w[nb*blockBytes-1]
		if nb == 0 {
			for k := range rows {
				dst[k*ds] = 0
			}
			return
		}
		// prepare lays row i+1 right after row i: the strides are a row's lengths.
		xqs, xds := len(x[0].q), len(x[0].d)
		_ = x[rows-1].q[xqs-1]
		k(&dst[0], ds, &x[0].q[0], xqs, &x[0].d[0], xds, &w[0], nb, rows)
	}
}

//go:noescape
func f32DotAVX2(dst *float32, ds int, x *float32, xs int, w *float32, n int, rows int)

//go:noescape
func f16DotAVX2(dst *float32, ds int, x *float32, xs int, w *byte, n int, rows int)

//go:noescape
func q8_0DotAVX2(dst *float32, ds int, xq *int8, xqs int, xd *float32, xds int, w *byte, nb int, rows int)

//go:noescape
func q4_0DotAVX2(dst *float32, ds int, xq *int8, xqs int, xd *float32, xds int, w *byte, nb int, rows int)
