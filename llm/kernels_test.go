package llm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"modelplane/gguf"
)

// randomMatrix is rows × cols of random weights in type t, and the same
// weights expanded to float32.
func randomMatrix(t *testing.T, rng *rand.Rand, typ gguf.TensorType, rows, cols int) (*matrix, []float32) {
	t.Helper()
	x := make([]float32, rows*cols)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	m, err := newMatrix(nil, typ, rows, cols, encodeTensor(x, typ))
	if err != nil {
		t.Fatal(err)
	}
	for r := range rows {
		m.row(x[r*cols:(r+1)*cols], r)
	}
	return m, x
}

// TestKernels runs every kernel set this machine has against the pure Go
// one on random data, for every weight type, at lengths with and without
// tails, one row and four at a time: results within float rounding of
// the Go kernels' (the SIMD sets sum in another order, and with fused
// multiply-adds), and a row's result the same bits alone as among four.
func TestKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	type tc struct {
		typ  gguf.TensorType
		cols []int
	}
	for _, c := range []tc{
		{gguf.F32, []int{1, 3, 7, 8, 9, 15, 16, 17, 24, 63, 64, 65, 100, 192, 259, 1100}},
		{gguf.F16, []int{1, 5, 8, 13, 16, 31, 48, 64, 72, 200, 1030}},
		{gguf.Q8_0, []int{32, 64, 96, 160, 2048}},
		{gguf.Q4_0, []int{32, 64, 96, 160, 2048}},
		{gguf.Q4_K, []int{256, 512, 768}},
		{gguf.Q6_K, []int{256, 512, 768}},
	} {
		for _, cols := range c.cols {
			const rows, n = 6, 9
			w, wf := randomMatrix(t, rng, c.typ, rows, cols)
			x := make([]float32, n*cols)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			a := prepare(w.typ, x, n, cols)
			// The exact answer for the activations the kernels see.
			xs := x
			if a.q != nil {
				xs = make([]float32, n*cols)
				for i, r := range a.q {
					el := cols / len(r.d)
					for j := range cols {
						xs[i*cols+j] = float32(r.q[j]) * r.d[j/el]
					}
				}
			}
			for _, set := range kernelSets {
				t.Run(fmt.Sprintf("%s/%s/%d", set.name, c.typ, cols), func(t *testing.T) {
					single := func(i, o int) float32 {
						var d [1]float32
						set.tile(d[:], 1, &a, i, 1, w, o, 1)
						return d[0]
					}
					for i := range n {
						for o := range rows {
							got := single(i, o)
							var exact, mag float64
							for j := range cols {
								p := float64(xs[i*cols+j]) * float64(wf[o*cols+j])
								exact += p
								mag += math.Abs(p)
							}
							if d := math.Abs(float64(got) - exact); d > 1e-5*mag+1e-6 {
								t.Errorf("activation row %d, weight row %d: %v, exact %v (Σ|terms| %v)", i, o, got, exact, mag)
							}
						}
					}
					// Every tile shape gives each pair the bits it has alone.
					xrs := []int{1, set.xr}
					if set.tiles != nil { // any rows up to the set's, against any weight rows
						xrs = []int{1, 2, 3, 4, 5, 6, 7, 8}
					}
					for _, xr := range xrs {
						for _, wr := range []int{1, 2, set.wr, 3, 5, rows} {
							if xr > 1 && wr != 1 && wr != set.wr && set.tiles == nil {
								continue
							}
							if xr > n || wr > rows {
								continue
							}
							for i := 0; i+xr <= n; i++ {
								for o := 0; o+wr <= rows; o++ {
									dst := make([]float32, xr*7)
									set.tile(dst, 7, &a, i, xr, w, o, wr)
									for k := range xr {
										for l := range wr {
											if want := single(i+k, o+l); math.Float32bits(dst[k*7+l]) != math.Float32bits(want) {
												t.Fatalf("tile %dx%d at (%d, %d): pair (%d, %d) = %v, alone %v", xr, wr, i, o, i+k, o+l, dst[k*7+l], want)
											}
										}
									}
								}
							}
						}
					}
				})
			}
		}
	}
}

