package app

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"modelplane/gguf"
	"modelplane/llm"
	"modelplane/runtime/llmserve"
)

// TestDemoLLMVersion checks the demo's GGUF version without a stack: the
// file is llm.WriteDemo's bytes (deterministic), and the memory it needs,
// computed from the file as validation computes it, fits the version's
// request, which fits a dev CPU node.
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
	var want bytes.Buffer
	if err := llm.WriteDemo(&want, gguf.F16); err != nil {
		t.Fatal(err)
	}
	file := found.files["model.gguf"]
	if !bytes.Equal(file, want.Bytes()) {
		t.Fatalf("model.gguf is %d bytes, not llm.WriteDemo's %d", len(file), want.Len())
	}
	path := filepath.Join(t.TempDir(), "model.gguf")
	if err := os.WriteFile(path, file, 0o644); err != nil {
		t.Fatal(err)
	}
	need, err := llm.MemoryNeed(path, llmserve.DefaultPages(llm.DemoConfig.Context)*llmserve.PageTokens)
	if err != nil {
		t.Fatal(err)
	}
	if mb := int64(found.spec.Resources.MemoryMB); need > mb<<20 || mb > 1024 {
		t.Errorf("need %d bytes, request %d MiB; want the need within the request and the request within a 1 GB dev node", need, mb)
	}
}
