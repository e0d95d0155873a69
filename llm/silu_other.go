//go:build !amd64 || purego

package llm

// siluMul sets g[i] = silu(g[i])·u[i].
func siluMul(g, u []float32) { siluMulGo(g, u) }