// TestQuantRoundTrip checks the writers against the block layouts: a
// row quantised then expanded is close to the original, within each
// type's step.
func TestQuantRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, c := range []struct {
		typ gguf.TensorType
		tol float64 // of the row's largest magnitude
	}{{gguf.F16, 1e-3}, {gguf.Q8_0, 1.0 / 127}, {gguf.Q4_0, 1.0 / 8}, {gguf.Q4_K, 1.0 / 8}, {gguf.Q6_K, 1.0 / 24}} {
		x := make([]float32, 512)
		var amax float64
		for i := range x {
			x[i] = float32(rng.NormFloat64())
			amax = max(amax, math.Abs(float64(x[i])))
		}
		m, err := newMatrix(nil, c.typ, 1, len(x), encodeTensor(x, c.typ))
		if err != nil {
			t.Fatal(err)
		}
		got := make([]float32, len(x))
		m.row(got, 0)
		var worst float64
		for i := range x {
			worst = max(worst, math.Abs(float64(got[i]-x[i])))
		}
		if worst > c.tol*amax {
			t.Errorf("%s: largest error %v, want ≤ %v", c.typ, worst, c.tol*amax)
		}
	}
}

// FuzzKernels feeds tensor bytes as a file may hold them (any scale, any
// int8, NaNs and infinities included) to every kernel set: none may
// panic or read out of bounds, and where the Go kernel's answer is finite
// the others agree with it to float rounding.
func FuzzKernels(f *testing.F) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, typ := range []gguf.TensorType{gguf.F32, gguf.F16, gguf.Q8_0, gguf.Q4_0, gguf.Q4_K, gguf.Q6_K} {
		x := make([]float32, 2*256)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		f.Add(encodeTensor(x, typ), uint8(wtypes[typ]), uint64(1))
	}
	f.Fuzz(func(t *testing.T, data []byte, typ uint8, seed uint64) {
		wt := wtype(typ % 6)
		el, by := wt.block()
		cols := el * max(1, 64/el)
		if wt >= tQ4_K {
			cols = 256
		}
		const rows, n = 5, 5
		need := rows * cols / el * by
		b := make([]byte, need)
		copy(b, data)
		var gt gguf.TensorType
		for g, w := range wtypes {
			if w == wt {
				gt = g
			}
		}
		w, err := newMatrix(nil, gt, rows, cols, b)
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(seed, 1))
		x := make([]float32, n*cols)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		a := prepare(w.typ, x, n, cols)
		want := make([]float32, n*rows)
		for i := range n {
			for o := range rows {
				want[i*rows+o] = goDot(&a, i, w, o)
			}
		}
		for _, set := range kernelSets {
			old := kern
			kern = set
			got := make([]float32, n*rows)
			w.mulRows(got, &a, 0, rows)
			kern = old
			for i, g := range got {
				wv := float64(want[i])
				if math.IsNaN(wv) || math.IsInf(wv, 0) || math.Abs(wv) > 1e30 {
					continue
				}
				if d := math.Abs(float64(g) - wv); d > 1e-3*math.Abs(wv)+1e-2 && !(math.Abs(wv) > 1e20) {
					t.Errorf("%s %v output %d: %v, go %v", set.name, gt, i, g, wv)
				}
			}
		}
	})
}

// TestQuantRowQ8_0IsTheGoQuantiser holds quantRowQ8_0 (assembly where
// the CPU has AVX-512) to the Go quantiser's bits, values and scales, on
// rows of random scale with zero blocks, ties at a half step, binary16
// subnormal and overflowing scales.
func TestQuantRowQ8_0IsTheGoQuantiser(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for n := range 200 {
		x := make([]float32, 32*(1+n%9))
		scale := math.Pow(10, float64(rng.IntN(16)-9))
		for i := range x {
			x[i] = float32(rng.NormFloat64() * scale)
		}
		switch n % 5 {
		case 1: // a zero block
			clear(x[:32])
		case 2: // values at a half step: 127/amax·v = k + 0.5
			x[0] = 127
			for i := 1; i < 32; i++ {
				x[i] = float32(rng.IntN(254)-127) + 0.5
			}
		case 3: // a scale past binary16's largest
			x[5] = 1e7
		}
		want := q8Row{q: make([]int8, len(x)), d: make([]float32, len(x)/32)}
		got := q8Row{q: make([]int8, len(x)), d: make([]float32, len(x)/32)}
		quantRowQ8_0Go(&want, x)
		quantRowQ8_0(&got, x)
		for i := range want.q {
			if got.q[i] != want.q[i] {
				t.Fatalf("row %d value %d (%v): got %d, want %d", n, i, x[i], got.q[i], want.q[i])
			}
		}
		for b := range want.d {
			if math.Float32bits(got.d[b]) != math.Float32bits(want.d[b]) {
				t.Fatalf("row %d block %d scale: got %v, want %v", n, b, got.d[b], want.d[b])
			}
		}
	}
}

