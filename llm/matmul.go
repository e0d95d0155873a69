package llm

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"unsafe"

	"modelplane/gguf"
)

// wtype is a weight matrix's type in memory: its type in the file, kept.
type wtype uint8

const (
	tF32 wtype = iota
	tF16
	tQ8_0
	tQ4_0
	tQ4_K
	tQ6_K
)

var wtypes = map[gguf.TensorType]wtype{gguf.F32: tF32, gguf.F16: tF16, gguf.Q8_0: tQ8_0,
	gguf.Q4_0: tQ4_0, gguf.Q4_K: tQ4_K, gguf.Q6_K: tQ6_K}

// supportedTypes names what runs, for the errors about what does not.
const supportedTypes = "F32, F16, Q8_0, Q4_0, Q4_K and Q6_K"

// block is the elements of a block of t and bytes a block.
func (t wtype) block() (elems, bytes int) {
	switch t {
	case tF32:
		return 1, 4
	case tF16:
		return 1, 2
	case tQ8_0:
		return 32, q8_0Bytes
	case tQ4_0:
		return 32, q4_0Bytes
	case tQ4_K:
		return qk, q4_KBytes
	default:
		return qk, q6_KBytes
	}
}

// matrix is a weight matrix of rows × cols (a GGUF tensor of dims [cols
// rows]) in its file's type: F32 as float32, every other type as the
// file's bytes, rowBytes a row. Both are in keep, the model's arena, when
// it has one: a matrix holds it so that the mapping lives as long as the
// matrix is used (matmul and row keep the matrix alive to their end).
type matrix struct {
	typ        wtype
	rows, cols int
	rowBytes   int
	f32        []float32
	data       []byte
	keep       *arena
}

// bytes is the memory the matrix holds.
func (m *matrix) bytes() int64 { return int64(m.rows) * int64(m.rowBytes) }

// matrixBytes is what newMatrix takes from an arena for a tensor of b
// bytes: the bytes and the kernels' slack.
func matrixBytes(b uint64) uint64 { return b + 32 + 63 }

// newMatrix holds b, the bytes of a tensor of type t and rows × cols, in
// memory from ar (the Go heap when ar is nil or full).
func newMatrix(ar *arena, t gguf.TensorType, rows, cols int, b []byte) (*matrix, error) {
	wt, ok := wtypes[t]
	if !ok {
		return nil, fmt.Errorf("type %s", t)
	}
	el, by := wt.block()
	if cols%el != 0 {
		return nil, fmt.Errorf("rows of %d elements are not whole %s blocks of %d", cols, t, el)
	}
	m := &matrix{typ: wt, rows: rows, cols: cols, rowBytes: cols / el * by, keep: ar}
	if len(b) != rows*m.rowBytes {
		return nil, fmt.Errorf("%d bytes for %d rows of %d", len(b), rows, m.rowBytes)
	}
	buf := ar.alloc(len(b) + 32) // slack: the kernels may read a vector past a row's end
	if wt == tF32 {
		m.f32 = unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(buf))), rows*cols)
		for i := range m.f32 {
			m.f32[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return m, nil
	}
	copy(buf, b)
	m.data = buf[:len(b)]
	return m, nil
}

// row expands row r to float32 (the embedding lookup).
func (m *matrix) row(dst []float32, r int) {
	if m.typ == tF32 {
		copy(dst, m.f32[r*m.cols:(r+1)*m.cols])
		runtime.KeepAlive(m)
		return
	}
	dequantRow(dst[:m.cols], m.typ, m.data[r*m.rowBytes:(r+1)*m.rowBytes])
	runtime.KeepAlive(m)
}

// acts are the n rows of activations a product reads: as float32 for F32
// and F16 weights, quantised (Q8_0 or Q8_K, one q8Row a row) for the
// others, as llama.cpp quantises them.
type acts struct {
	x    []float32
	n    int
	cols int
	q    []q8Row
	// wide is x packed for the kernel set's wide kernel (see packWide),
	// when it takes the weights and there are two rows or more.
	wide *[]float32
}

// rowAt is where weight row o starts.
func (m *matrix) rowAt(o int) *byte {
	if m.typ == tF32 {
		return (*byte)(unsafe.Pointer(&m.f32[o*m.cols]))
	}
	return &m.data[o*m.rowBytes]
}

