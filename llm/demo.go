package llm

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"strings"

	"modelplane/gguf"
)

// DemoConfig is the shape of the demo model WriteDemo writes: 4 layers,
// width 64, 4 query heads sharing 2 K/V heads (GQA), a 192-wide SwiGLU
// feed-forward, a byte-level vocabulary of 256 bytes plus <|endoftext|>,
// <|im_start|> and <|im_end|>, and 2,048 positions of context.
var DemoConfig = Config{Layers: 4, Dim: 64, Heads: 4, KVHeads: 2, HeadDim: 16, FFN: 192,
	Vocab: 259, Context: 2048, RopeTheta: 10000, NormEps: 1e-5}

// ChatMLTemplate is the Jinja chat template the demo model carries.
const ChatMLTemplate = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"

// WriteDemo writes the demo llama model deterministically (the same bytes
// on every call) with weights of type F32, F16 or Q8_0: seeded random
// weights scaled so that the logits are spread, not flat. It is about
// 1.1 MB in F32. Its tokenizer is GPT-2 byte-level BPE without merges, so
// token id b is byte b.
func WriteDemo(w io.Writer, typ gguf.TensorType) error {
	return WriteModel(w, DemoConfig, typ)
}

// WriteDemoFile writes the demo model (WriteDemo) to a new file at path.
func WriteDemoFile(path string, typ gguf.TensorType) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := WriteDemo(f, typ); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// WriteModel writes a llama model of shape c the way WriteDemo writes the
// demo (which is WriteModel of DemoConfig): deterministic seeded random
// weights of type typ and the demo's byte-level tokenizer and chat
// template, so c.Vocab must be the demo's 259. It is for benchmarks and
// tests that need a model of another size or type, such as one too big
// for the CPU caches. typ is F32, F16, Q8_0, Q4_0, Q4_K or Q6_K; the
// norms stay F32, as converters write them. Q4_K writes what llama.cpp's
// Q4_K_M mostly is: Q4_K, with ffn_down and output in Q6_K. The
// quantised types want the width and the feed-forward to be multiples of
// their blocks (32 for Q8_0 and Q4_0, 256 for the K-quants).
func WriteModel(w io.Writer, c Config, typ gguf.TensorType) error {
	kvs, tensors, err := modelParts(c, typ)
	if err != nil {
		return err
	}
	return gguf.Write(w, kvs, tensors)
}

// demoParts is the demo model's metadata and tensors, for tests that
// write altered copies.
func demoParts(typ gguf.TensorType) ([]gguf.KV, []gguf.Tensor, error) {
	return modelParts(DemoConfig, typ)
}

