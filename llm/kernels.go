package llm

// kernelSet is one implementation of the matrix product's kernels. Its
// tile sets dst[k·ds + l], k < xr and l < wr, to activation row i+k
// against weight row o+l, for xr of 1 or the set's xr, and wr of 1 or
// the set's wr or, when xr is 1, any number. Each pair's result must not
// depend on the tile's shape: the same bits alone as among others. The set in use is chosen once, by the
// CPU (kernels_amd64.go).
type kernelSet struct {
	name   string
	xr, wr int
	tile   func(dst []float32, ds int, a *acts, i, xr int, w *matrix, o, wr int)
	// wide, where a set has it, does what tile does for xr activation
	// rows (1 to wideRows) against wr weight rows (a multiple of the set's
	// wr, at most wideRows) in one call, the same bits for every pair, for
	// weights of the types in wideTypes.
	wide      func(dst []float32, ds int, a *acts, i, xr int, w *matrix, o, wr int)
	wideTypes []wtype
	// tiles, where a set has it, does what tile does for any xr up to
	// the set's xr (floatXr for F32 and F16 weights) and any wr, and may
	// prefetch the bytes from pf on as it goes (the weights mulTiles reads
	// next): mulRows then covers every activation row of a step with
	// tiles, against blocks of weight rows, and leaves none to stream
	// through the weights alone.
	tiles   func(dst []float32, ds int, a *acts, i, xr int, w *matrix, o, wr int, pf *byte)
	floatXr int
}

// tileRows is the most activation rows the set's tile takes for weights
// of type t.
func (k *kernelSet) tileRows(t wtype) int {
	if k.floatXr > 0 && (t == tF32 || t == tF16) {
		return k.floatXr
	}
	return k.xr
}

// wideRows is the most activation rows, and the most weight rows, of a
// wide call: a step of 16 sequences.
const wideRows = 16

// wideCols is the width of a wide kernel's column block (the generator's
// WIDE_CHUNKS chunks of sixteen).
const wideCols = 256

// goKernels is the pure Go set: the kernels where there is no assembly,
// and the reference the assembly is tested against.
var goKernels = kernelSet{name: "go", xr: 1, wr: 1, tile: goTile}

func goTile(dst []float32, ds int, a *acts, i, xr int, w *matrix, o, wr int) {
	for k := range xr {
		for l := range wr {
			dst[k*ds+l] = goDot(a, i+k, w, o+l)
		}
	}
}

// goDot is activation row i against weight row o, in Go.
func goDot(a *acts, i int, w *matrix, o int) float32 {
	c := w.cols
	if w.typ == tF32 {
		return dotGo(a.x[i*c:(i+1)*c], w.f32[o*c:(o+1)*c])
	}
	wb := w.data[o*w.rowBytes : (o+1)*w.rowBytes]
	switch w.typ {
	case tF16:
		return dotF16Go(a.x[i*c:(i+1)*c], wb)
	case tQ8_0:
		return dotQ8_0Go(&a.q[i], wb)
	case tQ4_0:
		return dotQ4_0Go(&a.q[i], wb)
	case tQ4_K:
		return dotQ4_KGo(&a.q[i], wb)
	default:
		return dotQ6_KGo(&a.q[i], wb)
	}
}

// dotF16Go is dotGo with F16 weights.
func dotF16Go(x []float32, w []byte) float32 {
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += float32(x[i] * f16(w[2*i:]))
		s1 += float32(x[i+1] * f16(w[2*i+2:]))
		s2 += float32(x[i+2] * f16(w[2*i+4:]))
		s3 += float32(x[i+3] * f16(w[2*i+6:]))
	}
	for ; i < len(x); i++ {
		s0 += float32(x[i] * f16(w[2*i:]))
	}
	return (s0 + s1) + (s2 + s3)
}

