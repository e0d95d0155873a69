package llm

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"modelplane/gguf"
)

func tokenizerFrom(t *testing.T, kvs []gguf.KV) *Tokenizer {
	t.Helper()
	var b bytes.Buffer
	if err := gguf.Write(&b, kvs, nil); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Read(bytes.NewReader(b.Bytes()), int64(b.Len()))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := NewTokenizer(f)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func ids(t *testing.T, tok *Tokenizer, strs ...string) []int {
	t.Helper()
	var out []int
	for _, s := range strs {
		id, ok := tok.ID(s)
		if !ok {
			t.Fatalf("%q not in the vocabulary", s)
		}
		out = append(out, id)
	}
	return out
}

// TestBPEMerges uses a handmade byte-level vocabulary whose merges build
// "hello" and pieces of " world" in rank order.
func TestBPEMerges(t *testing.T) {
	var tokens []string
	for b := range 256 {
		tokens = append(tokens, ByteToken(byte(b)))
	}
	tokens = append(tokens, "he", "ll", "hell", "hello", "Ġw", "or", "<|end|>")
	types := make([]int32, len(tokens))
	for i := range types {
		types[i] = tokNormal
	}
	types[len(types)-1] = tokControl
	tok := tokenizerFrom(t, []gguf.KV{
		{Key: "tokenizer.ggml.model", Type: gguf.String, Value: "gpt2"},
		{Key: "tokenizer.ggml.tokens", Type: gguf.Array, Value: tokens},
		{Key: "tokenizer.ggml.token_type", Type: gguf.Array, Value: types},
		{Key: "tokenizer.ggml.merges", Type: gguf.Array, Value: []string{"h e", "l l", "he ll", "hell o", "Ġ w", "o r"}},
		{Key: "tokenizer.ggml.eos_token_id", Type: gguf.Uint32, Value: uint32(len(tokens) - 1)},
	})
	got := tok.Encode("hello world<|end|>", true)
	want := append(ids(t, tok, "hello", "Ġw", "or"), 'l', 'd', tok.EOS)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Encode = %v, want %v", got, want)
	}
	if s := tok.Decode(got); s != "hello world" {
		t.Errorf("Decode = %q, want %q (the control token leaves no text)", s, "hello world")
	}
	// Without special, the marker is plain text.
	if got := tok.Encode("<|end|>", false); len(got) != len("<|end|>") {
		t.Errorf("Encode without special = %v, want one token a byte", got)
	}
}

