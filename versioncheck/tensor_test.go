package versioncheck_test

import (
	"encoding/json"
	"strings"
	"testing"

	"modelplane/demo/docproc"
	"modelplane/registry"
)

// A model served with its own tensors (token ids in, an embedding out; a
// tokenizer.json) has no features: validation loads it into the runtime,
// its signature from the file, and answers its own sample inputs instead
// of refusing it for naming no features. One without sample inputs is
// validated by the load alone.
func TestValidationOfTensorModels(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	p, err := docproc.Build(docproc.DefaultSeed)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"bert-tokenizer", "bert-embedder"} {
		if _, err := f.reg.CreateModel(ctx, f.eng, registry.ModelSpec{Team: "risk", Name: name, Task: registry.TaskRegression}); err != nil {
			t.Fatal(err)
		}
	}
	samples := func(v docproc.Version) registry.Serving {
		return registry.Serving{SampleInputs: v.Serving.SampleInputs}
	}
	tok := f.register(t, "bert-tokenizer", "v2", registry.Tokenizer, p.Tokenizer.File, p.Tokenizer.Data, samples(p.Tokenizer))
	if tok.Format != registry.Tokenizer {
		t.Fatalf("tokenizer version format %q, want %q", tok.Format, registry.Tokenizer)
	}
	f.register(t, "bert-embedder", "v5", "onnxruntime", p.Embedder.File, p.Embedder.Data, samples(p.Embedder))
	f.register(t, "bert-embedder", "v6", "onnxruntime", p.Embedder.File, p.Embedder.Data, registry.Serving{})
	if n, err := f.validator.Pass(ctx); err != nil || n != 3 {
		t.Fatalf("pass = %d, %v; want 3 validated", n, err)
	}
	for _, c := range []struct{ model, version, says string }{
		{"bert-tokenizer", "v2", `"input_ids":[2,`},
		{"bert-embedder", "v5", `"embedding":[`},
		{"bert-embedder", "v6", ""},
	} {
		v := f.version(t, c.model, c.version)
		if v.Status != registry.StatusValidated || v.Validation == nil {
			t.Fatalf("%s %s = %q %+v; want validated", c.model, c.version, v.Status, v.Validation)
		}
		if outs := strings.ReplaceAll(string(v.Validation.Outputs), " ", ""); !strings.Contains(outs, c.says) {
			t.Errorf("%s %s outputs %.200s; want them to hold %s", c.model, c.version, outs, c.says)
		}
	}
	var outs []json.RawMessage
	if err := json.Unmarshal(f.version(t, "bert-embedder", "v5").Validation.Outputs, &outs); err != nil || len(outs) != 1 {
		t.Fatalf("embedder outputs: %v", err)
	}
}
