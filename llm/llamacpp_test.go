package llm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"modelplane/gguf"
	"modelplane/llm/llamacpp"
)

var peer = sync.OnceValues(func() (*llamacpp.Peer, error) {
	return llamacpp.Open(context.Background(), llamacpp.DefaultDir())
})

// llamaCpp returns the peer, or skips the test with the reason it is
// unavailable (no node, npm or registry).
func llamaCpp(t *testing.T) *llamacpp.Peer {
	t.Helper()
	p, err := peer()
	if errors.Is(err, llamacpp.ErrUnavailable) {
		t.Skipf("skipping the comparison with llama.cpp: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// kQuantConfig is a small model whose width and feed-forward are whole
// K-quant super-blocks (256), which the demo's 64 are not.
var kQuantConfig = Config{Layers: 2, Dim: 256, Heads: 4, KVHeads: 2, HeadDim: 64, FFN: 512,
	Vocab: DemoConfig.Vocab, Context: 1024, RopeTheta: 10000, NormEps: 1e-5}

// modelFile writes WriteModel's model of shape c and type typ into a
// test's directory.
func modelFile(t *testing.T, c Config, typ gguf.TensorType) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), fmt.Sprintf("m-%s.gguf", typ))
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteModel(f, c, typ); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestGreedyMatchesLlamaCpp: from the same token ids, the greedy tokens
// of the demo model in F32 and F16, and of the K-quant-shaped model in
// F16, are llama.cpp's, token for token.
func TestGreedyMatchesLlamaCpp(t *testing.T) {
	p := llamaCpp(t)
	for _, tc := range []struct {
		name string
		path func(t *testing.T) string
	}{
		{"demo F32", func(t *testing.T) string { return demoPath(t, gguf.F32) }},
		{"demo F16", func(t *testing.T) string { return demoPath(t, gguf.F16) }},
		{"256-wide F16", func(t *testing.T) string { return modelFile(t, kQuantConfig, gguf.F16) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path(t)
			m, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			prompt, _ := m.Chat([]Message{{Role: "system", Content: "You are terse."}, {Role: "user", Content: "Name a colour."}})
			ids := m.Tokenizer().Encode(prompt, true)
			const steps = 32
			_, got := generate(m, ids, steps)
			want, err := p.Greedy(context.Background(), path, ids, steps)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Errorf("greedy tokens\n got %v\nwant %v (llama.cpp)", got, want)
			}
		})
	}
}

// fixedText is the text the quantised models are read along.
const fixedText = "The built-in runtime runs llama-architecture GGUF models on the CPU. " +
	"Weights stay in their file's type, and activations are quantised for them the way llama.cpp does, " +
	"so the same file gives the same next token in both engines almost everywhere."

// TestQuantisedTop1MatchesLlamaCpp reads fixedText through each quantised
// model, one token at a time: the token our logits rank first after each
// position is llama.cpp's at ≥ 95% of positions.
func TestQuantisedTop1MatchesLlamaCpp(t *testing.T) {
	p := llamaCpp(t)
	for _, tc := range []struct {
		typ gguf.TensorType
		c   Config
	}{
		{gguf.Q8_0, DemoConfig}, {gguf.Q4_0, DemoConfig},
		{gguf.Q8_0, kQuantConfig}, {gguf.Q4_0, kQuantConfig}, {gguf.Q4_K, kQuantConfig}, {gguf.Q6_K, kQuantConfig},
	} {
		t.Run(fmt.Sprintf("%s/%d-wide", tc.typ, tc.c.Dim), func(t *testing.T) {
			path := modelFile(t, tc.c, tc.typ)
			m, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			ids := m.Tokenizer().Encode(fixedText, true)
			kv := NewKV(m.Config(), len(ids)/pageTokens+1, pageTokens)
			pages := pagesFor(0, len(ids))
			got := make([]int, len(ids))
			for i, id := range ids {
				got[i] = Argmax(m.Forward(kv, []Seq{{Tokens: []int{id}, Pos: i, Pages: pages}})[0])
			}
			want, err := p.Top1(context.Background(), path, ids)
			if err != nil {
				t.Fatal(err)
			}
			if len(want) != len(got) {
				t.Fatalf("llama.cpp gave %d positions, want %d", len(want), len(got))
			}
			same := 0
			for i := range got {
				if got[i] == want[i] {
					same++
				}
			}
			share := float64(same) / float64(len(got))
			t.Logf("%d of %d positions agree (%.1f%%)", same, len(got), 100*share)
			if share < 0.95 {
				t.Errorf("top-1 agrees with llama.cpp at %d of %d positions (%.1f%%), want ≥ 95%%", same, len(got), 100*share)
			}
		})
	}
}
