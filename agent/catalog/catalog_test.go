package catalog_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"modelplane/agent/catalog"
)

func TestRegistryRuntimesMapToEntries(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		runtime string
		gpu     bool
		want    string
	}{
		{"xgboost", false, catalog.Builtin},
		{"lightgbm", false, catalog.Builtin},
		{"onnxruntime", false, catalog.Builtin},
		{"onnxruntime", true, catalog.Triton},
		{"triton", true, catalog.Triton},
		{"tensorrt-llm", true, catalog.Triton},
		{"vllm", true, catalog.VLLM},
		{"llamacpp", false, catalog.LlamaServer},
		{"llamacpp", true, catalog.LlamaServer},
		{"builtin-llm", false, catalog.BuiltinLLM},
	} {
		got, err := catalog.Name(c.runtime, c.gpu)
		if err != nil || got != c.want {
			t.Errorf("Name(%q, gpu %t) = %q, %v; want %q", c.runtime, c.gpu, got, err, c.want)
		}
		if _, ok := catalog.Default()[got]; !ok {
			t.Errorf("entry %q of runtime %q is not in the catalogue", got, c.runtime)
		}
	}
	if _, err := catalog.Name("sim", false); !errors.Is(err, catalog.ErrUnknown) {
		t.Errorf("Name(sim) err = %v, want ErrUnknown: the sim runtime is the sim driver's", err)
	}
}

func TestBuiltinCommandPassesModelDirAndPort(t *testing.T) {
	t.Parallel()
	e := catalog.Default()[catalog.Builtin]
	got, err := e.Expand(catalog.Vars{Self: "/usr/bin/modelplane", ModelDir: "/cache/v1", Host: "127.0.0.1", Port: 4100})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/usr/bin/modelplane", "runtime", "--model-dir", "/cache/v1", "--port", "4100"}
	if !slices.Equal(got, want) {
		t.Errorf("argv = %q, want %q", got, want)
	}
	if e.Health != "/v2/health/live" || e.Ready != "/v2/health/ready" || e.Metrics != "/metrics" || e.Adapter != catalog.AdapterTriton {
		t.Errorf("builtin paths = %+v", e)
	}
	if c := catalog.Default()[catalog.Triton].Command; c != nil {
		t.Errorf("triton: its command line is generated on a model repository (Argv), not a template: %q", c)
	}
}

func TestExpandRefusesUnknownPlaceholders(t *testing.T) {
	t.Parallel()
	e := catalog.Entry{Name: "x", Command: []string{"rt", "--port={prot}"}}
	if _, err := e.Expand(catalog.Vars{Port: 1}); err == nil || !strings.Contains(err.Error(), "{prot}") {
		t.Errorf("err = %v, want one naming {prot}", err)
	}
	e = catalog.Entry{Name: "x", Command: []string{"rt", "--port={port"}}
	if _, err := e.Expand(catalog.Vars{Port: 1}); err == nil {
		t.Error("an unclosed placeholder expanded")
	}
	e = catalog.Entry{Name: "x", Command: []string{"{self}"}}
	if _, err := e.Expand(catalog.Vars{}); err == nil {
		t.Error("an empty program name expanded")
	}
}

func TestTritonAdapterReadsQueueRequestsAndBatch(t *testing.T) {
	t.Parallel()
	body := `# HELP nv_inference_request_success Number of successful inference requests
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="fraud",version="1"} 90
nv_inference_request_success{model="other",version="1"} 5
# TYPE nv_inference_request_failure counter
nv_inference_request_failure{model="fraud",version="1"} 5
# TYPE nv_inference_count counter
nv_inference_count{model="fraud",version="1"} 400
# TYPE nv_inference_exec_count counter
nv_inference_exec_count{model="fraud",version="1"} 100
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="fraud",version="1"} 7
`
	m, err := catalog.Parse(catalog.AdapterTriton, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	want := catalog.Metrics{Has: catalog.FieldRequests, QueueDepth: 7, InFlight: 7, Requests: 100, BatchSize: 4}
	if m != want {
		t.Errorf("metrics = %+v, want %+v", m, want)
	}
	m, err = catalog.Parse(catalog.AdapterTriton, strings.NewReader(body+"# TYPE modelplane_runtime_inflight_requests gauge\nmodelplane_runtime_inflight_requests 11\n"))
	if err != nil || m.InFlight != 11 {
		t.Errorf("with the in-flight gauge: %+v, %v; want in-flight 11", m, err)
	}
}

func TestVLLMAdapterReadsKVTokensAndTTFT(t *testing.T) {
	t.Parallel()
	body := `# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 3
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 2
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.25
# TYPE vllm:request_success_total counter
vllm:request_success_total{finished_reason="stop",model_name="m"} 40
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{model_name="m"} 1234
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{model_name="m",le="0.1"} 30
vllm:time_to_first_token_seconds_bucket{model_name="m",le="+Inf"} 40
vllm:time_to_first_token_seconds_sum{model_name="m"} 6
vllm:time_to_first_token_seconds_count{model_name="m"} 40
`
	m, err := catalog.Parse(catalog.AdapterVLLM, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	want := catalog.Metrics{Has: catalog.FieldRequests | catalog.FieldKV | catalog.FieldTokens | catalog.FieldTTFT,
		QueueDepth: 2, InFlight: 5, Requests: 40, KVUsedPct: 25, Tokens: 1234, TTFTSeconds: 6, TTFTCount: 40}
	if m != want {
		t.Errorf("metrics = %+v, want %+v", m, want)
	}
}

func TestParseRefusesGarbageAndUnknownAdapters(t *testing.T) {
	t.Parallel()
	if _, err := catalog.Parse(catalog.AdapterTriton, strings.NewReader("not { metrics")); err == nil {
		t.Error("garbage parsed")
	}
	if _, err := catalog.Parse("nope", strings.NewReader("")); err == nil {
		t.Error("an unknown adapter parsed")
	}
}

func TestEveryEntryNamesAnImageAndAnInstallationReplacesThem(t *testing.T) {
	t.Parallel()
	entries := catalog.Default()
	for name, e := range entries {
		if e.Image == "" {
			t.Errorf("entry %s names no image for the kubernetes driver", name)
		}
	}
	if err := catalog.SetImages(entries, " vllm=registry.corp/vllm:v1 , builtin=registry.corp/modelplane:1.4,"); err != nil {
		t.Fatal(err)
	}
	if got := entries[catalog.VLLM].Image; got != "registry.corp/vllm:v1" {
		t.Errorf("vllm image = %q, want the installation's", got)
	}
	if got := entries[catalog.Builtin].Image; got != "registry.corp/modelplane:1.4" {
		t.Errorf("builtin image = %q, want the installation's", got)
	}
	if got := entries[catalog.Triton].Image; got != catalog.TritonImage {
		t.Errorf("triton image = %q, want the default kept", got)
	}
	for _, bad := range []string{"vllm", "vllm=", "nosuch=img"} {
		if err := catalog.SetImages(catalog.Default(), bad); err == nil {
			t.Errorf("SetImages(%q) accepted a bad setting", bad)
		}
	}
}