// prepare quantises x's n rows of cols for weights of type t.
func prepare(t wtype, x []float32, n, cols int) acts {
	a := acts{x: x, n: n, cols: cols}
	if n >= 2 && slices.Contains(kern.wideTypes, t) {
		a.wide = packWide(x, n, cols)
	}
	switch t {
	case tQ8_0, tQ4_0:
		a.q = make([]q8Row, n)
		q := make([]int8, n*cols+32)
		nb := cols / 32
		d := make([]float32, n*nb)
		for i := range a.q {
			a.q[i] = q8Row{q: q[i*cols : (i+1)*cols], d: d[i*nb : (i+1)*nb]}
			quantRowQ8_0(&a.q[i], x[i*cols:(i+1)*cols])
		}
	case tQ4_K, tQ6_K:
		a.q = make([]q8Row, n)
		q := make([]int8, n*cols+32)
		d := make([]float32, n*cols/qk)
		bs := make([]int16, n*cols/16)
		for i := range a.q {
			a.q[i] = q8Row{q: q[i*cols : (i+1)*cols], d: d[i*cols/qk : (i+1)*cols/qk], bsums: bs[i*cols/16 : (i+1)*cols/16]}
			quantRowQ8_K(&a.q[i], x[i*cols:(i+1)*cols])
		}
	}
	return a
}

// widePool keeps packWide's buffers from one product to the next.
var widePool sync.Pool

// packWide lays out x (n rows of cols) as the wide kernels read it, in
// groups of wideRows rows, the last of what is left: each group's column
// blocks of wideCols one after another, each block the group's row slices
// one after another (wideCols apart; the last block as wide, partly
// unused). The group from row i starts at i·wideBlocks(cols)·wideCols.
// Release it with widePool.Put.
func packWide(x []float32, n, cols int) *[]float32 {
	blocks := wideBlocks(cols)
	size := n * blocks * wideCols
	p, _ := widePool.Get().(*[]float32)
	if p == nil || cap(*p) < size {
		b := make([]float32, size)
		p = &b
	}
	*p = (*p)[:size]
	for g := 0; g < n; g += wideRows {
		rows := min(wideRows, n-g)
		for r := range rows {
			row := x[(g+r)*cols : (g+r+1)*cols]
			for b := range blocks {
				copy((*p)[(g*blocks+b*rows+r)*wideCols:], row[b*wideCols:min(cols, (b+1)*wideCols)])
			}
		}
	}
	return p
}

// wideBlocks is the column blocks of a row of cols in packWide's layout.
func wideBlocks(cols int) int { return (cols + wideCols - 1) / wideCols }

// matmul sets dst[i][o] = Σ_j x[i][j]·w[o][j] for the n rows of x, the
// output rows split among workers goroutines when the product is big
// enough to pay for them. Each output is one row-dot whose order depends
// on its weight row and its activation row alone, so neither n, nor which
// rows share a kernel call, nor the workers change a bit of it.
func matmul(workers int, dst, x []float32, w *matrix, n int) {
	a := prepare(w.typ, x, n, w.cols)
	if a.wide != nil {
		defer widePool.Put(a.wide)
	}
	workers = min(workers, w.rows/16)
	defer runtime.KeepAlive(w)
	if workers <= 1 || n*w.cols*w.rows < 1<<16 {
		w.mulRows(dst, &a, 0, w.rows)
		return
	}
	var wg sync.WaitGroup
	for k := range workers {
		lo, hi := w.rows*k/workers, w.rows*(k+1)/workers
		wg.Go(func() { w.mulRows(dst, &a, lo, hi) })
	}
	wg.Wait()
}

// matmulTile is how many rows of x mulRows takes through the weights at a
// time: a tile stays in the L1 or L2 cache while each weight row is read
// once for all its rows.
const matmulTile = 64

// matmulBlockBytes is how many bytes of weight rows mulRows takes through
// every tile of activation rows before the next: the block stays in the
// L2 cache and a tile's activation rows in L1, where going through every
// weight row for each tile of activations read the activations from L2
// again for each weight tile. With 16 sequences on the F16 model (rows
// of 4 KiB, 11 KiB for ffn_down) 64 KiB blocks gave 270-275 tokens per
// CPU-second against 235-237 for one weight tile (4 rows) at a time;
// Q8_0 359-379 against 364-368 (docs/llm.md).
const matmulBlockBytes = 64 << 10

