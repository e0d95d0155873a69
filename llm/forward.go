package llm

import (
	"fmt"
	"math"
	"runtime"
	"sync"
)

// KV is a paged K/V store: pages of PageTokens positions, each holding K
// and V of every layer. Page p, layer l, slot s starts at
// ((p×Layers+l)×PageTokens+s)×KVDim in K and in V. The engine owns which
// page belongs to whom; KV only holds the numbers.
type KV struct {
	Pages, PageTokens int
	layers, kvDim     int
	K, V              []float32
}

// NewKV allocates a store of pages×pageTokens positions for c.
func NewKV(c Config, pages, pageTokens int) *KV {
	if pages <= 0 || pageTokens <= 0 {
		panic(fmt.Sprintf("llm.NewKV: %d pages of %d tokens", pages, pageTokens))
	}
	n := pages * c.Layers * pageTokens * c.KVDim()
	return &KV{Pages: pages, PageTokens: pageTokens, layers: c.Layers, kvDim: c.KVDim(),
		K: make([]float32, n), V: make([]float32, n)}
}

// Bytes is the memory the store holds.
func (kv *KV) Bytes() int64 { return int64(len(kv.K)+len(kv.V)) * 4 }

func (kv *KV) at(pages []int32, pos, layer int) int {
	p := int(pages[pos/kv.PageTokens])
	return ((p*kv.layers+layer)*kv.PageTokens + pos%kv.PageTokens) * kv.kvDim
}

// pageBase is the offset of slot 0 of a page in one layer.
func (kv *KV) pageBase(page int32, layer int) int {
	return (int(page)*kv.layers + layer) * kv.PageTokens * kv.kvDim
}

// Seq is one sequence's share of a Forward call. Tokens are the new tokens
// at positions Pos … Pos+len(Tokens)-1; Pages is the block table, page ids
// covering positions 0 … Pos+len(Tokens)-1 (PageTokens positions a page).
// Positions before Pos must already be in the pages, written by an earlier
// Forward call (a shared prefix or earlier steps); they are read, never
// recomputed. Sequences of one call run concurrently, so one must not read
// positions another writes in the same call.
type Seq struct {
	Tokens []int
	Pos    int
	Pages  []int32
}

// Forward runs each sequence's new tokens through the model, writes their
// K/V into the sequences' pages and returns the logits of each sequence's
// last token (len(batch) slices of Vocab). A sequence gives the same logits
// alone as in any batch. Sequences of one call must not write the same
// page; an invalid Seq (no tokens, too few pages, a page or token id out of
// range, positions past Context) is a programming error and panics with
// the reason — the engine checks requests before they get here.
func (m *Model) Forward(kv *KV, batch []Seq) [][]float32 {
	for i, s := range batch {
		if err := m.check(kv, s); err != nil {
			panic(fmt.Sprintf("llm.Forward: seq %d: %v", i, err))
		}
	}
	m.calls.Add(1)
	out := make([][]float32, len(batch))
	workers := min(runtime.GOMAXPROCS(0), len(batch))
	if workers <= 1 {
		for i, s := range batch {
			out[i] = m.forward(kv, s, runtime.GOMAXPROCS(0))
		}
		return out
	}
	var wg sync.WaitGroup
	next := make(chan int, len(batch))
	for i := range batch {
		next <- i
	}
	close(next)
	for range workers {
		wg.Go(func() {
			for i := range next {
				out[i] = m.forward(kv, batch[i], 1)
			}
		})
	}
	wg.Wait()
	return out
}

