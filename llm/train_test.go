package llm

import (
	"bytes"
	"math"
	"runtime"
	"strings"
	"testing"

	"modelplane/gguf"
)

// trainText is a small corpus with a held-out part.
var trainText = strings.Repeat(`The gateway routes each request to a replica of the endpoint.

The replica answers the request and the gateway counts its tokens.

`+"```"+`
code is dropped
`+"```"+`

| tables | are dropped |

A replica of the endpoint streams its tokens to the gateway.

`, 8)

var trainSmall = TrainSettings{Merges: 64, Rank: 31, HeldOut: 4, Context: 128, Refine: 20}

// TestBigramForwardPassIsTheBigram: the model WriteBigram writes computes,
// through the ordinary forward pass, the factored bigram's logits at any
// position (the layer adds nothing), and its perplexity is the
// factors' on held-out text and far below the uniform baseline.
func TestBigramForwardPassIsTheBigram(t *testing.T) {
	t.Parallel()
	b, rep, held, err := TrainBigram([]string{trainText}, trainSmall)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteBigram(&buf, b, gguf.F32); err != nil {
		t.Fatal(err)
	}
	m, err := LoadBytes(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if c := m.Config(); c.Vocab != rep.Vocab || c.Layers != 1 || c.Dim != 32 || c.Context != 128 {
		t.Fatalf("config %+v; want vocab %d, 1 layer, width 32, 128 positions", c, rep.Vocab)
	}
	seq := m.Tokenizer().Encode("The gateway routes each request to a replica", false)
	kv := NewKV(m.Config(), 4, 16)
	pages := []int32{0, 1, 2, 3}
	for i, x := range seq {
		got := m.Forward(kv, []Seq{{Tokens: []int{x}, Pos: i, Pages: pages}})[0]
		for y := range got {
			want := float64(dot32(b.In[x], b.Out[y]))
			if math.Abs(float64(got[y])-want) > 1e-3*max(1, math.Abs(want)) {
				t.Fatalf("position %d, token %d → %d: logit %g; want In·Out = %g", i, x, y, got[y], want)
			}
		}
	}
	ppl := ModelPerplexity(m, held)
	if ppl > rep.UniformHeldOut/4 || ppl < 1 || rep.HeldOutTokens == 0 {
		t.Errorf("held-out perplexity %.2f over %d tokens; want well under the uniform %v", ppl, rep.HeldOutTokens, rep.UniformHeldOut)
	}
	if out := m.Tokenizer().Decode(seq); out != "The gateway routes each request to a replica" {
		t.Errorf("round trip %q", out)
	}
	t.Logf("vocab %d, held-out perplexity %.2f (smoothed bigram %.2f, uniform %v)", rep.Vocab, ppl, rep.BigramHeldOut, rep.UniformHeldOut)
}

// TestTrainBigramIsDeterministic: the same text gives the same file, on
// one core or four. (Not parallel: it sets GOMAXPROCS, which parallel
// tests, run after it, do not see.)
func TestTrainBigramIsDeterministic(t *testing.T) {
	var files [2]bytes.Buffer
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for i := range files {
		runtime.GOMAXPROCS(1 + 3*i)
		b, _, _, err := TrainBigram([]string{trainText}, trainSmall)
		if err != nil {
			t.Fatal(err)
		}
		if err := WriteBigram(&files[i], b, gguf.F16); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(files[0].Bytes(), files[1].Bytes()) {
		t.Error("two trainings on the same text wrote different files")
	}
}

// TestParagraphsKeepProse: headings, code, tables and indented blocks go; a
// paragraph's lines join into one, without Markdown emphasis.
func TestParagraphsKeepProse(t *testing.T) {
	t.Parallel()
	got := paragraphs("# Title\n\nSome **bold**\n`code` words.\n\n    indented\n\n| a | b |\n\n```\nfenced\n```\nAfter.\n")
	want := []string{"Some bold code words.", "After."}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("paragraphs = %q; want %q", got, want)
	}
}

func dot32(a, b []float32) float32 {
	var s float32
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}
