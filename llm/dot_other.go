//go:build !amd64 || purego

package llm

// dot returns Σ a[i]·b[i] over len(a) terms.
func dot(a, b []float32) float32 { return dotGo(a, b) }

// dot4 sets dst[k·ds] = dot(x[k·xs : k·xs+len(w)], w) for k = 0…3. In Go
// it is four dot products: scalar code gains nothing from sharing the
// weight loads that the SSE kernel shares.
func dot4(dst []float32, ds int, x []float32, xs int, w []float32) {
	n := len(w)
	for k := range 4 {
		dst[k*ds] = dotGo(x[k*xs:k*xs+n], w)
	}
}

// dots sets dst[c] = dot(q, k[c·ks : c·ks+len(q)]) for c < len(dst).
func dots(dst, q, k []float32, ks int) { dotsGo(dst, q, k, ks) }

// axpys adds a[c]·v[c·vs : c·vs+len(dst)] to dst for c = 0, 1, … in turn.
func axpys(dst, v []float32, vs int, a []float32) { axpysGo(dst, v, vs, a) }