func (m *Model) check(kv *KV, s Seq) error {
	if len(s.Tokens) == 0 {
		return fmt.Errorf("no new tokens")
	}
	if s.Pos < 0 {
		return fmt.Errorf("position %d", s.Pos)
	}
	end := s.Pos + len(s.Tokens)
	if end > m.cfg.Context {
		return fmt.Errorf("positions up to %d exceed the context length %d", end, m.cfg.Context)
	}
	if need := (end + kv.PageTokens - 1) / kv.PageTokens; len(s.Pages) < need {
		return fmt.Errorf("%d pages cover fewer than %d positions", len(s.Pages), end)
	}
	for _, p := range s.Pages[:(end+kv.PageTokens-1)/kv.PageTokens] {
		if p < 0 || int(p) >= kv.Pages {
			return fmt.Errorf("page %d out of range [0,%d)", p, kv.Pages)
		}
	}
	for _, t := range s.Tokens {
		if t < 0 || t >= m.cfg.Vocab {
			return fmt.Errorf("token %d out of range [0,%d)", t, m.cfg.Vocab)
		}
	}
	if kv.layers != m.cfg.Layers || kv.kvDim != m.cfg.KVDim() {
		return fmt.Errorf("KV store was made for another model")
	}
	return nil
}

// forward runs one sequence; its float order depends on nothing but s
// (workers only splits the output rows of each matrix product).
func (m *Model) forward(kv *KV, s Seq, workers int) []float32 {
	c := m.cfg
	n, d, kvd, hd := len(s.Tokens), c.Dim, c.KVDim(), c.HeadDim
	x := make([]float32, n*d)
	for i, t := range s.Tokens {
		copy(x[i*d:(i+1)*d], m.embd[t*d:(t+1)*d])
	}
	h := make([]float32, n*d)
	q := make([]float32, n*d)
	k := make([]float32, n*kvd)
	v := make([]float32, n*kvd)
	att := make([]float32, n*d)
	g := make([]float32, n*c.FFN)
	u := make([]float32, n*c.FFN)
	scores := make([]float32, s.Pos+n)
	group := c.Heads / c.KVHeads
	scale := float32(1 / math.Sqrt(float64(hd)))
	inv := ropeFreqs(hd, c.RopeTheta)
	for li := range m.layers {
		l := &m.layers[li]
		rmsnorm(h, x, l.attnNorm, n, d, c.NormEps)
		parMatmul(workers, q, h, l.wq, n, d, d)
		parMatmul(workers, k, h, l.wk, n, d, kvd)
		parMatmul(workers, v, h, l.wv, n, d, kvd)
		for i := range n {
			pos := s.Pos + i
			for hh := range c.Heads {
				rope(q[i*d+hh*hd:i*d+(hh+1)*hd], pos, inv)
			}
			for hh := range c.KVHeads {
				rope(k[i*kvd+hh*hd:i*kvd+(hh+1)*hd], pos, inv)
			}
			o := kv.at(s.Pages, pos, li)
			copy(kv.K[o:o+kvd], k[i*kvd:(i+1)*kvd])
			copy(kv.V[o:o+kvd], v[i*kvd:(i+1)*kvd])
		}
		for i := range n {
			last := s.Pos + i
			for hh := range c.Heads {
				qh := q[i*d+hh*hd : i*d+(hh+1)*hd]
				ko := (hh / group) * hd
				mx := float32(math.Inf(-1))
				for pi := 0; pi*kv.PageTokens <= last; pi++ {
					base := kv.pageBase(s.Pages[pi], li) + ko
					for p := pi * kv.PageTokens; p <= min(last, (pi+1)*kv.PageTokens-1); p++ {
						sc := dot(qh, kv.K[base:base+hd]) * scale
						scores[p] = sc
						mx = max(mx, sc)
						base += kvd
					}
				}
				var sum float32
				for p := 0; p <= last; p++ {
					e := float32(math.Exp(float64(scores[p] - mx)))
					scores[p] = e
					sum += e
				}
				out := att[i*d+hh*hd : i*d+(hh+1)*hd]
				clear(out)
				for pi := 0; pi*kv.PageTokens <= last; pi++ {
					base := kv.pageBase(s.Pages[pi], li) + ko
					for p := pi * kv.PageTokens; p <= min(last, (pi+1)*kv.PageTokens-1); p++ {
						axpy(out, kv.V[base:base+hd], scores[p]/sum)
						base += kvd
					}
				}
			}
		}
		parMatmul(workers, h, att, l.wo, n, d, d)
		for i := range x {
			x[i] += h[i]
		}
		rmsnorm(h, x, l.ffnNorm, n, d, c.NormEps)
		parMatmul(workers, g, h, l.gate, n, d, c.FFN)
		parMatmul(workers, u, h, l.up, n, d, c.FFN)
		for i := range g {
			g[i] = g[i] / (1 + float32(math.Exp(float64(-g[i])))) * u[i]
		}
		parMatmul(workers, h, g, l.down, n, c.FFN, d)
		for i := range x {
			x[i] += h[i]
		}
	}
	m.computed.Add(int64(n))
	lastX := x[(n-1)*d:]
	rmsnorm(h[:d], lastX, m.outNorm, 1, d, c.NormEps)
	logits := make([]float32, c.Vocab)
	parMatmul(workers, logits, h[:d], m.output, 1, d, c.Vocab)
	return logits
}

