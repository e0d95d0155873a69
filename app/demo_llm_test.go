package app

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"modelplane/llm"
	"modelplane/runtime/llmserve"
)

// TestDemoLLMVersion checks the demo's GGUF version without a stack: the
// file is the bigram trained on docs/*.md (llm's TestTrainBigramIsDeterministic
// holds training to the same bytes), it is a llama model of the demo's
// context, its held-out perplexity through the forward pass is far below
// the uniform baseline, and the memory it needs, computed from the file as
// validation computes it, fits the version's request, which fits a dev CPU
// node.
func TestDemoLLMVersion(t *testing.T) {
	models, err := demoModels()
	if err != nil {
		t.Fatal(err)
	}
	var found *demoVersion
	for _, m := range models {
		if m.endpoint.Name == DemoLLMEndpoint && m.spec.Name == "chat-assistant" && m.endpoint.Version == DemoLLMVersion {
			found = &m.versions[0]
		}
	}
	if found == nil || found.spec.Name != DemoLLMVersion || found.spec.Runtime != "builtin-llm" || found.spec.Resources.GPUCount != 0 {
		t.Fatalf("demo models lack %s of chat-assistant on builtin-llm CPU: %+v", DemoLLMVersion, found)
	}
	trained, err := demoLLM()
	if err != nil {
		t.Fatal(err)
	}
	file := found.files["model.gguf"]
	if !bytes.Equal(file, trained.file) {
		t.Fatalf("model.gguf is %d bytes, not the trained model's %d", len(file), len(trained.file))
	}
	rep, held := trained.report, trained.heldOut
	m, err := llm.LoadBytes(file)
	if err != nil {
		t.Fatal(err)
	}
	ppl := llm.ModelPerplexity(m, held)
	t.Logf("demo LLM: %d bytes, vocabulary %d, %d parameters; held-out perplexity %.2f over %d tokens (uniform %v, smoothed bigram %.2f)",
		len(file), rep.Vocab, rep.Params, ppl, rep.HeldOutTokens, rep.UniformHeldOut, rep.BigramHeldOut)
	if ppl > rep.UniformHeldOut/8 {
		t.Errorf("held-out perplexity %.2f; want under an eighth of the uniform %v", ppl, rep.UniformHeldOut)
	}
	if m.Config().Context != llm.DemoTraining.Context {
		t.Errorf("context %d; want %d", m.Config().Context, llm.DemoTraining.Context)
	}
	path := filepath.Join(t.TempDir(), "model.gguf")
	if err := os.WriteFile(path, file, 0o644); err != nil {
		t.Fatal(err)
	}
	need, err := llm.MemoryNeed(path, llmserve.DefaultPages(m.Config().Context)*llmserve.PageTokens)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("demo LLM: needs %.1f MiB to run", float64(need)/(1<<20))
	if mb := int64(found.spec.Resources.MemoryMB); need > mb<<20 || mb > 1024 {
		t.Errorf("need %d bytes, request %d MiB; want the need within the request and the request within a 1 GB dev node", need, mb)
	}
}