// modelParts is the metadata and tensors of WriteModel's model of shape c.
func modelParts(c Config, typ gguf.TensorType) ([]gguf.KV, []gguf.Tensor, error) {
	wt, ok := wtypes[typ]
	if !ok {
		return nil, nil, fmt.Errorf("model weight type %s: want one of %s", typ, supportedTypes)
	}
	if c.Vocab != DemoConfig.Vocab {
		return nil, nil, fmt.Errorf("model vocabulary %d: the byte-level tokenizer has %d tokens", c.Vocab, DemoConfig.Vocab)
	}
	if c.Layers < 1 || c.HeadDim < 2 || c.HeadDim%2 != 0 || c.Heads < 1 || c.KVHeads < 1 || c.Heads%c.KVHeads != 0 ||
		c.Dim != c.Heads*c.HeadDim || c.FFN < 1 || c.Context < 1 {
		return nil, nil, fmt.Errorf("model shape %+v: want layers, heads a multiple of K/V heads, dim heads × an even head width, a feed-forward and a context", c)
	}
	if el, _ := wt.block(); c.Dim%el != 0 || c.FFN%el != 0 {
		return nil, nil, fmt.Errorf("model shape %+v: %s wants the width and the feed-forward multiples of %d", c, typ, el)
	}
	rng := rand.New(rand.NewPCG(17, 0x6c6c6d))
	var tensors []gguf.Tensor
	add := func(name string, rows, cols int, std, mean float64) {
		x := make([]float32, rows*cols)
		for i := range x {
			x[i] = float32(mean + std*rng.NormFloat64())
		}
		t := gguf.Tensor{Name: name, Dims: []uint64{uint64(cols)}, Type: gguf.F32}
		if rows > 1 {
			t.Dims = append(t.Dims, uint64(rows))
			t.Type = typ // norms stay F32, as converters write them
			if typ == gguf.Q4_K && (name == "output.weight" || strings.HasSuffix(name, "ffn_down.weight")) {
				t.Type = gguf.Q6_K // as Q4_K_M
			}
		}
		t.Data = encodeTensor(x, t.Type)
		tensors = append(tensors, t)
	}
	d, kv := c.Dim, c.KVDim()
	add("token_embd.weight", c.Vocab, d, 1, 0)
	for l := range c.Layers {
		p := fmt.Sprintf("blk.%d.", l)
		add(p+"attn_norm.weight", 1, d, 0.1, 1)
		add(p+"attn_q.weight", d, d, 1.5/math.Sqrt(float64(d)), 0)
		add(p+"attn_k.weight", kv, d, 1.5/math.Sqrt(float64(d)), 0)
		add(p+"attn_v.weight", kv, d, 1/math.Sqrt(float64(d)), 0)
		add(p+"attn_output.weight", d, d, 1/math.Sqrt(float64(d)), 0)
		add(p+"ffn_norm.weight", 1, d, 0.1, 1)
		add(p+"ffn_gate.weight", c.FFN, d, 1/math.Sqrt(float64(d)), 0)
		add(p+"ffn_up.weight", c.FFN, d, 1/math.Sqrt(float64(d)), 0)
		add(p+"ffn_down.weight", d, c.FFN, 1/math.Sqrt(float64(c.FFN)), 0)
	}
	add("output_norm.weight", 1, d, 0.1, 1)
	add("output.weight", c.Vocab, d, 3/math.Sqrt(float64(d)), 0)

	tokens := make([]string, 0, c.Vocab)
	types := make([]int32, 0, c.Vocab)
	for b := range 256 {
		tokens = append(tokens, ByteToken(byte(b)))
		types = append(types, tokNormal)
	}
	for _, s := range []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"} {
		tokens = append(tokens, s)
		types = append(types, tokControl)
	}
	name := "modelplane-demo-llama-" + strings.ToLower(typ.String())
	if c != DemoConfig {
		name = fmt.Sprintf("modelplane-llama-%dx%d-", c.Layers, c.Dim) + name[len("modelplane-demo-llama-"):]
	}
	kvs := []gguf.KV{
		{Key: "general.architecture", Type: gguf.String, Value: "llama"},
		{Key: "general.name", Type: gguf.String, Value: name},
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
		{Key: "tokenizer.ggml.tokens", Type: gguf.Array, Value: tokens},
		{Key: "tokenizer.ggml.token_type", Type: gguf.Array, Value: types},
		{Key: "tokenizer.ggml.merges", Type: gguf.Array, Value: []string{}},
		{Key: "tokenizer.ggml.bos_token_id", Type: gguf.Uint32, Value: uint32(256)},
		{Key: "tokenizer.ggml.eos_token_id", Type: gguf.Uint32, Value: uint32(258)},
		{Key: "tokenizer.ggml.add_bos_token", Type: gguf.Bool, Value: false},
		{Key: "tokenizer.chat_template", Type: gguf.String, Value: ChatMLTemplate},
	}
	return kvs, tensors, nil
}

func encodeTensor(x []float32, t gguf.TensorType) []byte {
	switch t {
	case gguf.F16:
		b := make([]byte, 2*len(x))
		for i, v := range x {
			binary.LittleEndian.PutUint16(b[2*i:], floatToHalf(v))
		}
		return b
	case gguf.Q8_0:
		return quantQ8_0(nil, x)
	case gguf.Q4_0:
		return quantQ4_0(nil, x)
	case gguf.Q4_K:
		return quantQ4_K(nil, x)
	case gguf.Q6_K:
		return quantQ6_K(nil, x)
	}
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}
