package llm

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
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
// recomputed. Sequences of one call are computed together, so one must not read
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
	return m.forward(kv, batch, m.Threads())
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

// forward runs a batch as one stacked activation matrix: the new tokens
// of every sequence are rows of x, and each matrix product (the Q, K, V
// and output projections, the feed-forward's gate, up and down, the output
// head) runs once over all rows, so a weight row is read once a step for
// the whole batch, not once a sequence. Only attention is per row: its
// position, its sequence's pages. Every output is the same dot product in
// the same float order whatever the batch and however many workers split
// the work, so a sequence's logits do not depend on its batch.
func (m *Model) forward(kv *KV, batch []Seq, workers int) [][]float32 {
	c := m.cfg
	d, kvd, hd := c.Dim, c.KVDim(), c.HeadDim
	// rows[r] is row r's sequence and position; last[i] sequence i's last row.
	type row struct{ seq, pos int }
	var rows []row
	last := make([]int, len(batch))
	for i, s := range batch {
		for j := range s.Tokens {
			rows = append(rows, row{i, s.Pos + j})
		}
		last[i] = len(rows) - 1
	}
	n := len(rows)
	x := make([]float32, n*d)
	for r, rw := range rows {
		t := batch[rw.seq].Tokens[rw.pos-batch[rw.seq].Pos]
		m.embd.row(x[r*d:(r+1)*d], t)
	}
	h := make([]float32, n*d)
	q := make([]float32, n*d)
	k := make([]float32, n*kvd)
	v := make([]float32, n*kvd)
	att := make([]float32, n*d)
	g := make([]float32, n*c.FFN)
	u := make([]float32, n*c.FFN)
	group := c.Heads / c.KVHeads
	scale := float32(1 / math.Sqrt(float64(hd)))
	inv := ropeFreqs(hd, c.RopeTheta)
	// Attention's cost is a row's history: split rows among workers when
	// the histories are long enough to pay for them.
	var history, longest int
	for _, rw := range rows {
		history += rw.pos + 1
		longest = max(longest, rw.pos+1)
	}
	attWorkers := 1
	if history*c.Heads*hd >= 1<<16 {
		attWorkers = min(workers, n)
	}
	scores := make([][]float32, attWorkers)
	for w := range scores {
		scores[w] = make([]float32, longest)
	}
	attend := func(li, r int, scores []float32) {
		s, lastPos := batch[rows[r].seq], rows[r].pos
		for hh := range c.Heads {
			qh := q[r*d+hh*hd : r*d+(hh+1)*hd]
			ko := (hh / group) * hd
			// A page's positions are consecutive slots kvd apart.
			for pi := 0; pi*kv.PageTokens <= lastPos; pi++ {
				lo, hi := pi*kv.PageTokens, min(lastPos+1, (pi+1)*kv.PageTokens)
				dots(scores[lo:hi], qh, kv.K[kv.pageBase(s.Pages[pi], li)+ko:], kvd)
			}
			mx := float32(math.Inf(-1))
			for p := 0; p <= lastPos; p++ {
				scores[p] *= scale
				if scores[p] > mx { // not max: its NaN and ±0 rules cost a third of this loop
					mx = scores[p]
				}
			}
			var sum float32
			for p := 0; p <= lastPos; p++ {
				e := float32(math.Exp(float64(scores[p] - mx)))
				scores[p] = e
				sum += e
			}
			for p := 0; p <= lastPos; p++ {
				scores[p] /= sum
			}
			out := att[r*d+hh*hd : r*d+(hh+1)*hd]
			clear(out)
			for pi := 0; pi*kv.PageTokens <= lastPos; pi++ {
				lo, hi := pi*kv.PageTokens, min(lastPos+1, (pi+1)*kv.PageTokens)
				axpys(out, kv.V[kv.pageBase(s.Pages[pi], li)+ko:], kvd, scores[lo:hi])
			}
		}
	}
	for li := range m.layers {
		l := &m.layers[li]
		rmsnorm(h, x, l.attnNorm, n, d, c.NormEps)
		matmul(workers, q, h, l.wq, n)
		matmul(workers, k, h, l.wk, n)
		matmul(workers, v, h, l.wv, n)
		// Every row's K/V is in the pages before any row attends: a row
		// reads the rows of its sequence before it.
		for r, rw := range rows {
			for hh := range c.Heads {
				rope(q[r*d+hh*hd:r*d+(hh+1)*hd], rw.pos, inv)
			}
			for hh := range c.KVHeads {
				rope(k[r*kvd+hh*hd:r*kvd+(hh+1)*hd], rw.pos, inv)
			}
			o := kv.at(batch[rw.seq].Pages, rw.pos, li)
			copy(kv.K[o:o+kvd], k[r*kvd:(r+1)*kvd])
			copy(kv.V[o:o+kvd], v[r*kvd:(r+1)*kvd])
		}
		if attWorkers <= 1 {
			for r := range n {
				attend(li, r, scores[0])
			}
		} else {
			var next atomic.Int64
			var wg sync.WaitGroup
			for w := range attWorkers {
				wg.Go(func() {
					for r := int(next.Add(1)) - 1; r < n; r = int(next.Add(1)) - 1 {
						attend(li, r, scores[w])
					}
				})
			}
			wg.Wait()
		}
		matmul(workers, h, att, l.wo, n)
		for i := range x {
			x[i] += h[i]
		}
		rmsnorm(h, x, l.ffnNorm, n, d, c.NormEps)
		matmul(workers, g, h, l.gate, n)
		matmul(workers, u, h, l.up, n)
		siluMul(g, u)
		matmul(workers, h, g, l.down, n)
		for i := range x {
			x[i] += h[i]
		}
	}
	m.computed.Add(int64(n))
	b := len(batch)
	lastX := make([]float32, b*d)
	for i, r := range last {
		copy(lastX[i*d:(i+1)*d], x[r*d:(r+1)*d])
	}
	rmsnorm(h[:b*d], lastX, m.outNorm, b, d, c.NormEps)
	logits := make([]float32, b*c.Vocab)
	matmul(workers, logits, h[:b*d], m.output, b)
	out := make([][]float32, b)
	for i := range out {
		out[i] = logits[i*c.Vocab : (i+1)*c.Vocab : (i+1)*c.Vocab]
	}
	return out
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
