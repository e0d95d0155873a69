package llm

import (
	"encoding/binary"
	"math"
)

// The block formats of the quantised GGUF types, as ggml lays them out
// (ggml-common.h), and their dot products with activations quantised the
// way llama.cpp quantises them: Q8_0 for Q8_0 and Q4_0 weights, Q8_K for
// the K-quants. A block's products are summed in integers, exactly; only
// the per-block scaling is in floats, in a fixed order, so a row's dot
// product depends on its weights and its activations alone.
//
//	Q8_0  34 bytes / 32:  f16 d, int8 q[32];              x = d·q
//	Q4_0  18 bytes / 32:  f16 d, u8 qs[16];               x[j] = d·((qs[j]&15)−8), x[j+16] = d·((qs[j]>>4)−8)
//	Q4_K 144 bytes / 256: f16 d, f16 dmin, u8 scales[12], u8 qs[128]
//	                      8 sub-blocks of 32, each with a 6-bit scale and min: x = d·sc·q − dmin·m
//	Q6_K 210 bytes / 256: u8 ql[128], u8 qh[64], int8 scales[16], f16 d
//	                      16 sub-blocks of 16: x = d·sc·(q−32), q 6 bits: 4 in ql, 2 in qh
//	Q8_K (activations only) f32 d, int8 q[256], int16 bsums[16] (sums of 16 q)
const (
	q8_0Bytes = 34
	q4_0Bytes = 18
	q4_KBytes = 144
	q6_KBytes = 210
	qk        = 256 // elements of a K-quant super-block
)

func f16(b []byte) float32 { return halfToFloat(binary.LittleEndian.Uint16(b)) }

// scaleMinK4 is the j-th 6-bit scale and min of a Q4_K block's 12 bytes.
func scaleMinK4(j int, q []byte) (sc, m uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&0xF | (q[j-4]>>6)<<4, q[j+4]>>4 | (q[j]>>6)<<4
}