// mulWide computes activation rows i to i+xr against weight rows ob to
// oe through the kernel set's wide kernel, the rows past the last
// multiple of its wr through its tile, a row at a time. Four F16 rows go
// through the set's tiles instead: four activation rows and four F16
// weight rows whole fit L1, and the 4x4 tile made 60-64 G multiply-adds
// a CPU-second from memory where the wide kernel made 40-57
// (docs/llm.md).
func (w *matrix) mulWide(dst []float32, a *acts, i, xr, ob, oe int) {
	k, out := kern, w.rows
	o := ob
	if xr == k.xr && w.typ == tF16 {
		for ; o+k.wr <= oe; o += k.wr {
			k.tile(dst[i*out+o:], out, a, i, k.xr, w, o, k.wr)
		}
	} else if n := (oe - o) / k.wr * k.wr; n > 0 {
		k.wide(dst[i*out+o:], out, a, i, xr, w, o, n)
		o += n
	}
	if o < oe {
		for r := i; r < i+xr; r++ {
			k.tile(dst[r*out+o:], out, a, r, 1, w, o, oe-o)
		}
	}
}

// mulRows computes the outputs lo ≤ o < hi of every row: each weight row
// is read once per tile of rows, and the kernels take tiles of kern.xr
// activation rows by kern.wr weight rows, a block of weight rows for every
// activation tile in turn; a row left over (all of them at batch 1) goes
// against every weight row in one call, which a kernel may run as one
// stream through the weights. Where the set has a wide kernel for the
// weights and there are two rows or more (the activations are packed),
// each group of up to wideRows activation rows goes through it instead,
// against blocks of wideRows weight rows: with 16 sequences on the F32
// --big model it made 73-81 G multiply-adds a CPU-second from memory
// where the 4x4 tiles made 53-55, and the rows a 4x4 tile left over read
// the weights once more each (docs/llm.md).
func (w *matrix) mulRows(dst []float32, a *acts, lo, hi int) {
	n, out := a.n, w.rows
	k := kern
	for t := 0; t < n; t += matmulTile {
		end := min(n, t+matmulTile)
		if k.tiles != nil && end-t >= 2 {
			w.mulTiles(dst, a, t, end, lo, hi)
			continue
		}
		if a.wide != nil && slices.Contains(k.wideTypes, w.typ) {
			for ob := lo; ob < hi; ob += wideRows {
				for i := t; i < end; i += wideRows {
					w.mulWide(dst, a, i, min(wideRows, end-i), ob, min(hi, ob+wideRows))
				}
			}
			continue
		}
		full := t + (end-t)/k.xr*k.xr
		if k.xr == 1 {
			full = t
		}
		block := max(k.wr, matmulBlockBytes/w.rowBytes/k.wr*k.wr)
		for ob := lo; ob < hi && full > t; ob += block {
			oe := min(hi, ob+block)
			for i := t; i < full; i += k.xr {
				for o := ob; o < oe; {
					wr := k.wr
					if o+wr > oe {
						wr = 1
					}
					k.tile(dst[i*out+o:], out, a, i, k.xr, w, o, wr)
					o += wr
				}
			}
		}
		for i := full; i < end; i++ {
			k.tile(dst[i*out+lo:], out, a, i, 1, w, lo, hi-lo)
		}
	}
}

// mulTiles computes the outputs lo ≤ o < hi of activation rows t to end
// for a set whose tiles take any rows (kernelSet.tiles): the rows split into
// tiles of as near the same height as the set allows (ten rows of F16 as
// 3, 3, 4 on AVX2), every tile in turn against a block of weight rows that
// stays in the L2 cache (whole groups of the three or two weight rows the
// AVX2 tiles take at a time), so the weights are read from memory once a
// step and no row is left to stream through them alone.
func (w *matrix) mulTiles(dst []float32, a *acts, t, end, lo, hi int) {
	k, out := kern, w.rows
	h := k.tileRows(w.typ)
	n := end - t
	tiles := (n + h - 1) / h
	block := max(1, matmulBlockBytes/w.rowBytes)
	if block > 6 {
		block -= block % 6 // whole groups of three or two weight rows
	}
	for ob := lo; ob < hi; ob += block {
		oe := min(hi, ob+block)
		// Each tile prefetches its share of the next block, or reads
		// its own block again where there is none.
		next, pf := min(hi, oe+block), w.rowAt(ob)
		for j := range tiles {
			i, xr := t+n*j/tiles, n*(j+1)/tiles-n*j/tiles
			if next > oe {
				pf = (*byte)(unsafe.Add(unsafe.Pointer(w.rowAt(oe)), (next-oe)*w.rowBytes*j/tiles))
			}
			k.tiles(dst[i*out+ob:], out, a, i, xr, w, ob, oe-ob, pf)
		}
	}
}
