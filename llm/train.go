package llm

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"

	"modelplane/gguf"
)

// TrainSettings size TrainBigram.
type TrainSettings struct {
	// Merges is the number of BPE merges learnt (the vocabulary is the
	// 256 bytes, the merges and three control tokens).
	Merges int
	// Rank is the rank of the factored bigram; the model's width is one
	// more, rounded up to a multiple of 32.
	Rank int
	// HeldOut keeps every HeldOut-th paragraph out of training, for
	// measuring perplexity.
	HeldOut int
	// Context is the context length the file states.
	Context int
	// Refine is the number of full-batch Adam steps on the factors'
	// cross-entropy against the smoothed bigram after the SVD.
	Refine int
}

// DemoTraining is the chat demo's: 1,024 merges, rank 95 (width 96),
// every 10th paragraph held out, 2,048 positions.
var DemoTraining = TrainSettings{Merges: 1024, Rank: 95, HeldOut: 10, Context: 2048, Refine: 30}

// TrainReport is what training measured.
type TrainReport struct {
	Vocab          int // tokens
	TrainTokens    int // tokens trained on
	HeldOutTokens  int // tokens perplexity is measured on
	Params         int // parameters of the written model
	BigramHeldOut  float64
	FactoredRank   int
	UniformHeldOut float64 // the uniform baseline: Vocab
}