// TestWideKernels holds a set's wide kernel to its tile: for every group
// packWide makes (sixteen rows, and the one to fifteen left after them or
// alone) against four to sixteen weight rows, at widths that end inside a
// column block, on one and past it, with a tail past the last sixteen,
// every pair's result is the bits the pair has alone, and nothing outside
// the group's rows and the weight rows is written.
func TestWideKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, set := range kernelSets {
		for gt, typ := range wtypes {
			if !slices.Contains(set.wideTypes, typ) {
				continue
			}
			for _, cols := range []int{16, 17, 48, 255, 256, 272, 300, 512, 529, 1040, 2048} {
				t.Run(fmt.Sprintf("%s/%v/%d", set.name, gt, cols), func(t *testing.T) {
					const rows = wideRows + 3
					w, _ := randomMatrix(t, rng, gt, rows, cols)
					x := make([]float32, (wideRows+wideRows-1)*cols)
					for i := range x {
						x[i] = float32(rng.NormFloat64())
					}
					for xr := 2; xr <= wideRows; xr++ {
						// xr rows alone, and sixteen then xr-1 (a group of
						// one to fifteen after a whole one).
						for _, n := range []int{xr, wideRows + xr - 1} {
							a := prepare(w.typ, x, n, cols)
							for g := 0; g < n; g += wideRows {
								gr := min(wideRows, n-g)
								for _, wr := range []int{set.wr, 2 * set.wr, 3 * set.wr, wideRows} {
									for _, o := range []int{0, rows - wr} {
										const ds = rows + 1
										dst := make([]float32, (gr+1)*ds)
										for i := range dst {
											dst[i] = float32(math.NaN())
										}
										set.wide(dst, ds, &a, g, gr, w, o, wr)
										for k := range gr + 1 {
											for l := range ds {
												got := dst[k*ds+l]
												if k >= gr || l >= wr {
													if !math.IsNaN(float64(got)) {
														t.Fatalf("%d rows of %d at (%d, %d) against %d: wrote %v at (%d, %d), outside", gr, n, g, o, wr, got, k, l)
													}
													continue
												}
												var alone [1]float32
												set.tile(alone[:], 1, &a, g+k, 1, w, o+l, 1)
												if math.Float32bits(got) != math.Float32bits(alone[0]) {
													t.Fatalf("%d rows of %d at (%d, %d) against %d: pair (%d, %d) = %v, alone %v", gr, n, g, o, wr, g+k, o+l, got, alone[0])
												}
											}
										}
									}
								}
							}
							widePool.Put(a.wide)
						}
					}
				})
			}
		}
	}
}

// TestMatmulEveryBatchIsAlone runs matmul at every row count from 1 to
// 20 (the wide kernel's groups, four F16 rows through the tiles, the rows
// left after a group of 16) for every weight type: each output is the
// bits its activation row has alone against its weight row.
func TestMatmulEveryBatchIsAlone(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for gt := range wtypes {
		// Past four of the AVX-512 wide kernels' column blocks
		// (wideCols), and more weight rows than a wide call takes.
		cols := 1088
		if gt == gguf.Q4_K || gt == gguf.Q6_K {
			cols = 1024
		}
		t.Run(fmt.Sprint(gt), func(t *testing.T) {
			const rows = wideRows + 15
			w, _ := randomMatrix(t, rng, gt, rows, cols)
			for n := 1; n <= 20; n++ {
				x := make([]float32, n*cols)
				for i := range x {
					x[i] = float32(rng.NormFloat64())
				}
				dst := make([]float32, n*rows)
				matmul(1, dst, x, w, n)
				a := prepare(w.typ, x, n, cols)
				for i := range n {
					for o := range rows {
						var alone [1]float32
						kern.tile(alone[:], 1, &a, i, 1, w, o, 1)
						if got := dst[i*rows+o]; math.Float32bits(got) != math.Float32bits(alone[0]) {
							t.Fatalf("%d rows: output (%d, %d) = %v, alone %v", n, i, o, got, alone[0])
						}
					}
				}
			}
		})
	}
}