// dequantRow expands n elements of a row of type t to float32.
func dequantRow(dst []float32, t wtype, b []byte) {
	n := len(dst)
	switch t {
	case tF32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case tF16:
		for i := range dst {
			dst[i] = f16(b[2*i:])
		}
	case tQ8_0:
		for blk := range n / 32 {
			p := b[blk*q8_0Bytes:]
			d := f16(p)
			for j := range 32 {
				dst[blk*32+j] = d * float32(int8(p[2+j]))
			}
		}
	case tQ4_0:
		for blk := range n / 32 {
			p := b[blk*q4_0Bytes:]
			d := f16(p)
			for j := range 16 {
				dst[blk*32+j] = d * float32(int(p[2+j]&15)-8)
				dst[blk*32+j+16] = d * float32(int(p[2+j]>>4)-8)
			}
		}
	case tQ4_K:
		for blk := range n / qk {
			p := b[blk*q4_KBytes:]
			d, dmin := f16(p), f16(p[2:])
			sc, qs := p[4:16], p[16:144]
			y := dst[blk*qk:]
			for j := range 4 {
				s1, m1 := scaleMinK4(2*j, sc)
				s2, m2 := scaleMinK4(2*j+1, sc)
				d1, dm1 := d*float32(s1), dmin*float32(m1)
				d2, dm2 := d*float32(s2), dmin*float32(m2)
				for l := range 32 {
					y[64*j+l] = d1*float32(qs[32*j+l]&15) - dm1
					y[64*j+32+l] = d2*float32(qs[32*j+l]>>4) - dm2
				}
			}
		}
	case tQ6_K:
		for blk := range n / qk {
			p := b[blk*q6_KBytes:]
			d := f16(p[208:])
			y := dst[blk*qk:]
			for half := range 2 {
				ql, qh, sc := p[64*half:], p[128+32*half:], p[192+8*half:]
				yy := y[128*half:]
				for l := range 32 {
					is := l / 16
					q1 := int(ql[l]&15|(qh[l]&3)<<4) - 32
					q2 := int(ql[l+32]&15|(qh[l]>>2&3)<<4) - 32
					q3 := int(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
					q4 := int(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
					yy[l] = d * float32(int8(sc[is])) * float32(q1)
					yy[l+32] = d * float32(int8(sc[is+2])) * float32(q2)
					yy[l+64] = d * float32(int8(sc[is+4])) * float32(q3)
					yy[l+96] = d * float32(int8(sc[is+6])) * float32(q4)
				}
			}
		}
	}
}

// quantQ8_0 quantises x (a multiple of 32 long) into Q8_0 blocks, as
// llama.cpp's reference does: d = max|x|/127 stored as f16, q =
// round(x/d) with the f32 1/d.
func quantQ8_0(dst []byte, x []float32) []byte {
	for blk := 0; blk < len(x)/32; blk++ {
		xs := x[blk*32 : blk*32+32]
		var amax float32
		for _, v := range xs {
			amax = max(amax, abs32(v))
		}
		d := amax / 127
		id := float32(0)
		if d != 0 {
			id = 1 / d
		}
		dst = binary.LittleEndian.AppendUint16(dst, floatToHalf(d))
		for _, v := range xs {
			dst = append(dst, byte(int8(roundAway(v*id))))
		}
	}
	return dst
}

// quantQ4_0 quantises x into Q4_0 blocks as llama.cpp's reference does:
// d = (the value of largest magnitude)/−8, q = min(15, trunc(x/d + 8.5)).
func quantQ4_0(dst []byte, x []float32) []byte {
	for blk := 0; blk < len(x)/32; blk++ {
		xs := x[blk*32 : blk*32+32]
		var amax, mx float32
		for _, v := range xs {
			if abs32(v) > amax {
				amax, mx = abs32(v), v
			}
		}
		d := mx / -8
		id := float32(0)
		if d != 0 {
			id = 1 / d
		}
		dst = binary.LittleEndian.AppendUint16(dst, floatToHalf(d))
		for j := range 16 {
			q0 := min(15, int8(xs[j]*id+8.5))
			q1 := min(15, int8(xs[j+16]*id+8.5))
			dst = append(dst, byte(q0)|byte(q1)<<4)
		}
	}
	return dst
}

// quantQ4_K quantises x into Q4_K super-blocks. Each sub-block of 32 gets
// the affine range of its values (a scale over 15 steps and a min ≤ 0),
// and the super-block's d and dmin quantise those to 6 bits. llama.cpp's
// quantiser searches for better scales; any encoding of the layout reads
// the same in both engines, which is what the tests need.
func quantQ4_K(dst []byte, x []float32) []byte {
	for blk := 0; blk < len(x)/qk; blk++ {
		xs := x[blk*qk : blk*qk+qk]
		var scales, mins [8]float32
		var maxScale, maxMin float32
		for j := range 8 {
			lo, hi := float32(0), float32(0)
			for _, v := range xs[32*j : 32*j+32] {
				lo, hi = min(lo, v), max(hi, v)
			}
			scales[j], mins[j] = (hi-lo)/15, -lo
			maxScale, maxMin = max(maxScale, scales[j]), max(maxMin, mins[j])
		}
		d, dmin := floatToHalf(maxScale/63), floatToHalf(maxMin/63)
		df, dminf := halfToFloat(d), halfToFloat(dmin)
		var sc, m [8]uint8
		for j := range 8 {
			if df > 0 {
				sc[j] = uint8(min(63, roundAway(scales[j]/df)))
			}
			if dminf > 0 {
				m[j] = uint8(min(63, roundAway(mins[j]/dminf)))
			}
		}
		dst = binary.LittleEndian.AppendUint16(dst, d)
		dst = binary.LittleEndian.AppendUint16(dst, dmin)
		var packed [12]byte
		for j := range 4 {
			packed[j] = sc[j] | (sc[j+4]>>4)<<6
			packed[j+4] = m[j] | (m[j+4]>>4)<<6
			packed[j+8] = sc[j+4]&15 | (m[j+4]&15)<<4
		}
		dst = append(dst, packed[:]...)
		var q [qk]uint8
		for j := range 8 {
			s, mn := df*float32(sc[j]), dminf*float32(m[j])
			for l := range 32 {
				if s > 0 {
					q[32*j+l] = uint8(max(0, min(15, roundAway((xs[32*j+l]+mn)/s))))
				}
			}
		}
		for j := range 4 {
			for l := range 32 {
				dst = append(dst, q[64*j+l]|q[64*j+32+l]<<4)
			}
		}
	}
	return dst
}

// quantQ6_K quantises x into Q6_K super-blocks: each sub-block of 16 is
// scaled so its value of largest magnitude is −32, and d quantises the
// 16 scales to int8.
func quantQ6_K(dst []byte, x []float32) []byte {
	for blk := 0; blk < len(x)/qk; blk++ {
		xs := x[blk*qk : blk*qk+qk]
		var scales [16]float32
		var maxAbs, maxScale float32
		for j := range 16 {
			var amax, mx float32
			for _, v := range xs[16*j : 16*j+16] {
				if abs32(v) > amax {
					amax, mx = abs32(v), v
				}
			}
			scales[j] = mx / -32
			if abs32(scales[j]) > maxAbs {
				maxAbs, maxScale = abs32(scales[j]), scales[j]
			}
		}
		d := floatToHalf(maxScale / -128)
		df := halfToFloat(d)
		var sc [16]int8
		var q [qk]uint8
		for j := range 16 {
			if df != 0 {
				sc[j] = int8(max(-128, min(127, roundAway(scales[j]/df))))
			}
			s := df * float32(sc[j])
			for l := range 16 {
				v := 0
				if s != 0 {
					v = int(max(-32, min(31, roundAway(xs[16*j+l]/s))))
				}
				q[16*j+l] = uint8(v + 32)
			}
		}
		var ql [128]byte
		var qh [64]byte
		for half := range 2 {
			for l := range 32 {
				q1, q2, q3, q4 := q[128*half+l], q[128*half+l+32], q[128*half+l+64], q[128*half+l+96]
				ql[64*half+l] = q1&15 | (q3&15)<<4
				ql[64*half+l+32] = q2&15 | (q4&15)<<4
				qh[32*half+l] = q1>>4 | (q2>>4)<<2 | (q3>>4)<<4 | (q4>>4)<<6
			}
		}
		dst = append(dst, ql[:]...)
		dst = append(dst, qh[:]...)
		for _, s := range sc {
			dst = append(dst, byte(s))
		}
		dst = binary.LittleEndian.AppendUint16(dst, d)
	}
	return dst
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

// roundAway rounds half away from zero, as C's roundf.
func roundAway(v float32) float32 { return float32(math.Round(float64(v))) }

// q8Row is a row of activations quantised to Q8_0 (32 an block) or Q8_K
// (256 a block): the int8 values, one float scale a block and, for Q8_K,
// the sums of each 16 values. The scales are held as float32: a Q8_0
// scale is the f16 value llama.cpp stores, widened.
type q8Row struct {
	q     []int8
	d     []float32
	bsums []int16
}

// quantRowQ8_0Go quantises a row of activations to Q8_0 blocks, in Go.
func quantRowQ8_0Go(r *q8Row, x []float32) {
	nb := len(x) / 32
	for blk := range nb {
		xs := x[blk*32 : blk*32+32]
		var amax float32
		for _, v := range xs {
			amax = max(amax, abs32(v))
		}
		// llama.cpp's SIMD quantiser: the step 127/max, not 1/d.
		d := amax / 127
		id := float32(0)
		if amax != 0 {
			id = 127 / amax
		}
		r.d[blk] = halfToFloat(floatToHalf(d))
		for j, v := range xs {
			r.q[blk*32+j] = int8(roundEven(v * id))
		}
	}
}

// quantRowQ8_K quantises a row of activations to Q8_K blocks as llama.cpp
// does: the value of largest magnitude becomes −127 (127 at most), d is
// the float32 step, and bsums the sums of each 16.
func quantRowQ8_K(r *q8Row, x []float32) {
	for blk := range len(x) / qk {
		xs := x[blk*qk : blk*qk+qk]
		var amax, mx float32
		for _, v := range xs {
			if abs32(v) > amax {
				amax, mx = abs32(v), v
			}
		}
		q := r.q[blk*qk : blk*qk+qk]
		if amax == 0 {
			r.d[blk] = 0
			clear(q)
			clear(r.bsums[blk*16 : blk*16+16])
			continue
		}
		iscale := -127 / mx
		for j, v := range xs {
			q[j] = int8(min(127, roundEven(iscale*v)))
		}
		for j := range 16 {
			var s int16
			for _, v := range q[16*j : 16*j+16] {
				s += int16(v)
			}
			r.bsums[blk*16+j] = s
		}
		r.d[blk] = 1 / iscale
	}
}

// roundEven rounds half to even, as llama.cpp's nearest_int and its SIMD
// quantisers (_mm256_round_ps with _MM_ROUND_NEAREST) do.
func roundEven(v float32) float32 { return float32(math.RoundToEven(float64(v))) }
