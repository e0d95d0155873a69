package registry

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"modelplane/agent/catalog"
	"modelplane/field"
)

// TestLLMSettingsNameTheBadField: every bad llm setting is refused with
// its field's full name, which the API's 400 carries.
func TestLLMSettingsNameTheBadField(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		llm   ServingLLM
		gpus  int
		field string
	}{
		{"an unknown dtype", ServingLLM{DType: "fp13"}, 1, "metadata.serving.llm.dtype"},
		{"memory above all of it", ServingLLM{GPUMemoryUtilization: 1.2}, 1, "metadata.serving.llm.gpu_memory_utilization"},
		{"negative context", ServingLLM{MaxModelLen: -1}, 1, "metadata.serving.llm.max_model_len"},
		{"too many sequences", ServingLLM{MaxNumSeqs: 10000}, 1, "metadata.serving.llm.max_num_seqs"},
		{"a negative queue bound", ServingLLM{MaxQueuedRequests: -1}, 1, "metadata.serving.llm.max_queued_requests"},
		{"an unknown quantisation", ServingLLM{Quantization: "int3"}, 1, "metadata.serving.llm.quantization"},
		{"tensor parallel not dividing the GPUs", ServingLLM{TensorParallel: 3}, 4, "metadata.serving.llm.tensor_parallel"},
		{"tensor parallel without GPUs", ServingLLM{TensorParallel: 2}, 0, "metadata.serving.llm.tensor_parallel"},
		{"a runtime version that is not a release", ServingLLM{RuntimeVersion: "latest"}, 1, "metadata.serving.llm.runtime_version"},
		{"speculation without draft or method", ServingLLM{Speculative: &ServingSpecDec{NumTokens: 5}}, 1, "metadata.serving.llm.speculative"},
		{"speculation of no tokens", ServingLLM{Speculative: &ServingSpecDec{Model: "/d", NumTokens: 0}}, 1, "metadata.serving.llm.speculative.num_speculative_tokens"},
	} {
		var errs field.Errors
		checkLLM(&errs, &c.llm, c.gpus)
		if !strings.Contains(errs.Error(), c.field) {
			t.Errorf("%s: errors %q do not name %s", c.name, errs.Error(), c.field)
		}
	}
	var errs field.Errors
	seed := ServingLLM{DType: "float16", MaxModelLen: 32768, GPUMemoryUtilization: 0.9, MaxNumSeqs: 256, PrefixCaching: true,
		TensorParallel: 4, RuntimeVersion: "0.11.0", Speculative: &ServingSpecDec{Model: "/models/llm-7b-draft/v1", NumTokens: 5}}
	checkLLM(&errs, &seed, 4)
	if errs.Err() != nil {
		t.Errorf("the seed's settings are refused: %v", errs.Err())
	}
}

// TestLLMSettingsAreTheCatalogues: the stored llm block decodes into the
// agent catalogue's settings field for field, so the generated command
// line reads what was registered.
func TestLLMSettingsAreTheCatalogues(t *testing.T) {
	t.Parallel()
	in := ServingLLM{DType: "bfloat16", MaxModelLen: 8192, GPUMemoryUtilization: 0.85, MaxNumSeqs: 64, PrefixCaching: true, MaxQueuedRequests: 32,
		Quantization: "awq", TensorParallel: 2, RuntimeVersion: "0.11.0", Speculative: &ServingSpecDec{Method: "ngram", NumTokens: 4}}
	b, _ := json.Marshal(in)
	var got catalog.LLM
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := catalog.LLM{DType: "bfloat16", MaxModelLen: 8192, GPUMemoryUtilization: 0.85, MaxNumSeqs: 64, PrefixCaching: true, MaxQueuedRequests: 32,
		Quantization: "awq", TensorParallel: 2, RuntimeVersion: "0.11.0", Speculative: &catalog.Speculative{Method: "ngram", NumTokens: 4}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("catalogue reads %+v, want %+v", got, want)
	}
	if reflect.TypeOf(ServingLLM{}).NumField() != reflect.TypeOf(catalog.LLM{}).NumField() {
		t.Error("registry.ServingLLM and catalog.LLM have different fields")
	}
}

// TestEveryRegistryRuntimeHasACatalogueEntry: each runtime a version may
// name, but the simulator's, is served by a catalogue entry.
func TestEveryRegistryRuntimeHasACatalogueEntry(t *testing.T) {
	t.Parallel()
	for _, rt := range Runtimes {
		if rt == "sim" {
			continue
		}
		for _, gpu := range []bool{false, true} {
			name, err := catalog.Name(rt, gpu)
			if err != nil {
				t.Errorf("runtime %s (gpu %t): %v", rt, gpu, err)
				continue
			}
			if _, ok := catalog.Default()[name]; !ok {
				t.Errorf("runtime %s maps to %s, not in the catalogue", rt, name)
			}
		}
	}
}

func TestLLMSettingsOfStoredServing(t *testing.T) {
	t.Parallel()
	if got := LLMSettings([]byte(`{"output":{},"llm":{"dtype":"float16","max_num_seqs":256}}`)); string(got) != `{"dtype":"float16","max_num_seqs":256}` {
		t.Errorf("settings = %s", got)
	}
	for _, s := range []string{`{"output":{}}`, `{"llm":null}`, `not json`, ``} {
		if got := LLMSettings([]byte(s)); got != nil {
			t.Errorf("settings of %q = %s, want none", s, got)
		}
	}
}

// TestRuntimeConfigCarriesLLMSettings: a GGUF version's built-in runtime
// configuration carries its serving.llm block, which sizes the engine.
func TestRuntimeConfigCarriesLLMSettings(t *testing.T) {
	t.Parallel()
	serving := []byte(`{"output":{},"llm":{"max_model_len":1024,"max_num_seqs":4,"max_queued_requests":9}}`)
	cfg := RuntimeConfig("chat", "v1", "gguf", serving, nil)
	var got ServingLLM
	if err := json.Unmarshal(cfg.LLM, &got); err != nil || got.MaxModelLen != 1024 || got.MaxNumSeqs != 4 || got.MaxQueuedRequests != 9 {
		t.Errorf("config llm = %s (%v); want the version's block", cfg.LLM, err)
	}
	if cfg := RuntimeConfig("m", "v1", "onnx", []byte(`{"output":{}}`), nil); cfg.LLM != nil {
		t.Errorf("a version without an llm block gets %s", cfg.LLM)
	}
}
