package llm

import (
	"os"
	"path/filepath"
	"testing"

	"modelplane/gguf"
)

func writeDemo(t testing.TB, typ gguf.TensorType) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "demo-"+typ.String()+".gguf")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteDemo(f, typ); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDemoRuns(t *testing.T) {
	p := writeDemo(t, gguf.F32)
	m, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(p)
	toks := m.Tokenizer().Encode("hello world", true)
	kv := NewKV(m.Config(), 4, 16)
	out := m.Forward(kv, []Seq{{Tokens: toks, Pos: 0, Pages: []int32{0}}})
	t.Logf("size %d tokens %v logits[:5] %v argmax %d", st.Size(), toks, out[0][:5], Argmax(out[0]))
}
