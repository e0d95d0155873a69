package docproc

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"modelplane/runtime/onnx/onnxgen"
	"modelplane/runtime/tokenizer"
	"modelplane/serveapi"
)

// DefaultSeed is the seed the demo builds its pipeline's models from.
const DefaultSeed = 29

// Sizes of the models and their data.
const (
	// Dim is the embedding's width.
	Dim = 96
	// MaxTokens is the tokenizer's max_length.
	MaxTokens = 128
	vocabSize = 4000
	// perClassTrain and perClassHeldOut sentences of each class.
	perClassTrain   = 200
	perClassHeldOut = 100
)

// Version is one model version of the pipeline: its file and how the
// built-in runtime serves it (no features: the file's own tensors).
type Version struct {
	// Model and Name are the registry's model and version names, as the
	// seed's pipeline names them.
	Model, Name string
	// Runtime and Format are the registry's.
	Runtime, Format string
	// File is the file's name and Data its bytes, the same for a seed.
	File string
	Data []byte
	// Serving is the version's serving configuration: Format, File and
	// SampleInputs (objects keyed by the model's inputs). Model, Version
	// and Batching are the replica's and the endpoint's.
	Serving serveapi.Config
	// Description says what the version is, for the registry.
	Description string
	// Task is the registry task of its model: classification for the
	// classifier; the registry has no task for a tokenizer or an
	// embedder, whose answers are tensors, so they are regression (their
	// answers are values, neither a label nor a score).
	Task string
	// InputSchema is the JSON Schema of one /predict instance, which the
	// gateway checks before a replica sees it.
	InputSchema json.RawMessage
}

// Pipeline is the document-processor's models.
type Pipeline struct {
	Tokenizer, Embedder, Classifier Version
	// Classes name the classifier's probabilities, in order: what the
	// formatting step turns the argmax into.
	Classes []string
	// TrainAccuracy and HeldOutAccuracy are the classifier's accuracy on
	// its training sentences and on sentences of templates it never saw,
	// computed in Go over the same tokens and weights the files hold.
	TrainAccuracy, HeldOutAccuracy float64
	// HeldOut are the sentences HeldOutAccuracy is measured on, for
	// tests that send them through a served pipeline.
	HeldOut []Sentence
}

// Build makes the pipeline's three models from seed.
func Build(seed uint64) (Pipeline, error) {
	b, err := build(seed)
	if err != nil {
		return Pipeline{}, err
	}
	return b.pipeline, nil
}

// built is what build makes, with what the tests check the files against.
type built struct {
	pipeline Pipeline
	tok      *tokenizer.Tokenizer
	table    [][]float32 // vocabulary × Dim
	w        [][]float64 // Dim × classes
	bias     []float64
	heldOut  []Sentence
}

