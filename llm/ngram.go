package llm

import (
	"bytes"
	"fmt"
	"io"
	"math"

	"modelplane/gguf"
)

// Bigram is a bigram language model in factored form, logit(y | x) =
// In[x]·Out[y], with the vocabulary it is over. WriteBigram writes it as a
// llama-architecture GGUF whose ordinary forward pass computes exactly
// those logits, so the engine runs it like any other model.
type Bigram struct {
	Name    string
	Tokens  []string // GPT-2 byte-level vocabulary strings
	Types   []int32  // their token types (1 normal, 3 control)
	Merges  []string // GPT-2 merges, lowest rank first
	BOS     int
	EOS     int
	Context int
	// In and Out are Vocab × R: the previous token's and the next
	// token's factors.
	In, Out [][]float32
}

// bigramDims is the model width for factors of rank r: r plus one padding
// coordinate, rounded up to whole 32-wide heads (Q8_0 blocks).
func bigramDims(r int) (dim, heads int) {
	heads = (r + 1 + 31) / 32
	return heads * 32, heads
}

// WriteBigram writes b as a one-layer llama model of weight type typ.
//
// How the forward pass realises the bigram: the layer's attention output
// and feed-forward down projections are zero, so the residual stream
// leaves the layer as it entered it, the token's embedding E[x]. Each
// E[x] is In[x] with one padding coordinate that gives every row the same
// squared norm K, so the final RMSNorm divides every row by the same
// sqrt(K/dim); the output matrix is Out scaled by that, and logits are
// In[x]·Out[y] up to the norm's epsilon and the weights' rounding.
func WriteBigram(w io.Writer, b Bigram, typ gguf.TensorType) error {
	v := len(b.Tokens)
	if len(b.Types) != v || len(b.In) != v || len(b.Out) != v || v == 0 {
		return fmt.Errorf("bigram: %d tokens, %d types, %d in and %d out rows; want them equal", v, len(b.Types), len(b.In), len(b.Out))
	}
	r := len(b.In[0])
	dim, heads := bigramDims(r)
	c := Config{Layers: 1, Dim: dim, Heads: heads, KVHeads: heads, HeadDim: 32, FFN: 32, Vocab: v,
		Context: b.Context, RopeTheta: 10000, NormEps: 1e-5}
	var k float64
	for x := range v {
		if len(b.In[x]) != r || len(b.Out[x]) != r {
			return fmt.Errorf("bigram: row %d has rank %d and %d; want %d", x, len(b.In[x]), len(b.Out[x]), r)
		}
		k = max(k, dot64(b.In[x], b.In[x]))
	}
	k = max(k*1.0001, 1) // room for the padding; never a zero row
	scale := math.Sqrt(k / float64(dim))
	embd := make([]float32, v*dim)
	out := make([]float32, v*dim)
	for x := range v {
		row := embd[x*dim : (x+1)*dim]
		copy(row, b.In[x])
		row[r] = float32(math.Sqrt(k - dot64(b.In[x], b.In[x])))
		for j, o := range b.Out[x] {
			out[x*dim+j] = float32(float64(o) * scale)
		}
	}
	ones := make([]float32, dim)
	for i := range ones {
		ones[i] = 1
	}
	var tensors []gguf.Tensor
	add := func(name string, rows, cols int, x []float32) {
		if x == nil {
			x = make([]float32, rows*cols)
		}
		t := gguf.Tensor{Name: name, Dims: []uint64{uint64(cols)}, Type: gguf.F32}
		if rows > 1 {
			t.Dims = append(t.Dims, uint64(rows))
			t.Type = typ
		}
		t.Data = encodeTensor(x, t.Type)
		tensors = append(tensors, t)
	}
	add("token_embd.weight", v, dim, embd)
	add("blk.0.attn_norm.weight", 1, dim, ones)
	add("blk.0.attn_q.weight", dim, dim, nil)
	add("blk.0.attn_k.weight", dim, dim, nil)
	add("blk.0.attn_v.weight", dim, dim, nil)
	add("blk.0.attn_output.weight", dim, dim, nil)
	add("blk.0.ffn_norm.weight", 1, dim, ones)
	add("blk.0.ffn_gate.weight", c.FFN, dim, nil)
	add("blk.0.ffn_up.weight", c.FFN, dim, nil)
	add("blk.0.ffn_down.weight", dim, c.FFN, nil)
	add("output_norm.weight", 1, dim, ones)
	add("output.weight", v, dim, out)
	merges := b.Merges
	if merges == nil {
		merges = []string{}
	}
	kvs := []gguf.KV{
		{Key: "general.architecture", Type: gguf.String, Value: "llama"},
		{Key: "general.name", Type: gguf.String, Value: b.Name},
		{Key: "general.alignment", Type: gguf.Uint32, Value: uint32(32)},
		{Key: "llama.block_count", Type: gguf.Uint32, Value: uint32(c.Layers)},
		{Key: "llama.context_length", Type: gguf.Uint32, Value: uint32(c.Context)},
		{Key: "llama.embedding_length", Type: gguf.Uint32, Value: uint32(c.Dim)},
		{Key: "llama.feed_forward_length", Type: gguf.Uint32, Value: uint32(c.FFN)},
		{Key: "llama.attention.head_count", Type: gguf.Uint32, Value: uint32(c.Heads)},
		{Key: "llama.attention.head_count_kv", Type: gguf.Uint32, Value: uint32(c.KVHeads)},
		{Key: "llama.rope.dimension_count", Type: gguf.Uint32, Value: uint32(c.HeadDim)},
		{Key: "llama.rope.freq_base", Type: gguf.Float32, Value: float32(c.RopeTheta)},
		{Key: "llama.attention.layer_norm_rms_epsilon", Type: gguf.Float32, Value: c.NormEps},
		{Key: "tokenizer.ggml.model", Type: gguf.String, Value: "gpt2"},
		{Key: "tokenizer.ggml.tokens", Type: gguf.Array, Value: b.Tokens},
		{Key: "tokenizer.ggml.token_type", Type: gguf.Array, Value: b.Types},
		{Key: "tokenizer.ggml.merges", Type: gguf.Array, Value: merges},
		{Key: "tokenizer.ggml.bos_token_id", Type: gguf.Uint32, Value: uint32(b.BOS)},
		{Key: "tokenizer.ggml.eos_token_id", Type: gguf.Uint32, Value: uint32(b.EOS)},
		{Key: "tokenizer.ggml.add_bos_token", Type: gguf.Bool, Value: false},
		{Key: "tokenizer.chat_template", Type: gguf.String, Value: ChatMLTemplate},
	}
	return gguf.Write(w, kvs, tensors)
}

// ByteVocab is the demo's byte-level vocabulary: the 256 bytes, then
// <|endoftext|> (BOS), <|im_start|> and <|im_end|> (EOS), as control
// tokens.
func ByteVocab() (tokens []string, types []int32, bos, eos int) {
	for b := range 256 {
		tokens = append(tokens, ByteToken(byte(b)))
		types = append(types, tokNormal)
	}
	for _, s := range []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"} {
		tokens = append(tokens, s)
		types = append(types, tokControl)
	}
	return tokens, types, 256, 258
}

// LoadBytes loads a model from a GGUF file's bytes.
func LoadBytes(b []byte) (*Model, error) {
	f, err := gguf.Read(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return nil, err
	}
	return FromFile(f)
}

func dot64(a, b []float32) float64 {
	var s float64
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	return s
}