func ropeFreqs(hd int, theta float64) []float64 {
	inv := make([]float64, hd/2)
	for i := range inv {
		inv[i] = math.Pow(theta, -float64(2*i)/float64(hd))
	}
	return inv
}

// rope rotates adjacent pairs (x[2i], x[2i+1]) by pos×θ^(-2i/headDim), the
// layout of llama-architecture GGUF files (llama.cpp's "normal" rope).
func rope(x []float32, pos int, inv []float64) {
	for i, f := range inv {
		a := float64(pos) * f
		sin, cos := math.Sincos(a)
		c, s := float32(cos), float32(sin)
		x0, x1 := x[2*i], x[2*i+1]
		x[2*i] = x0*c - x1*s
		x[2*i+1] = x0*s + x1*c
	}
}

func rmsnorm(dst, x, w []float32, n, d int, eps float32) {
	for i := range n {
		row := x[i*d : (i+1)*d]
		var ss float32
		for _, v := range row {
			ss += v * v
		}
		r := float32(1 / math.Sqrt(float64(ss/float32(d)+eps)))
		out := dst[i*d : (i+1)*d]
		for j, v := range row {
			out[j] = v * r * w[j]
		}
	}
}

// parMatmul is matmul with the output rows split among workers goroutines
// when the product is big enough to pay for them. Each output is the same
// dot product either way.
func parMatmul(workers int, dst, x, w []float32, n, in, out int) {
	if workers <= 1 || n*in*out < 1<<18 {
		matmul(dst, x, w, n, in, out)
		return
	}
	workers = min(workers, out/16)
	if workers <= 1 {
		matmul(dst, x, w, n, in, out)
		return
	}
	var wg sync.WaitGroup
	for k := range workers {
		lo, hi := out*k/workers, out*(k+1)/workers
		wg.Go(func() { matmulRows(dst, x, w, n, in, out, lo, hi) })
	}
	wg.Wait()
}

// matmul sets dst[i][o] = Σ_j x[i][j]·w[o][j] for n rows of x; each output
// is one dot product in a fixed order, so a row's result does not depend
// on n. Each weight row is read once for all n rows.
func matmul(dst, x, w []float32, n, in, out int) { matmulRows(dst, x, w, n, in, out, 0, out) }

func matmulRows(dst, x, w []float32, n, in, out, lo, hi int) {
	for o := lo; o < hi; o++ {
		wr := w[o*in : (o+1)*in]
		for i := range n {
			dst[i*out+o] = dot(x[i*in:(i+1)*in], wr)
		}
	}
}

func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func axpy(dst, x []float32, a float32) {
	x = x[:len(dst)]
	for i := range dst {
		dst[i] += a * x[i]
	}
}