func build(seed uint64) (built, error) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	train := sentences(rng, perClassTrain, false)
	held := sentences(rng, perClassHeldOut, true)
	var b built
	b.heldOut = held
	// The vocabulary is learnt from the training sentences and a fixed
	// text of everyday office English (corpus.txt), never from the
	// held-out sentences nor from anything else in the repository, so that
	// editing the docs changes no model and no accuracy figure.
	corpus := strings.Split(strings.TrimSpace(officeText), "\n")
	for _, s := range train {
		corpus = append(corpus, s.Text)
	}
	tokJSON, err := tokenizer.Train(corpus, vocabSize, 2, MaxTokens)
	if err != nil {
		return b, fmt.Errorf("tokenizer: %w", err)
	}
	if b.tok, err = tokenizer.Parse(tokJSON); err != nil {
		return b, fmt.Errorf("tokenizer: %w", err)
	}
	var vocab struct {
		Model struct {
			Vocab map[string]int64 `json:"vocab"`
		} `json:"model"`
	}
	if err := json.Unmarshal(tokJSON, &vocab); err != nil {
		return b, err
	}
	v := len(vocab.Model.Vocab)
	trainIDs := make([][]int64, len(train))
	for i, s := range train {
		e, err := b.tok.Encode(s.Text)
		if err != nil {
			return b, err
		}
		trainIDs[i] = e.IDs
	}
	pieces := make([]bool, v)
	for tok, id := range vocab.Model.Vocab {
		pieces[id] = len([]rune(strings.TrimPrefix(tok, "##"))) == 1
	}
	b.table = embeddingTable(rng, v, trainIDs, pieces)
	x := make([][]float64, len(train))
	for i, ids := range trainIDs {
		x[i] = b.embed(ids)
	}
	b.w, b.bias = trainSoftmax(x, train, len(Classes))
	b.pipeline.Classes = append([]string(nil), Classes...)
	b.pipeline.TrainAccuracy = b.accuracy(train)
	b.pipeline.HeldOutAccuracy = b.accuracy(held)
	b.pipeline.HeldOut = held

	embedder, err := b.embedderONNX()
	if err != nil {
		return b, err
	}
	classifier, err := b.classifierONNX()
	if err != nil {
		return b, err
	}
	sample := "Please find attached invoice 4521 for $1,250.00."
	enc, _ := b.tok.Encode(sample)
	ids, _ := json.Marshal(enc.IDs)
	mask, _ := json.Marshal(enc.Mask)
	emb, _ := json.Marshal(float32s(b.embed(enc.IDs)))
	b.pipeline.Tokenizer = Version{Model: "bert-tokenizer", Name: "v2", Runtime: "tokenizer", Format: "tokenizer", File: "tokenizer.json",
		Data:        tokJSON,
		Serving:     tensorServing("tokenizer", "tokenizer.json", fmt.Sprintf(`{"text": %q}`, sample)),
		Task:        "regression",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string","maxLength":20000}},"required":["text"]}`),
		Description: fmt.Sprintf("WordPiece tokenizer (%d tokens) learnt from the classifier's training sentences and a fixed office-English text; [CLS] … [SEP], lower case, at most %d tokens.", v, MaxTokens)}
	b.pipeline.Embedder = Version{Model: "bert-embedder", Name: "v5", Runtime: "onnxruntime", Format: "onnx", File: "model.onnx",
		Data:    embedder,
		Serving: tensorServing("onnx", "model.onnx", fmt.Sprintf(`{"input_ids": %s, "attention_mask": %s}`, ids, mask)),
		Task:    "regression",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"input_ids":{"type":"array","items":{"type":"integer","minimum":0}},` +
			`"attention_mask":{"type":"array","items":{"type":"integer","minimum":0,"maximum":1}}},"required":["input_ids","attention_mask"]}`),
		Description: fmt.Sprintf("BERT-style embedder: token embeddings (%d × %d, IDF-weighted) and masked mean pooling, L2-normalised; input_ids and attention_mask int64 [batch, seq] → embedding [batch, %d].", v, Dim, Dim)}
	b.pipeline.Classifier = Version{Model: "document-classifier", Name: "v3", Runtime: "onnxruntime", Format: "onnx", File: "model.onnx",
		Data:    classifier,
		Serving: tensorServing("onnx", "model.onnx", fmt.Sprintf(`{"embedding": %s}`, emb)),
		Task:    "classification",
		InputSchema: json.RawMessage(fmt.Sprintf(`{"type":"object","properties":{"embedding":{"type":"array","items":{"type":"number"},"minItems":%d,"maxItems":%d}},"required":["embedding"]}`,
			Dim, Dim)),
		Description: fmt.Sprintf("Softmax regression over the embedding, trained on %d labelled sentences: %s. Held-out accuracy %.1f %% on sentence shapes it never saw (chance %.0f %%).",
			len(train), strings.Join(Classes, ", "), 100*b.pipeline.HeldOutAccuracy, 100.0/float64(len(Classes)))}
	return b, nil
}

func tensorServing(format, file, sample string) serveapi.Config {
	return serveapi.Config{Format: format, File: file, SampleInputs: []json.RawMessage{json.RawMessage(sample)}}
}

// officeText is the vocabulary's fixed corpus beside the training
// sentences: plain prose about an office's paperwork, written for the
// demo, one sentence a line.
//
//go:embed corpus.txt
var officeText string

// embeddingTable gives every token a random direction scaled by its
// inverse document frequency over the training sentences, so that words
// every sentence has (and the special tokens, which are zero) weigh
// little in the pooled embedding.
func embeddingTable(rng *rand.Rand, v int, docs [][]int64, pieces []bool) [][]float32 {
	df := make([]int, v)
	for _, ids := range docs {
		seen := map[int64]bool{}
		for _, id := range ids {
			if !seen[id] {
				df[id]++
				seen[id] = true
			}
		}
	}
	n := float64(len(docs))
	// Each token starts as a random direction; its row adds the mean
	// direction of the tokens it shares sentences with (random indexing),
	// so that words used alike, "invoice" and "payment", point alike.
	index := make([][]float64, v)
	for id := range index {
		index[id] = unit(rng, Dim)
	}
	context := make([][]float64, v)
	uses := make([]int, v)
	for _, ids := range docs {
		mean := make([]float64, Dim)
		for _, id := range ids {
			for k := range mean {
				mean[k] += index[id][k] / float64(len(ids))
			}
		}
		for _, id := range ids {
			if context[id] == nil {
				context[id] = make([]float64, Dim)
			}
			for k := range mean {
				context[id][k] += mean[k]
			}
			uses[id]++
		}
	}
	table := make([][]float32, v)
	for id := range table {
		row := make([]float32, Dim)
		idf := math.Log((n+1)/(float64(df[id])+1)) + 1
		if id < 5 || df[id] == 0 || pieces[id] {
			// The special tokens, tokens the training sentences never
			// had, and single characters (the pieces an unknown word is
			// spelt in) carry nothing the classifier learnt: zero.
			idf = 0
		}
		vec := append([]float64(nil), index[id]...)
		if uses[id] > 0 {
			for k := range vec {
				vec[k] += contextWeight * context[id][k] / float64(uses[id])
			}
		}
		var norm float64
		for _, x := range vec {
			norm += x * x
		}
		norm = math.Sqrt(norm)
		for k := range row {
			row[k] = float32(idf * vec[k] / norm)
		}
		table[id] = row
	}
	return table
}

// contextWeight is how much of a token's row is its contexts' direction.
const contextWeight = 4

func unit(rng *rand.Rand, d int) []float64 {
	v := make([]float64, d)
	var norm float64
	for k := range v {
		v[k] = rng.NormFloat64()
		norm += v[k] * v[k]
	}
	norm = math.Sqrt(norm)
	for k := range v {
		v[k] /= norm
	}
	return v
}

// embed is the embedder's computation in Go, in float32 as ONNX Runtime
// does it: the mean of the tokens' rows, L2-normalised.
func (b *built) embed(ids []int64) []float64 {
	sum := make([]float32, Dim)
	for _, id := range ids {
		for k, x := range b.table[id] {
			sum[k] += x
		}
	}
	count := float32(max(len(ids), 1))
	var sq float32
	for k := range sum {
		sum[k] /= count
		sq += sum[k] * sum[k]
	}
	norm := float32(math.Sqrt(float64(sq + normEpsilon)))
	out := make([]float64, Dim)
	for k := range sum {
		out[k] = float64(sum[k] / norm)
	}
	return out
}

// normEpsilon keeps an all-zero embedding (a text of special tokens
// only) from dividing by zero.
const normEpsilon = 1e-12

// probabilities is the classifier in Go.
func (b *built) probabilities(x []float64) []float64 {
	z := make([]float64, len(b.bias))
	for c := range z {
		z[c] = b.bias[c]
		for k, xk := range x {
			z[c] += xk * b.w[k][c]
		}
	}
	return softmax(z)
}

func (b *built) accuracy(ss []Sentence) float64 {
	right := 0
	for _, s := range ss {
		e, err := b.tok.Encode(s.Text)
		if err != nil {
			continue
		}
		if argmax(b.probabilities(b.embed(e.IDs))) == s.Class {
			right++
		}
	}
	return float64(right) / float64(len(ss))
}

func softmax(z []float64) []float64 {
	m := z[0]
	for _, v := range z {
		m = max(m, v)
	}
	var sum float64
	out := make([]float64, len(z))
	for i, v := range z {
		out[i] = math.Exp(v - m)
		sum += out[i]
	}
	for i := range out {
		out[i] /= sum
	}
	return out
}

func argmax(p []float64) int {
	best := 0
	for i, v := range p {
		if v > p[best] {
			best = i
		}
	}
	return best
}

// trainSoftmax fits a multinomial logistic regression by full-batch
// gradient descent with a little L2 regularisation: the embedding is
// unit length, so a fixed step converges.
func trainSoftmax(x [][]float64, ys []Sentence, k int) ([][]float64, []float64) {
	const (
		epochs = 400
		step   = 4.0
		l2     = 1e-3
	)
	d := len(x[0])
	w := make([][]float64, d)
	for i := range w {
		w[i] = make([]float64, k)
	}
	bias := make([]float64, k)
	n := float64(len(x))
	for range epochs {
		gw := make([][]float64, d)
		for i := range gw {
			gw[i] = make([]float64, k)
		}
		gb := make([]float64, k)
		for i, xi := range x {
			z := make([]float64, k)
			for c := range z {
				z[c] = bias[c]
				for j, v := range xi {
					z[c] += v * w[j][c]
				}
			}
			p := softmax(z)
			p[ys[i].Class]--
			for c := range p {
				gb[c] += p[c] / n
				for j, v := range xi {
					gw[j][c] += v * p[c] / n
				}
			}
		}
		for j := range w {
			for c := range w[j] {
				w[j][c] -= step * (gw[j][c] + l2*w[j][c])
			}
		}
		for c := range bias {
			bias[c] -= step * gb[c]
		}
	}
	return w, bias
}

func float32s(xs []float64) []float32 {
	out := make([]float32, len(xs))
	for i, x := range xs {
		out[i] = float32(x)
	}
	return out
}

// embedderONNX writes the embedder: Gather of the token rows, the mask
// as float, masked sum over the sequence divided by the token count, and
// L2 normalisation. It declares its inputs paddable with 0, which the
// mask makes harmless, so the runtime batches texts of any length.
func (b *built) embedderONNX() ([]byte, error) {
	flat := make([]float32, 0, len(b.table)*Dim)
	for _, row := range b.table {
		flat = append(flat, row...)
	}
	batchSeq := []onnxgen.Dim{onnxgen.Symbolic("batch"), onnxgen.Symbolic("sequence")}
	m := onnxgen.Model{
		ProducerName: "modelplane-demo",
		Opsets:       []onnxgen.Opset{{Version: 13}},
		Graph: onnxgen.Graph{
			Name: "bert_embedder",
			Nodes: []onnxgen.Node{
				{OpType: "Gather", Inputs: []string{"token_embeddings", "input_ids"}, Outputs: []string{"tokens"}},
				{OpType: "Cast", Inputs: []string{"attention_mask"}, Outputs: []string{"mask"}, Attrs: []onnxgen.Attr{onnxgen.IntAttr("to", onnxgen.Float)}},
				{OpType: "Unsqueeze", Inputs: []string{"mask", "axis_2"}, Outputs: []string{"mask3"}},
				{OpType: "Mul", Inputs: []string{"tokens", "mask3"}, Outputs: []string{"masked"}},
				{OpType: "ReduceSum", Inputs: []string{"masked", "axis_1"}, Outputs: []string{"summed"}, Attrs: []onnxgen.Attr{onnxgen.IntAttr("keepdims", 0)}},
				{OpType: "ReduceSum", Inputs: []string{"mask", "axis_1"}, Outputs: []string{"count"}, Attrs: []onnxgen.Attr{onnxgen.IntAttr("keepdims", 1)}},
				{OpType: "Max", Inputs: []string{"count", "one"}, Outputs: []string{"count1"}},
				{OpType: "Div", Inputs: []string{"summed", "count1"}, Outputs: []string{"mean"}},
				{OpType: "Mul", Inputs: []string{"mean", "mean"}, Outputs: []string{"squares"}},
				{OpType: "ReduceSum", Inputs: []string{"squares", "axis_1"}, Outputs: []string{"sumsq"}, Attrs: []onnxgen.Attr{onnxgen.IntAttr("keepdims", 1)}},
				{OpType: "Add", Inputs: []string{"sumsq", "epsilon"}, Outputs: []string{"sumsq_eps"}},
				{OpType: "Sqrt", Inputs: []string{"sumsq_eps"}, Outputs: []string{"norm"}},
				{OpType: "Div", Inputs: []string{"mean", "norm"}, Outputs: []string{"embedding"}},
			},
			Initializers: []onnxgen.Tensor{
				{Name: "token_embeddings", Dims: []int64{int64(len(b.table)), Dim}, Floats: flat},
				{Name: "axis_1", Dims: []int64{1}, Int64s: []int64{1}},
				{Name: "axis_2", Dims: []int64{1}, Int64s: []int64{2}},
				{Name: "one", Dims: []int64{}, Floats: []float32{1}},
				{Name: "epsilon", Dims: []int64{}, Floats: []float32{normEpsilon}},
			},
			Inputs: []onnxgen.Value{
				{Name: "input_ids", ElemType: onnxgen.Int64, Dims: batchSeq},
				{Name: "attention_mask", ElemType: onnxgen.Int64, Dims: batchSeq},
			},
			Outputs: []onnxgen.Value{{Name: "embedding", Dims: []onnxgen.Dim{onnxgen.Symbolic("batch"), onnxgen.Fixed(Dim)}}},
		},
		Metadata: []onnxgen.Prop{
			{Key: "modelplane.output_kind", Value: serveapi.OutputValue},
			// A padded token is masked out of the mean, so texts of any
			// length batch together (runtime/onnx.MetadataPadding).
			{Key: "modelplane.padding", Value: `{"input_ids": 0, "attention_mask": 0}`},
		},
	}
	out, err := m.Bytes()
	if err != nil {
		return nil, fmt.Errorf("embedder onnx: %w", err)
	}
	return out, nil
}

// classifierONNX writes the classifier: MatMul, Add and Softmax over the
// embedding, giving each class's probability.
func (b *built) classifierONNX() ([]byte, error) {
	w := make([]float32, 0, Dim*len(Classes))
	for _, row := range b.w {
		w = append(w, float32s(row)...)
	}
	m := onnxgen.Model{
		ProducerName: "modelplane-demo",
		Opsets:       []onnxgen.Opset{{Version: 13}},
		Graph: onnxgen.Graph{
			Name: "document_classifier",
			Nodes: []onnxgen.Node{
				{OpType: "MatMul", Inputs: []string{"embedding", "weights"}, Outputs: []string{"logits_raw"}},
				{OpType: "Add", Inputs: []string{"logits_raw", "bias"}, Outputs: []string{"logits"}},
				{OpType: "Softmax", Inputs: []string{"logits"}, Outputs: []string{"probabilities"}, Attrs: []onnxgen.Attr{onnxgen.IntAttr("axis", -1)}},
			},
			Initializers: []onnxgen.Tensor{
				{Name: "weights", Dims: []int64{Dim, int64(len(Classes))}, Floats: w},
				{Name: "bias", Dims: []int64{int64(len(Classes))}, Floats: float32s(b.bias)},
			},
			Inputs:  []onnxgen.Value{{Name: "embedding", Dims: []onnxgen.Dim{onnxgen.Symbolic("batch"), onnxgen.Fixed(Dim)}}},
			Outputs: []onnxgen.Value{{Name: "probabilities", Dims: []onnxgen.Dim{onnxgen.Symbolic("batch"), onnxgen.Fixed(int64(len(Classes)))}}},
		},
		Metadata: []onnxgen.Prop{
			{Key: "modelplane.output_kind", Value: serveapi.OutputProbability},
			{Key: "modelplane.classes", Value: strings.Join(Classes, ",")},
		},
	}
	out, err := m.Bytes()
	if err != nil {
		return nil, fmt.Errorf("classifier onnx: %w", err)
	}
	return out, nil
}