// TrainBigram learns a byte-level BPE vocabulary and a smoothed bigram
// model over it from texts (Markdown documents), deterministically, and
// returns the bigram factored to rank s.Rank, ready for WriteBigram.
//
// Text: headings, fenced code, tables and indented blocks are dropped,
// paragraphs (blank-line separated) are joined into one line each and
// their backticks and emphasis removed; each paragraph is trained as the
// answer of a chat turn would be, "\n" then the text then <|im_end|>, so
// the model starts after the chat template's "assistant\n" and ends
// where a paragraph ends. The bigram is Witten-Bell smoothed against the
// add-one unigram, centred per row (softmax ignores a row's constant),
// factored by a weighted truncated SVD (rows weighted by the square root
// of their count, by subspace iteration from a seeded start) and refined
// by s.Refine Adam steps on its cross-entropy. It also returns the
// held-out paragraphs' token sequences, for ModelPerplexity.
func TrainBigram(texts []string, s TrainSettings) (Bigram, TrainReport, [][]int, error) {
	var train, held []string
	n := 0
	for _, t := range texts {
		for _, p := range paragraphs(t) {
			if n++; s.HeldOut > 0 && n%s.HeldOut == 0 {
				held = append(held, p)
			} else {
				train = append(train, p)
			}
		}
	}
	if len(train) == 0 {
		return Bigram{}, TrainReport{}, nil, fmt.Errorf("train: no text")
	}
	tokens, merges := learnBPE(train, s.Merges)
	types := make([]int32, len(tokens))
	for i := range types {
		types[i] = tokNormal
	}
	for _, sp := range []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"} {
		tokens = append(tokens, sp)
		types = append(types, tokControl)
	}
	v := len(tokens)
	bos, eos := v-3, v-1
	tok, err := bpeTokenizer(tokens, types, merges, bos, eos)
	if err != nil {
		return Bigram{}, TrainReport{}, nil, err
	}
	encode := func(ps []string) [][]int {
		var out [][]int
		for _, p := range ps {
			out = append(out, append(tok.Encode("\n"+p, false), eos))
		}
		return out
	}
	trainSeqs, heldSeqs := encode(train), encode(held)

	// Counts.
	c := make([]float64, v*v)
	row := make([]float64, v)
	uni := make([]float64, v)
	ntok := 0
	for _, q := range trainSeqs {
		for i := 0; i+1 < len(q); i++ {
			c[q[i]*v+q[i+1]]++
			row[q[i]]++
			uni[q[i+1]]++
			ntok++
		}
	}
	// Witten-Bell: p(y|x) = (c(x,y) + u(x) pu(y)) / (c(x) + u(x)), u(x)
	// the distinct successors of x; pu add-one, never a control token
	// but the end.
	pu := make([]float64, v)
	var total float64
	for y := range v {
		if types[y] == tokControl && y != eos {
			continue
		}
		pu[y] = uni[y] + 1
		total += pu[y]
	}
	for y := range pu {
		pu[y] /= total
	}
	logp := make([]float64, v*v)
	for x := range v {
		u := 0.0
		for y := range v {
			if c[x*v+y] > 0 {
				u++
			}
		}
		for y := range v {
			p := pu[y]
			if row[x] > 0 {
				p = (c[x*v+y] + u*pu[y]) / (row[x] + u)
			}
			if p <= 0 {
				p = 1e-12 // a control token: as good as never
			}
			logp[x*v+y] = math.Log(p)
		}
	}
	rep := TrainReport{Vocab: v, TrainTokens: ntok, FactoredRank: s.Rank, UniformHeldOut: float64(v)}
	rep.BigramHeldOut = perplexity(heldSeqs, func(x, y int) float64 { return logp[x*v+y] })
	for _, q := range heldSeqs {
		rep.HeldOutTokens += len(q) - 1
	}

	// Centre each row and weight it, then factor.
	a := make([]float64, v*v)
	w := make([]float64, v)
	for x := range v {
		var mean float64
		for y := range v {
			mean += logp[x*v+y]
		}
		mean /= float64(v)
		w[x] = math.Sqrt(row[x] + 1)
		for y := range v {
			a[x*v+y] = w[x] * (logp[x*v+y] - mean)
		}
	}
	q, bt := truncatedSVD(a, v, s.Rank, 6)
	in := make([][]float32, v)
	out := make([][]float32, v)
	// Balance each rank's scale between the two factors (F16 keeps a few
	// decimal digits either way).
	scale := make([]float64, s.Rank)
	for k := range s.Rank {
		var nb float64
		for y := range v {
			nb += bt[y*s.Rank+k] * bt[y*s.Rank+k]
		}
		scale[k] = math.Sqrt(math.Sqrt(nb/float64(v)) + 1e-12)
	}
	for x := range v {
		in[x], out[x] = make([]float32, s.Rank), make([]float32, s.Rank)
		for k := range s.Rank {
			in[x][k] = float32(q[x*s.Rank+k] / w[x] * scale[k])
			out[x][k] = float32(bt[x*s.Rank+k] / scale[k])
		}
	}
	refine(in, out, logp, row, v, s.Rank, s.Refine)
	dim, _ := bigramDims(s.Rank)
	rep.Params = 2*v*dim + 4*dim*dim + 3*dim*32 + 3*dim
	b := Bigram{Name: "modelplane-chat-demo", Tokens: tokens, Types: types, Merges: merges, BOS: bos, EOS: eos,
		Context: s.Context, In: in, Out: out}
	return b, rep, heldSeqs, nil
}