// dotQ8_0Go: each block's products summed exactly in integers, scaled by
// d_w·d_x, and added in block order.
func dotQ8_0Go(x *q8Row, w []byte) float32 {
	var acc float32
	for b := range len(x.d) {
		p := w[b*q8_0Bytes:]
		xq := x.q[b*32 : b*32+32]
		var s int32
		for j, v := range xq {
			s += int32(int8(p[2+j])) * int32(v)
		}
		acc += float32(s) * float32(f16(p)*x.d[b])
	}
	return acc
}

func dotQ4_0Go(x *q8Row, w []byte) float32 {
	var acc float32
	for b := range len(x.d) {
		p := w[b*q4_0Bytes:]
		xq := x.q[b*32 : b*32+32]
		var s int32
		for j := range 16 {
			s += int32(int(p[2+j]&15)-8) * int32(xq[j])
			s += int32(int(p[2+j]>>4)-8) * int32(xq[j+16])
		}
		acc += float32(s) * float32(f16(p)*x.d[b])
	}
	return acc
}

// dotQ4_KGo: in a super-block, Σ_j sc_j·(q·x)_j and Σ_j m_j·(Σx)_j in
// integers (the sums of x are Q8_K's bsums), then d·d_x times the first
// minus dmin·d_x times the second, as llama.cpp does.
func dotQ4_KGo(x *q8Row, w []byte) float32 {
	var acc float32
	for b := range len(x.d) {
		p := w[b*q4_KBytes:]
		d, dmin := f16(p), f16(p[2:])
		sc, qs := p[4:16], p[16:144]
		xq := x.q[b*qk : b*qk+qk]
		var sumi, summ int32
		for j := range 4 {
			s1, m1 := scaleMinK4(2*j, sc)
			s2, m2 := scaleMinK4(2*j+1, sc)
			var lo, hi int32
			for l := range 32 {
				lo += int32(qs[32*j+l]&15) * int32(xq[64*j+l])
				hi += int32(qs[32*j+l]>>4) * int32(xq[64*j+32+l])
			}
			sumi += int32(s1)*lo + int32(s2)*hi
			bs := x.bsums[b*16+4*j:]
			summ += int32(m1)*(int32(bs[0])+int32(bs[1])) + int32(m2)*(int32(bs[2])+int32(bs[3]))
		}
		acc += float32(d*x.d[b])*float32(sumi) - float32(dmin*x.d[b])*float32(summ)
	}
	return acc
}

// dotQ6_KGo: in a super-block, Σ over the 16 sub-blocks of sc_i·((q−32)·x)_i
// in integers, times d·d_x.
func dotQ6_KGo(x *q8Row, w []byte) float32 {
	var acc float32
	for b := range len(x.d) {
		p := w[b*q6_KBytes:]
		d := f16(p[208:])
		xq := x.q[b*qk : b*qk+qk]
		var sumi int32
		for half := range 2 {
			ql, qh, sc := p[64*half:], p[128+32*half:], p[192+8*half:]
			xs := xq[128*half:]
			var sub [8]int32
			for l := range 32 {
				is := l / 16
				sub[is] += int32(int(ql[l]&15|(qh[l]&3)<<4)-32) * int32(xs[l])
				sub[is+2] += int32(int(ql[l+32]&15|(qh[l]>>2&3)<<4)-32) * int32(xs[l+32])
				sub[is+4] += int32(int(ql[l]>>4|(qh[l]>>4&3)<<4)-32) * int32(xs[l+64])
				sub[is+6] += int32(int(ql[l+32]>>4|(qh[l]>>6&3)<<4)-32) * int32(xs[l+96])
			}
			for i, s := range sub {
				sumi += int32(int8(sc[i])) * s
			}
		}
		acc += float32(d*x.d[b]) * float32(sumi)
	}
	return acc
}

// Kernels names the kernel set the forward pass uses on this CPU: avx512,
// avx2 or go.
func Kernels() string { return kern.name }
