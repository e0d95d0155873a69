package llm

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sync/atomic"

	"modelplane/gguf"
)

// ErrUnsupported is wrapped by the errors about a well-formed file this
// package cannot run (another architecture, a tensor type it does not
// decode). Malformed files wrap gguf.ErrInvalid or ErrInvalid.
var ErrUnsupported = errors.New("unsupported model")

// ErrInvalid is wrapped by errors about a llama model whose metadata or
// tensor shapes are inconsistent.
var ErrInvalid = errors.New("invalid model")

// Config is a model's hyperparameters as the file states them.
type Config struct {
	Layers    int // llama.block_count
	Dim       int // llama.embedding_length
	Heads     int // llama.attention.head_count
	KVHeads   int // llama.attention.head_count_kv (Heads when absent)
	HeadDim   int // Dim / Heads
	FFN       int // llama.feed_forward_length
	Vocab     int // rows of token_embd
	Context   int // llama.context_length
	RopeTheta float64
	NormEps   float32
}

// KVDim is the width of one position's K (or V) in one layer.
func (c Config) KVDim() int { return c.KVHeads * c.HeadDim }

type layer struct {
	attnNorm, ffnNorm []float32
	wq, wk, wv, wo    *matrix // [out][in], in the file's type
	gate, up, down    *matrix
}

// Model is a loaded llama model. Its methods are safe for concurrent use;
// Forward calls on disjoint pages may run in parallel.
type Model struct {
	cfg      Config
	tok      *Tokenizer
	embd     *matrix // [vocab][dim]
	layers   []layer
	outNorm  []float32
	output   *matrix // [vocab][dim]; embd when tied
	template string
	threads  atomic.Int32
	computed atomic.Int64
	calls    atomic.Int64
}

// SetThreads sets how many goroutines a Forward call splits its matrix
// products and attention among: the cores the replica was given. It is 1
// after Load; n < 1 means 1. The logits do not depend on it.
func (m *Model) SetThreads(n int) { m.threads.Store(int32(max(1, n))) }

// Threads is what SetThreads set.
func (m *Model) Threads() int { return int(m.threads.Load()) }

// WeightBytes is the memory the weights hold: the quantised types as
// their blocks, F32 and F16 at 4 and 2 bytes an element.
func (m *Model) WeightBytes() int64 {
	n := m.embd.bytes() + 4*int64(len(m.outNorm))
	if m.output != m.embd {
		n += m.output.bytes()
	}
	for _, l := range m.layers {
		n += 4 * int64(len(l.attnNorm)+len(l.ffnNorm))
		for _, w := range []*matrix{l.wq, l.wk, l.wv, l.wo, l.gate, l.up, l.down} {
			n += w.bytes()
		}
	}
	return n
}

// Config returns the model's hyperparameters.
func (m *Model) Config() Config { return m.cfg }

// Tokenizer returns the tokenizer the file carries.
func (m *Model) Tokenizer() *Tokenizer { return m.tok }

// ChatTemplate returns tokenizer.chat_template as the file states it ("" when absent).
func (m *Model) ChatTemplate() string { return m.template }

// Stats are counters of the work Forward did since Load.
type Stats struct {
	Computed int64 // token positions run through the layers (prefill and decode)
	Forwards int64 // Forward calls
}

// Stats returns the counters; the engine diffs them around a call to count
// the prefill a request really computed.
func (m *Model) Stats() Stats {
	return Stats{Computed: m.computed.Load(), Forwards: m.calls.Load()}
}

// Load reads a llama-architecture GGUF model and its tokenizer.
func Load(path string) (*Model, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return FromFile(f)
}