func TestPretokenize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"Hello world", []string{"Hello", " world"}},
		{"it's 42 items!!", []string{"it", "'s", " 42", " items", "!!"}},
		{"a  b", []string{"a", " ", " b"}},
		{"end  ", []string{"end", "  "}},
		{"x\n\ny", []string{"x", "\n", "\n", "y"}}, // only a space prefixes a word
	} {
		if got := pretokenize(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("pretokenize(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestSentencePiece uses a handmade vocabulary with scores: the merge with
// the highest score goes first, unknown characters fall back to bytes.
func TestSentencePiece(t *testing.T) {
	tokens := []string{"<unk>", "<s>", "</s>"}
	types := []int32{tokUnknown, tokControl, tokControl}
	scores := []float32{0, 0, 0}
	for b := range 256 {
		tokens = append(tokens, fmt.Sprintf("<0x%02X>", b))
		types = append(types, tokByte)
		scores = append(scores, 0)
	}
	for i, s := range []string{"▁hello", "llo", "▁he", "ll", "▁h", "he", "▁w", "or", "ld"} {
		tokens = append(tokens, s)
		types = append(types, tokNormal)
		scores = append(scores, float32(-1-i))
	}
	for _, s := range []string{"▁", "h", "e", "l", "o", "w", "r", "d"} {
		tokens = append(tokens, s)
		types = append(types, tokNormal)
		scores = append(scores, -20)
	}
	tok := tokenizerFrom(t, []gguf.KV{
		{Key: "tokenizer.ggml.model", Type: gguf.String, Value: "llama"},
		{Key: "tokenizer.ggml.tokens", Type: gguf.Array, Value: tokens},
		{Key: "tokenizer.ggml.scores", Type: gguf.Array, Value: scores},
		{Key: "tokenizer.ggml.token_type", Type: gguf.Array, Value: types},
		{Key: "tokenizer.ggml.bos_token_id", Type: gguf.Uint32, Value: uint32(1)},
		{Key: "tokenizer.ggml.eos_token_id", Type: gguf.Uint32, Value: uint32(2)},
	})
	got := tok.Encode("hello world é\xff", true)
	want := append([]int{1}, ids(t, tok, "▁hello", "▁w", "or", "ld", "▁", "<0xC3>", "<0xA9>", "<0xFF>")...)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Encode = %v, want %v", got, want)
	}
	if s := tok.Decode(got); s != "hello world é\xff" {
		t.Errorf("Decode = %q", s)
	}
	if !tok.AddsBOS() {
		t.Error("SentencePiece should add BOS by default")
	}
}

// TestRoundTrip encodes and decodes arbitrary text with the demo
// tokenizer, and streams it token by token through UTF8Buffer: every
// chunk is valid UTF-8 and they join to the text.
func TestRoundTrip(t *testing.T) {
	tok := demoModel(t, gguf.F32).Tokenizer()
	for _, s := range []string{"", "plain ascii", "naïve café — 東京 🚀", "tabs\tand\nnewlines  ", "<|im_start|>user\nhi<|im_end|>"} {
		ids := tok.Encode(s, false)
		if got := tok.Decode(ids); got != s {
			t.Errorf("Decode(Encode(%q)) = %q", s, got)
		}
		var u UTF8Buffer
		var b strings.Builder
		for i, id := range ids {
			chunk := u.Write(tok.TokenBytes(id, i == 0))
			if !utf8.ValidString(chunk) {
				t.Errorf("%q: chunk %q is not valid UTF-8", s, chunk)
			}
			b.WriteString(chunk)
		}
		b.WriteString(u.Flush())
		if b.String() != s {
			t.Errorf("streamed %q, want %q", b.String(), s)
		}
	}
	chat := tok.Encode("<|im_start|>user\nhi<|im_end|>", true)
	if chat[0] != 257 || chat[len(chat)-1] != 258 || len(chat) != 2+len("user\nhi") {
		t.Errorf("Encode with specials = %v", chat)
	}
	if tok.Decode(chat) != "user\nhi" {
		t.Errorf("Decode with control tokens = %q", tok.Decode(chat))
	}
}

func TestUTF8BufferFlushesInvalid(t *testing.T) {
	var u UTF8Buffer
	if got := u.Write([]byte{'a', 0xe6}); got != "a" {
		t.Errorf("Write = %q, want the complete part", got)
	}
	if got := u.Flush(); got != "\uFFFD" {
		t.Errorf("Flush = %q, want U+FFFD for a lone lead byte", got)
	}
}

func TestTemplates(t *testing.T) {
	msgs := []Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi"}}
	for _, tc := range []struct {
		name, jinja string
		want        Template
		rendered    string
	}{
		{"chatml", "{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n'}}{% endfor %}", ChatML,
			"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
		{"llama3", "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}", Llama3,
			"<s><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
		{"llama2", "{{ bos_token + '[INST] ' + content + ' [/INST]' }}", Llama2,
			"<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST]"},
		{"zephyr", "{{ '<|user|>\\n' + message['content'] + eos_token }}", Zephyr,
			"<|system|>\nBe brief.</s>\n<|user|>\nHi</s>\n<|assistant|>\n"},
		{"unknown falls back to chatml", "{{ messages }}", Unknown,
			"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := RecogniseTemplate(tc.jinja)
			if got != tc.want {
				t.Fatalf("RecogniseTemplate = %q, want %q", got, tc.want)
			}
			if r := RenderChat(got, msgs, "<s>", "</s>"); r != tc.rendered {
				t.Errorf("RenderChat =\n%q\nwant\n%q", r, tc.rendered)
			}
		})
	}
	p, stops := demoModel(t, gguf.F32).Chat(msgs)
	if !strings.HasSuffix(p, "<|im_start|>assistant\n") || !reflect.DeepEqual(stops, []string{"<|im_end|>"}) {
		t.Errorf("demo Chat = %q, %q", p, stops)
	}
}

func TestSamplerSeeded(t *testing.T) {
	lg := demoModel(t, gguf.F32).Forward(NewKV(DemoConfig, 1, 16), []Seq{{Tokens: []int{'a'}, Pages: []int32{0}}})[0]
	draw := func(seed uint64) []int {
		s := NewSampler(0.8, 0.9, seed)
		var out []int
		for range 20 {
			out = append(out, s.Sample(lg))
		}
		return out
	}
	if !reflect.DeepEqual(draw(1), draw(1)) {
		t.Error("same seed gave different tokens")
	}
	if reflect.DeepEqual(draw(1), draw(2)) {
		t.Error("seeds 1 and 2 gave the same 20 tokens")
	}
	if got := NewSampler(0, 1, 1).Sample(lg); got != Argmax(lg) {
		t.Errorf("temperature 0 sampled %d, want argmax %d", got, Argmax(lg))
	}
	s := NewSampler(1, 1e-9, 3)
	for range 5 {
		if got := s.Sample(lg); got != Argmax(lg) {
			t.Errorf("tiny top_p sampled %d, want argmax %d", got, Argmax(lg))
		}
	}
}

// FuzzEncode checks that the demo tokenizer round-trips any valid UTF-8
// text and never panics on invalid bytes.
func FuzzEncode(f *testing.F) {
	for _, s := range []string{"hello", "<|im_start|>user\nhi<|im_end|>", "東京 🚀", "\xff\xfe"} {
		f.Add(s)
	}
	tok := demoModel(f, gguf.F32).Tokenizer()
	f.Fuzz(func(t *testing.T, s string) {
		ids := tok.Encode(s, true)
		for _, id := range ids {
			if id < 0 || id >= tok.Len() {
				t.Fatalf("Encode(%q) gave id %d", s, id)
			}
		}
		if plain := tok.Encode(s, false); tok.Decode(plain) != s {
			t.Fatalf("Decode(Encode(%q)) = %q", s, tok.Decode(plain))
		}
	})
}
