//go:build !purego

package llm

import "golang.org/x/sys/cpu"

// quantAVX512 is whether quantRowQ8_0 runs quantQ8_0AVX512: it needs
// AVX-512 F and BW, whatever kernel set the products use; quantAVX2
// whether it runs quantQ8_0AVX2 instead.
var (
	quantAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW
	quantAVX2   = cpu.X86.HasAVX2 && cpu.X86.HasF16C
)

// quantRowQ8_0 quantises a row of activations to Q8_0 blocks: in
// assembly where the CPU has AVX-512 or AVX2 (at 16 sequences on the
// Q8_0 model the Go loop was an eighth of a step), the same bits as in Go.
func quantRowQ8_0(r *q8Row, x []float32) {
	nb := len(x) / 32
	if nb > 0 && (quantAVX512 || quantAVX2) {
		_, _ = r.q[nb*32-1], r.d[nb-1]
		if quantAVX512 {
			quantQ8_0AVX512(&r.q[0], &r.d[0], &x[0], nb)
		} else {
			quantQ8_0AVX2(&r.q[0], &r.d[0], &x[0], nb)
		}
		return
	}
	quantRowQ8_0Go(r, x)
}

//go:noescape
func quantQ8_0AVX512(q *int8, d *float32, x *float32, nb int)

//go:noescape
func quantQ8_0AVX2(q *int8, d *float32, x *float32, nb int)