// FromFile builds a model from an opened GGUF file, reading its tensors.
func FromFile(f *gguf.File) (*Model, error) {
	cfg, err := ReadConfig(f)
	if err != nil {
		return nil, err
	}
	tok, err := NewTokenizer(f)
	if err != nil {
		return nil, err
	}
	if tok.Len() != cfg.Vocab {
		return nil, fmt.Errorf("%w: tokenizer has %d tokens but token_embd has %d rows", ErrInvalid, tok.Len(), cfg.Vocab)
	}
	m := &Model{cfg: cfg, tok: tok}
	m.threads.Store(1)
	m.template, _ = f.String("tokenizer.chat_template")
	d, kv := cfg.Dim, cfg.KVDim()
	if m.outNorm, err = loadVector(f, "output_norm.weight", d); err != nil {
		return nil, err
	}
	// Every matrix is checked before any is read, and all of them are
	// read into one arena sized by what was checked.
	type load struct {
		dst        **matrix
		name       string
		cols, rows int
		info       gguf.TensorInfo
	}
	loads := []load{{dst: &m.embd, name: "token_embd.weight", cols: d, rows: cfg.Vocab}}
	if _, ok := f.Tensor("output.weight"); ok {
		loads = append(loads, load{dst: &m.output, name: "output.weight", cols: d, rows: cfg.Vocab})
	}
	m.layers = make([]layer, cfg.Layers)
	for i := range m.layers {
		l := &m.layers[i]
		p := fmt.Sprintf("blk.%d.", i)
		if l.attnNorm, err = loadVector(f, p+"attn_norm.weight", d); err != nil {
			return nil, err
		}
		if l.ffnNorm, err = loadVector(f, p+"ffn_norm.weight", d); err != nil {
			return nil, err
		}
		loads = append(loads,
			load{dst: &l.wq, name: p + "attn_q.weight", cols: d, rows: d},
			load{dst: &l.wk, name: p + "attn_k.weight", cols: d, rows: kv},
			load{dst: &l.wv, name: p + "attn_v.weight", cols: d, rows: kv},
			load{dst: &l.wo, name: p + "attn_output.weight", cols: d, rows: d},
			load{dst: &l.gate, name: p + "ffn_gate.weight", cols: d, rows: cfg.FFN},
			load{dst: &l.up, name: p + "ffn_up.weight", cols: d, rows: cfg.FFN},
			load{dst: &l.down, name: p + "ffn_down.weight", cols: cfg.FFN, rows: d})
	}
	var total uint64
	for i := range loads {
		t := &loads[i]
		if t.info, err = tensorInfo(f, t.name, t.cols, t.rows); err != nil {
			return nil, err
		}
		total += matrixBytes(t.info.Size)
	}
	ar := newArena(int(total))
	for _, t := range loads {
		if *t.dst, err = loadMatrix(f, ar, t.info, t.cols, t.rows); err != nil {
			return nil, err
		}
	}
	if m.output == nil {
		m.output = m.embd
	}
	return m, nil
}

