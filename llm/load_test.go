package llm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"modelplane/gguf"
)

// writeAltered writes the F32 demo model after alter has changed its parts.
func writeAltered(t *testing.T, alter func(kvs []gguf.KV, ts []gguf.Tensor) ([]gguf.KV, []gguf.Tensor)) string {
	t.Helper()
	kvs, ts, err := demoParts(gguf.F32)
	if err != nil {
		t.Fatal(err)
	}
	kvs, ts = alter(kvs, ts)
	var b bytes.Buffer
	if err := gguf.Write(&b, kvs, ts); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "m.gguf")
	if err := os.WriteFile(p, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func setKV(kvs []gguf.KV, key string, typ gguf.ValueType, v any) []gguf.KV {
	for i := range kvs {
		if kvs[i].Key == key {
			kvs[i] = gguf.KV{Key: key, Type: typ, Value: v}
			return kvs
		}
	}
	return append(kvs, gguf.KV{Key: key, Type: typ, Value: v})
}

func withTensor(ts []gguf.Tensor, name string, f func(*gguf.Tensor)) []gguf.Tensor {
	for i := range ts {
		if ts[i].Name == name {
			f(&ts[i])
		}
	}
	return ts
}

// TestBadModels checks that each file the runtime cannot run is refused by
// Load and MemoryNeed (what validation calls) with the reason.
func TestBadModels(t *testing.T) {
	demo, err := os.ReadFile(demoPath(t, gguf.F32))
	if err != nil {
		t.Fatal(err)
	}
	raw := func(b []byte) func(t *testing.T) string {
		return func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "m.gguf")
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}
	}
	altered := func(f func(kvs []gguf.KV, ts []gguf.Tensor) ([]gguf.KV, []gguf.Tensor)) func(t *testing.T) string {
		return func(t *testing.T) string { return writeAltered(t, f) }
	}
	badMagic := bytes.Clone(demo)
	copy(badMagic, "GGJT")
	for _, tc := range []struct {
		name     string
		file     func(t *testing.T) string
		sentinel error
		want     string
	}{
		{"truncated file", raw(demo[:len(demo)/2]), gguf.ErrInvalid, "past the end of the file"},
		{"truncated header", raw(demo[:100]), gguf.ErrInvalid, "truncated at byte"},
		{"bad magic", raw(badMagic), gguf.ErrInvalid, `bad magic "GGJT"`},
		{"unsupported architecture", altered(func(kvs []gguf.KV, ts []gguf.Tensor) ([]gguf.KV, []gguf.Tensor) {
			return setKV(kvs, "general.architecture", gguf.String, "gpt2"), ts
		}), ErrUnsupported, `architecture "gpt2"`},
		{"unsupported tensor type", altered(func(kvs []gguf.KV, ts []gguf.Tensor) ([]gguf.KV, []gguf.Tensor) {
			return kvs, withTensor(ts, "blk.0.attn_q.weight", func(t *gguf.Tensor) {
				t.Type, t.Data = gguf.Q5_0, make([]byte, 64*64/32*22)
			})
		}), ErrUnsupported, "tensor blk.0.attn_q.weight has type Q5_0 (the built-in runtime runs F32, F16, Q8_0, Q4_0, Q4_K and Q6_K)"},
		{"wrong shape", altered(func(kvs []gguf.KV, ts []gguf.Tensor) ([]gguf.KV, []gguf.Tensor) {
			return kvs, withTensor(ts, "blk.1.ffn_up.weight", func(t *gguf.Tensor) {
				t.Dims = []uint64{64, 96}
				t.Data = t.Data[:64*96*4]
			})
		}), ErrInvalid, "tensor blk.1.ffn_up.weight has shape [64 96], want [64 192]"},
		{"missing tensor", altered(func(kvs []gguf.KV, ts []gguf.Tensor) ([]gguf.KV, []gguf.Tensor) {
			var out []gguf.Tensor
			for _, t := range ts {
				if t.Name != "blk.3.ffn_norm.weight" {
					out = append(out, t)
				}
			}
			return kvs, out
		}), ErrInvalid, "tensor blk.3.ffn_norm.weight is missing"},
		{"heads do not divide", altered(func(kvs []gguf.KV, ts []gguf.Tensor) ([]gguf.KV, []gguf.Tensor) {
			return setKV(kvs, "llama.attention.head_count_kv", gguf.Uint32, uint32(3)), ts
		}), ErrInvalid, "head_count 4 is not a multiple of head_count_kv 3"},
		{"missing hyperparameter", altered(func(kvs []gguf.KV, ts []gguf.Tensor) ([]gguf.KV, []gguf.Tensor) {
			return setKV(kvs, "llama.block_count", gguf.String, "four"), ts
		}), ErrInvalid, "llama.block_count is missing or not an integer"},
		{"unknown tokenizer", altered(func(kvs []gguf.KV, ts []gguf.Tensor) ([]gguf.KV, []gguf.Tensor) {
			return setKV(kvs, "tokenizer.ggml.model", gguf.String, "bert"), ts
		}), ErrUnsupported, `tokenizer model "bert"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.file(t)
			_, err := Load(p)
			if err == nil || !errors.Is(err, tc.sentinel) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Load: %v, want an error wrapping %v containing %q", err, tc.sentinel, tc.want)
			}
			// MemoryNeed reads the header only: it refuses what is wrong there.
			if tc.name == "missing tensor" || tc.name == "wrong shape" || tc.name == "unknown tokenizer" {
				return
			}
			if _, err := MemoryNeed(p, 512); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("MemoryNeed: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestTiedOutput(t *testing.T) {
	p := writeAltered(t, func(kvs []gguf.KV, ts []gguf.Tensor) ([]gguf.KV, []gguf.Tensor) {
		var out []gguf.Tensor
		for _, t := range ts {
			if t.Name != "output.weight" {
				out = append(out, t)
			}
		}
		return kvs, out
	})
	m, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	kv := NewKV(m.Config(), 1, 16)
	lg := m.Forward(kv, []Seq{{Tokens: []int{'h', 'i'}, Pages: []int32{0}}})[0]
	if len(lg) != DemoConfig.Vocab {
		t.Fatalf("%d logits", len(lg))
	}
}

func TestConfigFromFile(t *testing.T) {
	m := demoModel(t, gguf.F16)
	if got := m.Config(); got != DemoConfig {
		t.Errorf("Config = %+v, want %+v", got, DemoConfig)
	}
	if RecogniseTemplate(m.ChatTemplate()) != ChatML {
		t.Errorf("demo template recognised as %q", RecogniseTemplate(m.ChatTemplate()))
	}
}

func TestDemoIsDeterministic(t *testing.T) {
	var a, b bytes.Buffer
	if err := WriteDemo(&a, gguf.F16); err != nil {
		t.Fatal(err)
	}
	if err := WriteDemo(&b, gguf.F16); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("two WriteDemo calls wrote different bytes")
	}
	if a.Len() > 1<<20 {
		t.Errorf("F16 demo is %d bytes", a.Len())
	}
}

// TestWriteModelWritesTheShapeAskedFor holds WriteModel to its config: the
// model it writes loads with that shape and runs, two calls write the same
// bytes, and WriteDemo is WriteModel of DemoConfig.
func TestWriteModelWritesTheShapeAskedFor(t *testing.T) {
	c := Config{Layers: 2, Dim: 96, Heads: 6, KVHeads: 3, HeadDim: 16, FFN: 160,
		Vocab: DemoConfig.Vocab, Context: 512, RopeTheta: 10000, NormEps: 1e-5}
	var a, b, demo, viaModel bytes.Buffer
	if err := WriteModel(&a, c, gguf.F32); err != nil {
		t.Fatal(err)
	}
	if err := WriteModel(&b, c, gguf.F32); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("two WriteModel calls wrote different bytes")
	}
	if err := WriteDemo(&demo, gguf.F16); err != nil {
		t.Fatal(err)
	}
	if err := WriteModel(&viaModel, DemoConfig, gguf.F16); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(demo.Bytes(), viaModel.Bytes()) {
		t.Error("WriteDemo and WriteModel(DemoConfig) wrote different bytes")
	}
	p := filepath.Join(t.TempDir(), "m.gguf")
	if err := os.WriteFile(p, a.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Config(); got != c {
		t.Errorf("Config = %+v, want %+v", got, c)
	}
	kv := NewKV(c, 1, pageTokens)
	logits := m.Forward(kv, []Seq{{Tokens: []int{'h', 'i'}, Pages: []int32{0}}})
	if len(logits) != 1 || len(logits[0]) != c.Vocab {
		t.Fatalf("logits %d rows, want 1 of %d", len(logits), c.Vocab)
	}
	for _, bad := range []Config{
		func() Config { b := c; b.Vocab = 300; return b }(),
		func() Config { b := c; b.Dim = 100; return b }(),
		func() Config { b := c; b.KVHeads = 4; return b }(),
	} {
		if err := WriteModel(io.Discard, bad, gguf.F32); err == nil {
			t.Errorf("WriteModel(%+v) wrote a model, want an error", bad)
		}
	}
}

// TestSecurityMemoryNeedNeverWraps: a tensor whose element count wraps
// 64 bits once made MemoryNeed return −4.3e18 bytes, which passed the
// placement guard; a context too large to hold did the same. Both are
// errors now, and no answer is ever negative (issue 25, finding 6).
func TestSecurityMemoryNeedNeverWraps(t *testing.T) {
	t.Parallel()
	p := writeAltered(t, func(kvs []gguf.KV, ts []gguf.Tensor) ([]gguf.KV, []gguf.Tensor) {
		return kvs, append(ts, gguf.Tensor{Name: "evil", Dims: []uint64{32, 16}, Type: gguf.Q8_0, Data: make([]byte, 16*34)})
	})
	d, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	// Patch the tensor's dims to [15790336, 1099510579201]: Q8_0's size of
	// that many elements wraps to 16 bytes, which the file holds.
	i := bytes.Index(d, []byte("evil\x02\x00\x00\x00"))
	if i < 0 {
		t.Fatal("tensor header not found")
	}
	binary.LittleEndian.PutUint64(d[i+8:], 15790336)
	binary.LittleEndian.PutUint64(d[i+16:], 1099510579201)
	if err := os.WriteFile(p, d, 0o600); err != nil {
		t.Fatal(err)
	}
	if n, err := MemoryNeed(p, 512); err == nil || !errors.Is(err, gguf.ErrInvalid) {
		t.Errorf("MemoryNeed of the wrapping tensor = %d, %v; want an error wrapping gguf.ErrInvalid", n, err)
	}
	good := demoPath(t, gguf.F32)
	for _, ctx := range []int{math.MaxInt, math.MaxInt / 4} {
		if n, err := MemoryNeed(good, ctx); err == nil || n < 0 {
			t.Errorf("MemoryNeed(context %d) = %d, %v; want an error", ctx, n, err)
		}
	}
	if n, err := MemoryNeed(good, -1); err == nil {
		t.Errorf("MemoryNeed(context -1) = %d, want an error", n)
	}
	if n, err := MemoryNeed(good, 512); err != nil || n <= 0 {
		t.Errorf("MemoryNeed(context 512) = %d, %v; want a positive need", n, err)
	}
}
