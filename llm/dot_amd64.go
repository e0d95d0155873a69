//go:build !purego

package llm

// On amd64 attention's dot products are SSE: a vector of four lanes is
// exactly dotGo's s0..s3 (MULPS then ADDPS, each rounded), so the results
// are dotGo's bit for bit. SSE is in every amd64, so there is no CPU
// check. The matrix products are in matmul_amd64.s.

// dots sets dst[c] = dot(q, k[c·ks : c·ks+len(q)]) for c < len(dst): a
// query against the keys of consecutive positions.
func dots(dst, q, k []float32, ks int) {
	if len(dst) == 0 || len(q) == 0 {
		return
	}
	_ = k[(len(dst)-1)*ks+len(q)-1]
	dotsSSE(&dst[0], &q[0], &k[0], ks, len(dst), len(q))
}

// axpys adds a[c]·v[c·vs : c·vs+len(dst)] to dst for c = 0, 1, … in
// turn: the values of consecutive positions, weighted.
func axpys(dst, v []float32, vs int, a []float32) {
	if len(dst) == 0 || len(a) == 0 {
		return
	}
	_ = v[(len(a)-1)*vs+len(dst)-1]
	axpysSSE(&dst[0], &v[0], vs, &a[0], len(a), len(dst))
}

//go:noescape
func dotsSSE(dst, q, k *float32, ks, count, n int)

//go:noescape
func axpysSSE(dst, v *float32, vs int, a *float32, count, n int)