// ReadConfig reads and checks the llama hyperparameters of a file without
// reading any tensor data.
func ReadConfig(f *gguf.File) (Config, error) {
	arch, ok := f.String("general.architecture")
	if !ok {
		return Config{}, fmt.Errorf("%w: general.architecture is missing", ErrInvalid)
	}
	if arch != "llama" {
		return Config{}, fmt.Errorf("%w: architecture %q (only llama runs on the built-in runtime)", ErrUnsupported, arch)
	}
	var c Config
	req := func(key string, dst *int) error {
		v, ok := f.Uint("llama." + key)
		if !ok {
			return fmt.Errorf("%w: llama.%s is missing or not an integer", ErrInvalid, key)
		}
		if v == 0 || v > 1<<24 {
			return fmt.Errorf("%w: llama.%s is %d", ErrInvalid, key, v)
		}
		*dst = int(v)
		return nil
	}
	for _, k := range []struct {
		key string
		dst *int
	}{
		{"block_count", &c.Layers}, {"embedding_length", &c.Dim}, {"feed_forward_length", &c.FFN},
		{"attention.head_count", &c.Heads}, {"context_length", &c.Context},
	} {
		if err := req(k.key, k.dst); err != nil {
			return Config{}, err
		}
	}
	c.KVHeads = c.Heads
	if _, ok := f.Get("llama.attention.head_count_kv"); ok {
		if err := req("attention.head_count_kv", &c.KVHeads); err != nil {
			return Config{}, err
		}
	}
	if c.Dim%c.Heads != 0 {
		return Config{}, fmt.Errorf("%w: embedding_length %d is not a multiple of head_count %d", ErrInvalid, c.Dim, c.Heads)
	}
	if c.Heads%c.KVHeads != 0 {
		return Config{}, fmt.Errorf("%w: head_count %d is not a multiple of head_count_kv %d", ErrInvalid, c.Heads, c.KVHeads)
	}
	c.HeadDim = c.Dim / c.Heads
	if c.HeadDim%2 != 0 {
		return Config{}, fmt.Errorf("%w: head dimension %d is odd (rotary embedding needs pairs)", ErrInvalid, c.HeadDim)
	}
	if r, ok := f.Uint("llama.rope.dimension_count"); ok && int(r) != c.HeadDim {
		return Config{}, fmt.Errorf("%w: llama.rope.dimension_count %d (partial rotary embedding is not supported; head dimension is %d)", ErrUnsupported, r, c.HeadDim)
	}
	c.RopeTheta = 10000
	if v, ok := f.Float("llama.rope.freq_base"); ok {
		c.RopeTheta = v
	}
	c.NormEps = 1e-5
	if v, ok := f.Float("llama.attention.layer_norm_rms_epsilon"); ok {
		c.NormEps = float32(v)
	}
	if _, ok := f.Get("llama.rope.scaling.type"); ok {
		if s, _ := f.String("llama.rope.scaling.type"); s != "" && s != "none" {
			return Config{}, fmt.Errorf("%w: llama.rope.scaling.type %q", ErrUnsupported, s)
		}
	}
	if _, ok := f.Get("llama.expert_count"); ok {
		if n, _ := f.Uint("llama.expert_count"); n > 0 {
			return Config{}, fmt.Errorf("%w: mixture of experts (llama.expert_count %d)", ErrUnsupported, n)
		}
	}
	t, ok := f.Tensor("token_embd.weight")
	if !ok {
		return Config{}, fmt.Errorf("%w: tensor token_embd.weight is missing", ErrInvalid)
	}
	if len(t.Dims) != 2 || int(t.Dims[0]) != c.Dim {
		return Config{}, fmt.Errorf("%w: token_embd.weight has shape %v, want [%d vocab]", ErrInvalid, t.Dims, c.Dim)
	}
	c.Vocab = int(t.Dims[1])
	return c, nil
}

// supported reports whether the forward pass runs weights of type t.
func supported(t gguf.TensorType) bool { _, ok := wtypes[t]; return ok }

// tensorInfo checks a tensor's shape and type.
func tensorInfo(f *gguf.File, name string, dims ...int) (gguf.TensorInfo, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return t, fmt.Errorf("%w: tensor %s is missing", ErrInvalid, name)
	}
	if err := checkShape(t, dims); err != nil {
		return t, err
	}
	if !supported(t.Type) {
		return t, fmt.Errorf("%w: tensor %s has type %s (the built-in runtime runs %s)", ErrUnsupported, name, t.Type, supportedTypes)
	}
	return t, nil
}

// tensorBytes checks a tensor's shape and type and returns its bytes.
func tensorBytes(f *gguf.File, name string, dims ...int) (gguf.TensorInfo, []byte, error) {
	t, err := tensorInfo(f, name, dims...)
	if err != nil {
		return t, nil, err
	}
	b, err := f.TensorBytes(t)
	return t, b, err
}

// loadMatrix reads the weight matrix t, checked by tensorInfo, of rows ×
// cols into ar, keeping it in its file's type.
func loadMatrix(f *gguf.File, ar *arena, t gguf.TensorInfo, cols, rows int) (*matrix, error) {
	b, err := f.TensorBytes(t)
	if err != nil {
		return nil, err
	}
	m, err := newMatrix(ar, t.Type, rows, cols, b)
	if err != nil {
		return nil, fmt.Errorf("%w: tensor %s: %v", ErrInvalid, t.Name, err)
	}
	return m, nil
}

