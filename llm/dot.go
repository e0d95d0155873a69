package llm

// Attention's dot products, and the pure Go order of the F32 and F16
// matrix products. Every one of them sums in one order: four lane sums,
// s_k over the terms a[4i+k]·b[4i+k], then the terms past the last
// multiple of four into s0, then (s0+s1)+(s2+s3); each product is rounded
// before it is added (no fused multiply-add). The matrix products' SIMD
// kernels have their own order (kernels_amd64.go), fixed for a row
// whatever its batch.

// dotGo is dot in Go: the reference order, and the kernel where there is
// no assembly. The float32 conversions keep the compiler from fusing a
// product and its sum, which it may do on arm64, ppc64, s390x, riscv64
// and amd64 v3.
func dotGo(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += float32(a[i] * b[i])
		s1 += float32(a[i+1] * b[i+1])
		s2 += float32(a[i+2] * b[i+2])
		s3 += float32(a[i+3] * b[i+3])
	}
	for ; i < len(a); i++ {
		s0 += float32(a[i] * b[i])
	}
	return (s0 + s1) + (s2 + s3)
}

// dotsGo is dots in Go.
func dotsGo(dst, q, k []float32, ks int) {
	for c := range dst {
		dst[c] = dotGo(q, k[c*ks:c*ks+len(q)])
	}
}

// axpysGo is axpys in Go: each element sums its terms in c's order, each
// product rounded.
func axpysGo(dst, v []float32, vs int, a []float32) {
	for c, ac := range a {
		row := v[c*vs : c*vs+len(dst)]
		for i := range dst {
			dst[i] += float32(ac * row[i])
		}
	}
}
