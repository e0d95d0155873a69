//go:build !purego

package llm

import "golang.org/x/sys/cpu"

var siluAVX2 = cpu.X86.HasAVX2

// siluMul sets g[i] = silu(g[i])·u[i]: eight at a time in assembly where
// the CPU has AVX2, the same bits as siluMulGo.
func siluMul(g, u []float32) {
	m := len(g) &^ 7
	if siluAVX2 && m > 0 {
		_ = u[m-1]
		siluMulAVX2(&g[0], &u[0], m)
	}
	siluMulGo(g[m:], u[m:len(g)])
}

//go:noescape
func siluMulAVX2(gp, up *float32, n int)