// loadVector reads a one-dimensional tensor (a norm's weights) as float32.
func loadVector(f *gguf.File, name string, n int) ([]float32, error) {
	t, b, err := tensorBytes(f, name, n)
	if err != nil {
		return nil, err
	}
	w, ok := wtypes[t.Type]
	if el, _ := w.block(); !ok || n%el != 0 {
		return nil, fmt.Errorf("%w: tensor %s of %d elements in %s", ErrInvalid, name, n, t.Type)
	}
	out := make([]float32, n)
	dequantRow(out, w, b)
	return out, nil
}

func checkShape(t gguf.TensorInfo, dims []int) error {
	ok := len(t.Dims) == len(dims)
	for i := 0; ok && i < len(dims); i++ {
		ok = int(t.Dims[i]) == dims[i]
	}
	if !ok {
		return fmt.Errorf("%w: tensor %s has shape %v, want %v", ErrInvalid, t.Name, t.Dims, dims)
	}
	return nil
}

// MemoryNeed is the bytes the built-in runtime needs to run the model at
// path with K/V for contextTokens positions, computed from the header
// alone: every weight in its file's type (the bytes of its tensor: F32
// 4 bytes an element, F16 2, the quantised types their blocks) plus K and
// V in float32 for every layer:
//
//	weights = Σ bytes(tensor)
//	kv      = 2 × layers × contextTokens × head_count_kv × head_dim × 4
//
// It checks the file as Load would (architecture, shapes and tensor
// types), so a file it accepts is one Load can run. The arithmetic is
// checked: a need that does not fit in an int64 is an error wrapping
// ErrInvalid, so the result is never negative and never wrapped (a wrapped
// need once passed the placement guard as −4.3e18 bytes).
func MemoryNeed(path string, contextTokens int) (int64, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	c, err := ReadConfig(f)
	if err != nil {
		return 0, err
	}
	tooLarge := fmt.Errorf("%w: the memory it needs does not fit in 64 bits", ErrInvalid)
	var weights uint64
	for _, t := range f.Tensors {
		if !supported(t.Type) {
			return 0, fmt.Errorf("%w: tensor %s has type %s (the built-in runtime runs %s)", ErrUnsupported, t.Name, t.Type, supportedTypes)
		}
		n, err := t.Elements()
		if err != nil {
			return 0, err
		}
		b, err := t.Type.RowBytes(n) // checked: an overflow is an error
		if err != nil {
			return 0, fmt.Errorf("tensor %s: %w", t.Name, err)
		}
		var ok bool
		if weights, ok = addMax(weights, b); !ok {
			return 0, tooLarge
		}
	}
	if contextTokens < 0 {
		return 0, fmt.Errorf("%w: %d context tokens", ErrInvalid, contextTokens)
	}
	kv, ok := mulAll(2, uint64(c.Layers), uint64(contextTokens), uint64(c.KVHeads), uint64(c.HeadDim), 4)
	if !ok {
		return 0, tooLarge
	}
	total, ok := addMax(weights, kv)
	if !ok {
		return 0, tooLarge
	}
	return int64(total), nil
}

// mulAll is the product of xs, and false when it passes math.MaxInt64.
func mulAll(xs ...uint64) (uint64, bool) {
	p := uint64(1)
	for _, x := range xs {
		hi, lo := bits.Mul64(p, x)
		if hi != 0 || lo > math.MaxInt64 {
			return 0, false
		}
		p = lo
	}
	return p, true
}

// addMax is a+b, and false when it passes math.MaxInt64.
func addMax(a, b uint64) (uint64, bool) {
	s, c := bits.Add64(a, b, 0)
	if c != 0 || s > math.MaxInt64 {
		return 0, false
	}
	return s, true
}

// KVBytes is the size of K and V for n positions, unchecked: MemoryNeed,
// which validation runs before a version may serve, checks the same
// product for the context it serves with.
func KVBytes(c Config, n int) int64 {
	return 2 * int64(c.Layers) * int64(n) * int64(c.KVDim()) * 4
}
