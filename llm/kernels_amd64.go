//go:build !purego

package llm

//go:generate python3 matmul512_gen.py
//go:generate python3 tileavx2_gen.py

import (
	"os"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// kern is the kernel set in use, chosen once by what the CPU has: AVX-512
// (F, BW, VL and VNNI), else AVX2 with FMA and F16C (every x86 server
// since 2013), else pure Go; MP_LLM_KERNELS may name a lesser one.
var kern = pickKernels()

// kernelSets are the sets this machine can run, for the tests.
var kernelSets = availableKernels()

func availableKernels() []kernelSet {
	sets := []kernelSet{goKernels}
	x := cpu.X86
	if x.HasAVX2 && x.HasFMA && x.HasF16C {
		sets = append(sets, avx2Kernels)
		if x.HasAVX512F && x.HasAVX512BW && x.HasAVX512VL && x.HasAVX512VNNI {
			sets = append(sets, avx512Kernels)
		}
	}
	return sets
}

// pickKernels takes the most capable set, or the one MP_LLM_KERNELS
// names (go, avx2 or avx512) when the CPU has it: for comparing them.
func pickKernels() kernelSet {
	s := availableKernels()
	for _, k := range s {
		if k.name == os.Getenv("MP_LLM_KERNELS") {
			return k
		}
	}
	return s[len(s)-1]
}

// avx2Kernels take tiles of one to four activation rows against any
// number of F32 or F16 weight rows (f32TileAVX2, f16TileAVX2), two to
// eight against each Q8_0 weight row in turn (q8_0TileAVX2) or one
// against four at a time (q8_0RowsAVX2), and one or four activation rows
// against a weight row of the other types.
var avx2Kernels = kernelSet{name: "avx2", xr: 8, wr: 1, tile: avx2Tile, tiles: avx2Tiles, floatXr: 4}

func avx2Tile(dst []float32, ds int, a *acts, i, xr int, w *matrix, o, wr int) {
	avx2Tiles(dst, ds, a, i, xr, w, o, wr, nil)
}

func avx2Tiles(dst []float32, ds int, a *acts, i, xr int, w *matrix, o, wr int, pf *byte) {
	_ = dst[(xr-1)*ds+wr-1]
	if w.typ == tF32 || w.typ == tF16 {
		if pf == nil {
			pf = w.rowAt(o)
		}
		for k := 0; k < xr; k += 4 {
			avx2Float(dst[k*ds:], ds, a, i+k, min(4, xr-k), w, o, wr, pf)
		}
		return
	}
	if w.typ == tQ8_0 && w.cols > 0 {
		// Up to eight rows against each weight row in turn; a row alone
		// against four weight rows at a time.
		if pf == nil {
			pf = w.rowAt(o)
		}
		nb := w.cols / 32
		wb := w.data[o*w.rowBytes : (o+wr)*w.rowBytes]
		for k := 0; k < xr; k += 8 {
			n := min(8, xr-k)
			q := a.q[i+k : i+k+n]
			_, _ = q[n-1].q[w.cols-1], q[n-1].d[nb-1]
			if n == 1 {
				q8_0RowsAVX2(&dst[k*ds], &q[0].q[0], &q[0].d[0], &wb[0], w.rowBytes, nb, wr)
				continue
			}
			q8_0TileAVX2(&dst[k*ds], ds, &q[0].q[0], w.cols, &q[0].d[0], nb, &wb[0], w.rowBytes, nb, n, wr, pf)
		}
		return
	}
	for l := range wr {
		k := 0
		for ; k+4 <= xr; k += 4 {
			avx2Row(dst[k*ds+l:], ds, a, i+k, 4, w, o+l)
		}
		for ; k < xr; k++ {
			avx2Row(dst[k*ds+l:], ds, a, i+k, 1, w, o+l)
		}
	}
}

// avx2Float sets dst[k·ds+l], k < xr ≤ 4 and l < wr, to activation row
// i+k against F32 or F16 weight row o+l; two rows or more prefetch from
// pf on, a line each 32 columns (F16; mulTiles's next block, which the
// first tile of a block otherwise waited for: F16 from memory with 16
// rows went from 31-32 to 35 G multiply-adds a CPU-second). Elements past
// the last multiple of eight are added after, in Go.
func avx2Float(dst []float32, ds int, a *acts, i, xr int, w *matrix, o, wr int, pf *byte) {
	c := w.cols
	m := c &^ 7
	x := a.x[i*c : (i+xr)*c]
	if m > 0 {
		if w.typ == tF32 {
			wf := w.f32[o*c : (o+wr)*c]
			f32TileAVX2(&dst[0], ds, &x[0], c, &wf[0], 4*c, m, xr, wr, pf)
		} else {
			wb := w.data[o*w.rowBytes : (o+wr)*w.rowBytes]
			f16TileAVX2(&dst[0], ds, &x[0], c, &wb[0], w.rowBytes, m, xr, wr, pf)
		}
	} else {
		for k := range xr {
			clear(dst[k*ds : k*ds+wr])
		}
	}
	for k := 0; m < c && k < xr; k++ {
		for l := range wr {
			if w.typ == tF32 {
				dst[k*ds+l] += dotGo(x[k*c+m:(k+1)*c], w.f32[(o+l)*c+m:(o+l+1)*c])
			} else {
				dst[k*ds+l] += dotF16Go(x[k*c+m:(k+1)*c], w.data[(o+l)*w.rowBytes+2*m:(o+l+1)*w.rowBytes])
			}
		}
	}
}

// avx2Row sets dst[k·ds], k < xr, to activation row i+k against weight
// row o. Elements past the last multiple of eight are added after, in Go.
func avx2Row(dst []float32, ds int, a *acts, i, xr int, w *matrix, o int) {
	c := w.cols
	switch w.typ {
	case tQ4_0:
		q := a.q[i : i+xr]
		_ = q[xr-1].q[c-1]
		nb := c / 32
		wb := w.data[o*w.rowBytes : (o+1)*w.rowBytes]
		// prepare lays row i+1's values and scales right after row i's.
		q4_0DotAVX2(&dst[0], ds, &q[0].q[0], c, &q[0].d[0], nb, &wb[0], nb, xr)
	case tQ4_K:
		nb := c / qk
		wb := w.data[o*w.rowBytes : (o+1)*w.rowBytes]
		var buf [64 * 8]int16
		if nb > len(buf)/8 {
			for k := range xr {
				dst[k*ds] = goDot(a, i+k, w, o)
			}
			return
		}
		// The scales once for the weight row; the mins' share per
		// activation row, in Go, after.
		sc := buf[:nb*8]
		var mins [64 * 8]int16
		for b := range nb {
			for j := range 8 {
				s, m := scaleMinK4(j, wb[b*q4_KBytes+4:])
				sc[b*8+j], mins[b*8+j] = int16(s), int16(m)
			}
		}
		for k := range xr {
			x := &a.q[i+k]
			_ = x.q[nb*qk-1]
			sum := q4_KDotAVX2(&x.q[0], &x.d[0], &wb[0], &sc[0], nb)
			var minus float32
			for b := range nb {
				var summ int32
				for j := range 8 {
					summ += int32(mins[b*8+j]) * (int32(x.bsums[b*16+2*j]) + int32(x.bsums[b*16+2*j+1]))
				}
				minus += float32(f16(wb[b*q4_KBytes+2:])*x.d[b]) * float32(summ)
			}
			dst[k*ds] = sum - minus
		}
	case tQ6_K:
		nb := c / qk
		wb := w.data[o*w.rowBytes : (o+1)*w.rowBytes]
		var buf [64 * 16]int16
		if nb > len(buf)/16 {
			for k := range xr {
				dst[k*ds] = goDot(a, i+k, w, o)
			}
			return
		}
		sc := buf[:nb*16]
		for b := range nb {
			for j := range 16 {
				sc[b*16+j] = int16(int8(wb[b*q6_KBytes+192+j]))
			}
		}
		for k := range xr {
			x := &a.q[i+k]
			_ = x.q[nb*qk-1]
			sum := q6_KDotAVX2(&x.q[0], &x.d[0], &wb[0], &sc[0], nb)
			// The −32 offset's share: 32·Σ sc·bsum a super-block, in Go, after.
			var minus float32
			for b := range nb {
				var s int32
				for j := range 16 {
					s += int32(sc[b*16+j]) * int32(x.bsums[b*16+j])
				}
				minus += float32(f16(wb[b*q6_KBytes+208:])*x.d[b]) * float32(32*s)
			}
			dst[k*ds] = sum - minus
		}
	default:
		for k := range xr {
			dst[k*ds] = goDot(a, i+k, w, o)
		}
	}
}

// avx512Kernels take tiles of four activation rows by four weight rows
// for F32, F16 and Q8_0 weights; the other types run avx2Row.
var avx512Kernels = kernelSet{name: "avx512", xr: 4, wr: 4, tile: avx512Tile,
	wide: avx512Wide, wideTypes: []wtype{tF32, tF16}}

// avx512Wide runs xr activation rows (1 to sixteen) against wr F32 or
// F16 weight rows in one call of f32Wide512 or f16Wide512: each pair as
// the tiles compute it, with the columns in blocks so that the block's
// activation rows (packed by packWide) stay in L1 for every weight tile
// (see matmul512_gen.py).
func avx512Wide(dst []float32, ds int, a *acts, i, xr int, w *matrix, o, wr int) {
	if (w.typ != tF32 && w.typ != tF16) || wr%4 != 0 || wr > wideRows {
		panic("avx512Wide: F32 or F16 weights, a multiple of four rows, at most sixteen")
	}
	if a.wide == nil || i%wideRows != 0 || xr != min(wideRows, a.n-i) {
		panic("avx512Wide: activations not packed for it, or not one of packWide's groups")
	}
	c := w.cols
	m := c &^ 15
	_ = dst[(xr-1)*ds+wr-1]
	x := a.x[i*c : (i+xr)*c]
	packed := (*a.wide)[i*wideBlocks(c)*wideCols : (i+xr)*wideBlocks(c)*wideCols]
	// Every pair's sixteen lanes between column blocks, 64-byte aligned.
	var buf [wideRows*wideRows*16 + 16]float32
	acc := buf[(64-int(uintptr(unsafe.Pointer(&buf[0]))&63)/4)&15:]
	switch {
	case m == 0:
		for k := range xr {
			clear(dst[k*ds : k*ds+wr])
		}
	case w.typ == tF32:
		wf := w.f32[o*c : (o+wr)*c]
		f32Wide512(&dst[0], ds, &packed[0], 4*wideCols, &wf[0], 4*c, m, xr, wr, &acc[0])
	default:
		wb := w.data[o*w.rowBytes : (o+wr)*w.rowBytes]
		f16Wide512(&dst[0], ds, &packed[0], 4*wideCols, &wb[0], w.rowBytes, m, xr, wr, &acc[0])
	}
	for k := 0; m < c && k < xr; k++ { // the tail, in Go, after
		for l := range wr {
			if w.typ == tF32 {
				dst[k*ds+l] += dotGo(x[k*c+m:(k+1)*c], w.f32[(o+l)*c+m:(o+l+1)*c])
			} else {
				dst[k*ds+l] += dotF16Go(x[k*c+m:(k+1)*c], w.data[(o+l)*w.rowBytes+2*m:(o+l+1)*w.rowBytes])
			}
		}
	}
}

func avx512Tile(dst []float32, ds int, a *acts, i, xr int, w *matrix, o, wr int) {
	c := w.cols
	_ = dst[(xr-1)*ds+wr-1]
	if xr == 1 && wr > 2 && wr%2 == 1 && (w.typ == tF32 || w.typ == tF16) {
		// One activation row (batch 1) against many weight rows: the
		// float kernels take them two at a time in one call, two
		// streams with the next two rows prefetched, which drew 63-64
		// tokens per CPU-second from the F16 model where four at a time
		// drew 57-60 (docs/llm.md); an odd last row goes alone. The
		// Q8_0 kernel and avx2Row run a row against any number of
		// weight rows.
		avx512Tile(dst, ds, a, i, 1, w, o, wr-1)
		avx512Tile(dst[wr-1:], ds, a, i, 1, w, o+wr-1, 1)
		return
	}
	switch w.typ {
	case tF32, tF16:
		m := c &^ 15
		x := a.x[i*c : (i+xr)*c]
		if w.typ == tF32 {
			wf := w.f32[o*c : (o+wr)*c]
			f32Tile512(&dst[0], ds, &x[0], 4*c, &wf[0], 4*c, m, xr, wr)
		} else {
			wb := w.data[o*w.rowBytes : (o+wr)*w.rowBytes]
			f16Tile512(&dst[0], ds, &x[0], 4*c, &wb[0], w.rowBytes, m, xr, wr)
		}
		if m < c { // the tail, in Go, after
			for k := range xr {
				for l := range wr {
					if w.typ == tF32 {
						dst[k*ds+l] += dotGo(x[k*c+m:(k+1)*c], w.f32[(o+l)*c+m:(o+l+1)*c])
					} else {
						dst[k*ds+l] += dotF16Go(x[k*c+m:(k+1)*c], w.data[(o+l)*w.rowBytes+2*m:(o+l+1)*w.rowBytes])
					}
				}
			}
		}
	case tQ8_0:
		nb := c / 32
		q := a.q[i : i+xr]
		wb := w.data[o*w.rowBytes : (o+wr)*w.rowBytes]
		if nb >= 2 {
			_ = q[xr-1].d[nb-1]
			q8_0Tile512(&dst[0], ds, &q[0].q[0], c, &wb[0], w.rowBytes, nb/2, xr, wr, &q[0].d[0], nb)
		} else {
			for k := range xr {
				clear(dst[k*ds : k*ds+wr])
			}
		}
		if nb%2 == 1 { // an odd last block, in Go, after
			for k := range xr {
				last := q8Row{q: q[k].q[c-32:], d: q[k].d[nb-1:]}
				for l := range wr {
					dst[k*ds+l] += dotQ8_0Go(&last, wb[l*w.rowBytes+(nb-1)*q8_0Bytes:(l+1)*w.rowBytes])
				}
			}
		}
	default:
		avx2Tile(dst, ds, a, i, xr, w, o, wr)
	}
}

//go:noescape
func q8_0TileAVX2(dst *float32, ds int, xq *int8, xqs int, xd *float32, xds int, w *byte, ws int, nb int, xr int, wr int, pf *byte)

//go:noescape
func q8_0RowsAVX2(dst *float32, xq *int8, xd *float32, w *byte, ws int, nb int, wr int)

//go:noescape
func q4_0DotAVX2(dst *float32, ds int, xq *int8, xqs int, xd *float32, xds int, w *byte, nb int, rows int)

//go:noescape
func q4_KDotAVX2(xq *int8, xd *float32, w *byte, sc *int16, nb int) float32

//go:noescape
func q6_KDotAVX2(xq *int8, xd *float32, w *byte, sc *int16, nb int) float32

//go:noescape
func f32TileAVX2(dst *float32, ds int, x *float32, xs int, w *float32, ws int, n int, xr int, wr int, pf *byte)

//go:noescape
func f16TileAVX2(dst *float32, ds int, x *float32, xs int, w *byte, ws int, n int, xr int, wr int, pf *byte)

//go:noescape
func f32Tile512(dst *float32, ds int, x *float32, xs int, w *float32, ws int, n int, xr int, wr int)

//go:noescape
func f32Wide512(dst *float32, ds int, x *float32, xs int, w *float32, ws int, n int, xr int, wr int, acc *float32)

//go:noescape
func f16Wide512(dst *float32, ds int, x *float32, xs int, w *byte, ws int, n int, xr int, wr int, acc *float32)

//go:noescape
func f16Tile512(dst *float32, ds int, x *float32, xs int, w *byte, ws int, n int, xr int, wr int)

//go:noescape
func q8_0Tile512(dst *float32, ds int, x *int8, xs int, w *byte, ws int, nb2 int, xr int, wr int, dx *float32, dxs int)