// perplexity is exp of the mean negative log-likelihood of every
// transition in seqs under logp.
func perplexity(seqs [][]int, logp func(x, y int) float64) float64 {
	var nll float64
	n := 0
	for _, q := range seqs {
		for i := 0; i+1 < len(q); i++ {
			nll -= logp(q[i], q[i+1])
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return math.Exp(nll / float64(n))
}

// ModelPerplexity is the perplexity of a bigram model m (one whose logits
// depend on the last token only, as WriteBigram's) on seqs, from logits
// computed by m's forward pass: one batched Forward of every vocabulary
// token at position 0.
func ModelPerplexity(m *Model, seqs [][]int) float64 {
	v := m.Config().Vocab
	kv := NewKV(m.Config(), v, 16)
	batch := make([]Seq, v)
	for x := range v {
		batch[x] = Seq{Tokens: []int{x}, Pages: []int32{int32(x)}}
	}
	logits := m.Forward(kv, batch)
	lse := make([]float64, v)
	for x, l := range logits {
		mx := float64(slices.Max(l))
		var s float64
		for _, z := range l {
			s += math.Exp(float64(z) - mx)
		}
		lse[x] = mx + math.Log(s)
	}
	return perplexity(seqs, func(x, y int) float64 { return float64(logits[x][y]) - lse[x] })
}

// paragraphs is a Markdown document's prose: paragraphs as single lines,
// without headings, code, tables, backticks or emphasis.
func paragraphs(doc string) []string {
	var out []string
	var cur []string
	flush := func() {
		if len(cur) > 0 {
			p := strings.Join(cur, " ")
			p = strings.NewReplacer("`", "", "**", "", "__", "").Replace(p)
			p = strings.Join(strings.Fields(p), " ")
			if len(p) > 1 {
				out = append(out, p)
			}
		}
		cur = cur[:0]
	}
	fenced := false
	for line := range strings.Lines(doc) {
		line = strings.TrimRight(line, "\r\n")
		trim := strings.TrimSpace(line)
		if strings.HasPrefix(trim, "```") {
			fenced = !fenced
			flush()
			continue
		}
		if fenced || strings.HasPrefix(trim, "|") || strings.HasPrefix(trim, "#") || strings.HasPrefix(line, "    ") || strings.HasPrefix(line, "\t") {
			flush()
			continue
		}
		if trim == "" {
			flush()
			continue
		}
		cur = append(cur, trim)
	}
	flush()
	return out
}

// learnBPE learns merges byte-level BPE merges from texts, as GPT-2's
// tokenizers are trained: over the words of GPT-2's pre-tokenisation,
// each time merging the most frequent adjacent pair (ties to the pair of
// lowest ids). It returns the vocabulary (256 byte tokens, then one per
// merge) and the merges, lowest rank first.
func learnBPE(texts []string, merges int) ([]string, []string) {
	counts := map[string]int{}
	for _, t := range texts {
		for _, w := range pretokenize(t) {
			counts[w]++
		}
	}
	type word struct {
		syms []int32
		n    int
	}
	keys := make([]string, 0, len(counts))
	for w := range counts {
		keys = append(keys, w)
	}
	slices.Sort(keys)
	words := make([]word, len(keys))
	for i, k := range keys {
		syms := make([]int32, len(k))
		for j := 0; j < len(k); j++ {
			syms[j] = int32(k[j])
		}
		words[i] = word{syms: syms, n: counts[k]}
	}
	vocab := make([]string, 256, 256+merges)
	for b := range 256 {
		vocab[b] = ByteToken(byte(b))
	}
	pairs := map[[2]int32]int{}
	for _, w := range words {
		for j := 0; j+1 < len(w.syms); j++ {
			pairs[[2]int32{w.syms[j], w.syms[j+1]}] += w.n
		}
	}
	var out []string
	for range merges {
		best, bn := [2]int32{}, 1 // a pair seen once is not worth a token
		for p, n := range pairs {
			if n > bn || n == bn && bn > 1 && cmp.Or(cmp.Compare(p[0], best[0]), cmp.Compare(p[1], best[1])) < 0 {
				best, bn = p, n
			}
		}
		if bn <= 1 {
			break
		}
		id := int32(len(vocab))
		vocab = append(vocab, vocab[best[0]]+vocab[best[1]])
		out = append(out, vocab[best[0]]+" "+vocab[best[1]])
		for i := range words {
			w := &words[i]
			hit := false
			for j := 0; j+1 < len(w.syms); j++ {
				if w.syms[j] == best[0] && w.syms[j+1] == best[1] {
					hit = true
					break
				}
			}
			if !hit {
				continue
			}
			for j := 0; j+1 < len(w.syms); j++ {
				p := [2]int32{w.syms[j], w.syms[j+1]}
				if pairs[p] -= w.n; pairs[p] <= 0 {
					delete(pairs, p)
				}
			}
			syms := w.syms[:0]
			for j := 0; j < len(w.syms); j++ {
				if j+1 < len(w.syms) && w.syms[j] == best[0] && w.syms[j+1] == best[1] {
					syms = append(syms, id)
					j++
					continue
				}
				syms = append(syms, w.syms[j])
			}
			w.syms = syms
			for j := 0; j+1 < len(w.syms); j++ {
				pairs[[2]int32{w.syms[j], w.syms[j+1]}] += w.n
			}
		}
	}
	return vocab, out
}

// bpeTokenizer builds the GPT-2 tokenizer of a vocabulary as a GGUF file
// would carry it.
func bpeTokenizer(tokens []string, types []int32, merges []string, bos, eos int) (*Tokenizer, error) {
	var b bytes.Buffer
	err := gguf.Write(&b, []gguf.KV{
		{Key: "tokenizer.ggml.model", Type: gguf.String, Value: "gpt2"},
		{Key: "tokenizer.ggml.tokens", Type: gguf.Array, Value: tokens},
		{Key: "tokenizer.ggml.token_type", Type: gguf.Array, Value: types},
		{Key: "tokenizer.ggml.merges", Type: gguf.Array, Value: merges},
		{Key: "tokenizer.ggml.bos_token_id", Type: gguf.Uint32, Value: uint32(bos)},
		{Key: "tokenizer.ggml.eos_token_id", Type: gguf.Uint32, Value: uint32(eos)},
	}, nil)
	if err != nil {
		return nil, err
	}
	f, err := gguf.Read(bytes.NewReader(b.Bytes()), int64(b.Len()))
	if err != nil {
		return nil, err
	}
	return NewTokenizer(f)
}

// truncatedSVD factors the n×n matrix a (row-major) to rank r: a ≈ Q·Bᵀ
// with Q n×r orthonormal columns and B n×r, by iters rounds of subspace
// iteration from a seeded random start.
func truncatedSVD(a []float64, n, r, iters int) (q, bt []float64) {
	rng := rand.New(rand.NewPCG(0x6d70, 0x737664))
	q = make([]float64, n*r)
	for i := range q {
		q[i] = rng.NormFloat64()
	}
	orthonormalize(q, n, r)
	z := make([]float64, n*r)
	for range iters {
		// z = aᵀ q, then q = a z, orthonormalised.
		mulT(z, a, q, n, r)
		mul(q, a, z, n, r)
		orthonormalize(q, n, r)
	}
	bt = make([]float64, n*r)
	mulT(bt, a, q, n, r) // B = aᵀ Q, so a ≈ Q Qᵀ a = Q Bᵀ
	return q, bt
}

// mul is dst = a·x for a n×n and x n×r, row-major. It and mulT run on
// one goroutine; go:norace as dotTrain (below).
//
//go:norace
func mul(dst, a, x []float64, n, r int) {
	clear(dst)
	for i := range n {
		d := dst[i*r : (i+1)*r]
		for j := range n {
			aij := a[i*n+j]
			if aij == 0 {
				continue
			}
			xs := x[j*r : (j+1)*r]
			for k := range d {
				d[k] += aij * xs[k]
			}
		}
	}
}

// mulT is dst = aᵀ·x.
//
//go:norace
func mulT(dst, a, x []float64, n, r int) {
	clear(dst)
	for i := range n {
		xs := x[i*r : (i+1)*r]
		for j := range n {
			aij := a[i*n+j]
			if aij == 0 {
				continue
			}
			d := dst[j*r : (j+1)*r]
			for k := range d {
				d[k] += aij * xs[k]
			}
		}
	}
}

// orthonormalize makes x's r columns orthonormal (modified Gram-Schmidt).
func orthonormalize(x []float64, n, r int) {
	for k := range r {
		for p := range k {
			var d float64
			for i := range n {
				d += x[i*r+k] * x[i*r+p]
			}
			for i := range n {
				x[i*r+k] -= d * x[i*r+p]
			}
		}
		var norm float64
		for i := range n {
			norm += x[i*r+k] * x[i*r+k]
		}
		norm = math.Sqrt(norm)
		if norm == 0 {
			norm = 1
		}
		for i := range n {
			x[i*r+k] /= norm
		}
	}
}

// refine takes steps Adam steps on the factors, minimising the
// cross-entropy of softmax(In[x]·Out) against the smoothed bigram
// exp(logp[x]), each row weighted by its count: the SVD fits log
// probabilities in least squares, which spends the rank on rare
// successors; this fits what perplexity measures. The rows are split in
// a fixed number of chunks, each with its own gradient of Out summed in
// chunk order, so the result is the same bytes whatever the number of
// cores that run the chunks.
func refine(in, out [][]float32, logp, row []float64, v, r, steps int) {
	if steps <= 0 {
		return
	}
	var rows []int
	var total float64
	for x := range v {
		if row[x] > 0 {
			rows = append(rows, x)
			total += row[x]
		}
	}
	p := make([]float32, v*v)
	for i, l := range logp {
		p[i] = float32(math.Exp(l))
	}
	const chunks = 8
	const lr, b1, b2, eps = 0.02, 0.9, 0.999, 1e-8
	gin := make([][]float32, v)
	gout := make([][][]float32, chunks)
	for c := range gout {
		gout[c] = make([][]float32, v)
		for y := range v {
			gout[c][y] = make([]float32, r)
		}
	}
	m := make([][]float32, 2*v)
	s2 := make([][]float32, 2*v)
	for i := range v {
		gin[i] = make([]float32, r)
	}
	for i := range m {
		m[i], s2[i] = make([]float32, r), make([]float32, r)
	}
	chunk := func(c int) {
		logits := make([]float32, v)
		gc := gout[c]
		for y := range v {
			clear(gc[y])
		}
		for _, x := range rows[c*len(rows)/chunks : (c+1)*len(rows)/chunks] {
			ix := in[x]
			gx := gin[x]
			clear(gx)
			mx := float32(math.Inf(-1))
			for y := range v {
				d := dotTrain(ix, out[y])
				logits[y] = d
				mx = max(mx, d)
			}
			var z float64
			for y := range v {
				e := float32(math.Exp(float64(logits[y] - mx)))
				logits[y] = e
				z += float64(e)
			}
			iz := float32(1 / z)
			w := float32(row[x] / total)
			px := p[x*v : (x+1)*v]
			for y := range v {
				d := logits[y]*iz - px[y]
				if d < 1e-4 && d > -1e-4 {
					continue // most successors: too small to move anything
				}
				gradTrain(w*d, ix, out[y], gx, gc[y])
			}
		}
	}
	for step := 1; step <= steps; step++ {
		var wg sync.WaitGroup
		sem := make(chan struct{}, runtime.GOMAXPROCS(0))
		for c := range chunks {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				chunk(c)
				<-sem
			}()
		}
		wg.Wait()
		for c := 1; c < chunks; c++ {
			for y := range v {
				for k, g := range gout[c][y] {
					gout[0][y][k] += g
				}
			}
		}
		c1 := float32(1 - math.Pow(b1, float64(step)))
		c2 := float32(1 - math.Pow(b2, float64(step)))
		upd := func(p, g, m, s []float32) {
			for k := range p {
				m[k] = b1*m[k] + (1-b1)*g[k]
				s[k] = b2*s[k] + (1-b2)*g[k]*g[k]
				p[k] -= lr * (m[k] / c1) / (float32(math.Sqrt(float64(s[k]/c2))) + eps)
			}
		}
		for i := range v {
			upd(in[i], gin[i], m[i], s2[i]) // zero for a row never seen
			upd(out[i], gout[0][i], m[v+i], s2[v+i])
		}
	}
}

// dotTrain and gradTrain are refine's inner loops, marked go:norace: under
// -race, instrumenting their loads and stores made the demo model's
// training (app's tests) take 100 s instead of 6. They touch only the
// slices they are passed, and the rows each chunk owns are still checked:
// chunk clears its gradient rows, and the race detector sees those writes.

// dotTrain is the dot product of in and out[:len(in)].
//
//go:norace
func dotTrain(in, out []float32) float32 {
	out = out[:len(in)]
	var d float32
	for k, a := range in {
		d += a * out[k]
	}
	return d
}

// gradTrain adds g times out to gin and g times in to gout.
//
//go:norace
func gradTrain(g float32, in, out, gin, gout []float32) {
	out, gin, gout = out[:len(in)], gin[:len(in)], gout[:len(in)]
	for k, a := range in {
		gin[k] += g * out[k]
		gout[k] += g * a
	}
}
