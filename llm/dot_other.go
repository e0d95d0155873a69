//go:build !amd64 || purego

package llm

// dots sets dst[c] = dot(q, k[c·ks : c·ks+len(q)]) for c < len(dst).
func dots(dst, q, k []float32, ks int) { dotsGo(dst, q, k, ks) }

// axpys adds a[c]·v[c·vs : c·vs+len(dst)] to dst for c = 0, 1, … in turn.
func axpys(dst, v []float32, vs int, a []float32) { axpysGo(dst, v, vs, a) }
