package catalog_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	"modelplane/agent/catalog"
)

// TestVLLMArgsOfTheSeedsExample: the seed's 70B example (001 §4: 4 ×
// A100 tensor parallel, float16, 32,768 context, 0.90 memory, 256
// sequences, prefix caching, port 8000) is exactly the seed's launch line,
// as `vllm serve` of the pinned release takes it (the model positional).
func TestVLLMArgsOfTheSeedsExample(t *testing.T) {
	t.Parallel()
	got := catalog.VLLMArgs(catalog.Launch{ModelDir: "/models/llm-70b-chat/v3", Port: 8000, GPUs: 4},
		catalog.LLM{DType: "float16", MaxModelLen: 32768, GPUMemoryUtilization: 0.90, MaxNumSeqs: 256, PrefixCaching: true})
	want := strings.Fields(`vllm serve /models/llm-70b-chat/v3 --tensor-parallel-size 4 --dtype float16 --max-model-len 32768
		--gpu-memory-utilization 0.90 --max-num-seqs 256 --enable-prefix-caching --port 8000`)
	if !slices.Equal(got, want) {
		t.Errorf("argv =\n %q\nwant\n %q", got, want)
	}
	flags := 0
	for _, a := range got {
		if strings.HasPrefix(a, "--") {
			flags++
		}
	}
	if flags != 7 {
		// The seed's eighth, --model, is vllm serve's positional argument.
		t.Errorf("%d flags besides the model, want the seed's 7", flags)
	}
}

// TestVLLMArgsQuantisationSpeculationAndName: the settings beyond the
// seed's line, in 0.11's spelling: --speculative-config JSON, never the
// removed --speculative-model; tensor parallel explicit over the GPUs.
func TestVLLMArgsQuantisationSpeculationAndName(t *testing.T) {
	t.Parallel()
	got := catalog.VLLMArgs(catalog.Launch{ModelDir: "/m", Host: "127.0.0.1", Port: 9, GPUs: 4, ServedName: "chat"},
		catalog.LLM{TensorParallel: 2, Quantization: "awq", Speculative: &catalog.Speculative{Model: "draft", NumTokens: 5}})
	want := []string{"vllm", "serve", "/m", "--served-model-name", "chat", "--host", "127.0.0.1", "--tensor-parallel-size", "2",
		"--quantization", "awq", "--speculative-config", `{"model":"/m/draft","num_speculative_tokens":5}`, "--port", "9"}
	if !slices.Equal(got, want) {
		t.Errorf("argv =\n %q\nwant\n %q", got, want)
	}
	if slices.Contains(got, "--speculative-model") {
		t.Error("--speculative-model is gone from vllm serve " + catalog.VLLMVersion)
	}
}

func TestLlamaServerArgs(t *testing.T) {
	t.Parallel()
	s := catalog.LLM{MaxModelLen: 4096, MaxNumSeqs: 4}
	got := catalog.LlamaServerArgs("/m/model.gguf", catalog.Launch{Host: "127.0.0.1", Port: 7, ServedName: "chat"}, s)
	want := []string{"llama-server", "-m", "/m/model.gguf", "--host", "127.0.0.1", "--port", "7", "--parallel", "4", "-c", "16384", "--metrics", "--alias", "chat"}
	if !slices.Equal(got, want) {
		t.Errorf("cpu argv =\n %q\nwant\n %q", got, want)
	}
	got = catalog.LlamaServerArgs("/m/model.gguf", catalog.Launch{Port: 7, GPUs: 1}, catalog.LLM{})
	want = []string{"llama-server", "-m", "/m/model.gguf", "--port", "7", "--parallel", "1", "--metrics", "-ngl", "999"}
	if !slices.Equal(got, want) {
		t.Errorf("gpu argv =\n %q\nwant\n %q", got, want)
	}
}

// TestTritonConfigOfTheSeedsExample: the seed's bert-embedder
// config.pbtxt (001 §4), without its comments and its rate limiter (one
// replica's instances never share a GPU with another's here).
func TestTritonConfigOfTheSeedsExample(t *testing.T) {
	t.Parallel()
	want, err := os.ReadFile("testdata/bert-embedder.config.pbtxt")
	if err != nil {
		t.Fatal(err)
	}
	got := catalog.TritonConfig(catalog.TritonModel{
		Name: "bert-embedder", Platform: "onnxruntime_onnx", MaxBatchSize: 64,
		Inputs:              []catalog.TritonTensor{{Name: "input_ids", DataType: "TYPE_INT64", Dims: []int{-1}}, {Name: "attention_mask", DataType: "TYPE_INT64", Dims: []int{-1}}},
		Outputs:             []catalog.TritonTensor{{Name: "embeddings", DataType: "TYPE_FP32", Dims: []int{768}}},
		PreferredBatchSizes: []int{8, 16, 32}, MaxQueueDelayUS: 5000, PreserveOrdering: true, QueueTimeoutUS: 50000,
		InstanceCount: 2, GPUs: []int{0},
		WarmupDims: map[string][]int{"input_ids": {128}, "attention_mask": {128}}, WarmupCount: 3,
	})
	if got != string(want) {
		t.Errorf("config.pbtxt =\n%s\nwant\n%s", got, want)
	}
}

func TestTritonArgs(t *testing.T) {
	t.Parallel()
	got := catalog.TritonArgs("/repo", catalog.Launch{Host: "127.0.0.1", Port: 8000, MetricsPort: 8002})
	want := []string{"tritonserver", "--model-repository=/repo", "--http-address=127.0.0.1", "--http-port=8000",
		"--allow-grpc=false", "--allow-metrics=true", "--strict-readiness=true",
		"--allow-gpu-metrics=true", "--metrics-address=127.0.0.1", "--metrics-port=8002"}
	if !slices.Equal(got, want) {
		t.Errorf("argv =\n %q\nwant\n %q", got, want)
	}
	// The driver's replica: the metrics port it allocated, on loopback.
	got, err := catalog.Default()[catalog.Triton].Argv(catalog.Vars{Host: "127.0.0.1", Port: 4100, MetricsPort: 4101, WorkDir: "/state/r-1.d"}, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	want = []string{"tritonserver", "--model-repository=/state/r-1.d/repository", "--http-address=127.0.0.1", "--http-port=4100",
		"--allow-grpc=false", "--allow-metrics=true", "--strict-readiness=true",
		"--allow-gpu-metrics=true", "--metrics-address=127.0.0.1", "--metrics-port=4101"}
	if !slices.Equal(got, want) {
		t.Errorf("replica argv =\n %q\nwant\n %q", got, want)
	}
	// A template entry takes the port as {metrics_port}.
	e := catalog.Entry{Name: "x", Command: []string{"rt", "--port={port}", "--metrics-port={metrics_port}"}}
	if got, err := e.Expand(catalog.Vars{Port: 1, MetricsPort: 2}); err != nil || !slices.Equal(got, []string{"rt", "--port=1", "--metrics-port=2"}) {
		t.Errorf("expanded %q, %v", got, err)
	}
}

// TestAdaptersOnDocumentedFixtures reads each runtime's metrics as its
// documentation shows them (testdata/*.metrics.txt say which document):
// vLLM 0.11 under the new KV name, Triton with queue time and GPU
// utilisation, llama.cpp with and without the KV gauge (absent, not 0).
func TestAdaptersOnDocumentedFixtures(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		file, adapter string
		want          catalog.Metrics
	}{
		{"vllm-0.11.metrics.txt", catalog.AdapterVLLM, catalog.Metrics{Has: catalog.FieldRequests | catalog.FieldKV | catalog.FieldTokens | catalog.FieldTTFT |
			catalog.FieldPromptTokens | catalog.FieldBatchQueue, QueueDepth: 3, InFlight: 15, Requests: 200, KVUsedPct: 42, Tokens: 51200,
			TTFTSeconds: 24, TTFTCount: 200, PromptTokens: 102400, BatchQueueMS: 25, QueueCount: 200}},
		{"triton-25.metrics.txt", catalog.AdapterTriton, catalog.Metrics{Has: catalog.FieldRequests | catalog.FieldGPUUtil | catalog.FieldBatchQueue,
			QueueDepth: 4, InFlight: 4, Requests: 1000, BatchSize: 16, GPUUtil: 0.6, BatchQueueMS: 2.5}},
		{"llamacpp.metrics.txt", catalog.AdapterLlamaCPP, catalog.Metrics{Has: catalog.FieldKV | catalog.FieldTokens | catalog.FieldPromptTokens,
			QueueDepth: 1, InFlight: 3, KVUsedPct: 12.5, Tokens: 900, PromptTokens: 4096}},
		{"llamacpp-nokv.metrics.txt", catalog.AdapterLlamaCPP, catalog.Metrics{Has: catalog.FieldTokens, InFlight: 2, Tokens: 900}},
	} {
		f, err := os.Open("testdata/" + c.file)
		if err != nil {
			t.Fatal(err)
		}
		got, err := catalog.Parse(c.adapter, f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		got.GPUUtil = float64(int(got.GPUUtil*1000+0.5)) / 1000 // 0.5 and 0.7 average in binary
		if got != c.want {
			t.Errorf("%s:\n got %+v\nwant %+v", c.file, got, c.want)
		}
	}
	m, _ := catalog.Parse(catalog.AdapterLlamaCPP, strings.NewReader("# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 0\n"))
	if m.Reports(catalog.FieldKV) || m.Reports(catalog.FieldTokens) || m.Reports(catalog.FieldPromptTokens) || m.Reports(catalog.FieldRequests) {
		t.Errorf("a runtime exporting neither KV nor tokens reports %b", m.Has)
	}
	// A Triton that has answered nothing yet reports its queue time as 0,
	// not absent: an idle replica must not read as one missing the signal.
	m, _ = catalog.Parse(catalog.AdapterTriton, strings.NewReader("# TYPE nv_inference_queue_duration_us counter\nnv_inference_queue_duration_us{model=\"m\",version=\"1\"} 0\n"))
	if !m.Reports(catalog.FieldBatchQueue) || m.BatchQueueMS != 0 || m.Reports(catalog.FieldGPUUtil) {
		t.Errorf("idle Triton = %+v, want queue time reported as 0 and no GPU use", m)
	}
}

// TestReadinessPaths: vLLM is ready once /v1/models (OpenAI's list, as
// vLLM 0.11 answers it) names the served model; Triton once the model's
// own /v2/models/{m}/ready answers; llama-server's /health answers 503
// while it loads, so it is both paths.
func TestReadinessPaths(t *testing.T) {
	t.Parallel()
	cat := catalog.Default()
	v := cat[catalog.VLLM]
	if v.Health != "/health" || v.ReadyPath("chat") != "/v1/models" || !v.ReadyLists {
		t.Errorf("vllm probes = %+v", v)
	}
	list := `{"object":"list","data":[{"id":"chat","object":"model","created":1733000000,"owned_by":"vllm","root":"/models/chat/v3","parent":null,"max_model_len":32768}]}`
	if ok, err := catalog.Listed(strings.NewReader(list), "chat"); !ok || err != nil {
		t.Errorf("Listed(chat) = %t, %v; want true", ok, err)
	}
	if ok, err := catalog.Listed(strings.NewReader(list), "other"); ok || err != nil {
		t.Errorf("Listed(other) = %t, %v; want false", ok, err)
	}
	if _, err := catalog.Listed(strings.NewReader("<html>"), "chat"); err == nil {
		t.Error("a body that is no model list was read as one")
	}
	tr := cat[catalog.Triton]
	if got := tr.ReadyPath("bert embedder"); got != "/v2/models/bert%20embedder/ready" {
		t.Errorf("triton ready path = %q", got)
	}
	if got := tr.Probes("bert"); !slices.Contains(got, "/v2/models/bert/ready") {
		t.Errorf("triton probes %q lack the model's ready path, which the token guard must let through", got)
	}
	if got := tr.Probes("bert"); slices.Contains(got, tr.Metrics) || !tr.MetricsPort {
		t.Errorf("triton probes %q (metrics port %t): its metrics are on a port of their own, not open through the guard", got, tr.MetricsPort)
	}
	if l := cat[catalog.LlamaServer]; l.Health != "/health" || l.Ready != "/health" {
		t.Errorf("llama-server probes = %+v", l)
	}
}

// TestArgvOfAVLLMReplica: the driver's command line of a vLLM replica is
// the generated one from the spec's settings, served under the model's
// name; a template entry is expanded as before.
func TestArgvOfAVLLMReplica(t *testing.T) {
	t.Parallel()
	cat := catalog.Default()
	v := catalog.Vars{ModelDir: "/cache/v3", Host: "127.0.0.1", Port: 4100, Model: "chat"}
	got, err := cat[catalog.VLLM].Argv(v, []byte(`{"dtype":"bfloat16","max_model_len":8192,"prefix_caching":true}`), 2)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"vllm", "serve", "/cache/v3", "--served-model-name", "chat", "--host", "127.0.0.1", "--tensor-parallel-size", "2",
		"--dtype", "bfloat16", "--max-model-len", "8192", "--enable-prefix-caching", "--port", "4100"}
	if !slices.Equal(got, want) {
		t.Errorf("argv =\n %q\nwant\n %q", got, want)
	}
	if _, err := cat[catalog.VLLM].Argv(v, []byte(`{"dtype":`), 1); err == nil {
		t.Error("broken settings gave a command line")
	}
	got, err = cat[catalog.LlamaServer].Argv(v, nil, 0)
	if err != nil || !slices.Equal(got[:3], []string{"llama-server", "-m", "/cache/v3/model.gguf"}) {
		t.Errorf("llama-server argv = %q, %v", got, err)
	}
}

// A Triton replica's repository: the platform follows the model file, the
// batching is the endpoint's, the instances run on the CPU without GPUs,
// and a version without a file Triton serves is refused naming the files.
func TestTritonRepositoryOfAVersion(t *testing.T) {
	t.Parallel()
	v := catalog.Vars{Model: "fraud", ModelDir: "/cache/v1", WorkDir: "/state/r1.d"}
	cfgs, links, err := catalog.TritonRepository(v, []string{"manifest.json", "model.plan"},
		[]byte(`{"batching":{"max_batch_size":16,"preferred_batch_sizes":[8],"max_queue_delay_us":500,"queue_timeout_ms":50}}`), 0)
	if err != nil {
		t.Fatal(err)
	}
	cfg := cfgs["fraud/config.pbtxt"]
	for _, want := range []string{`platform: "tensorrt_plan"`, "max_batch_size: 16", "preferred_batch_size: [ 8 ]",
		"max_queue_delay_microseconds: 500", "default_timeout_microseconds: 50000", "kind: KIND_CPU"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("config.pbtxt lacks %q:\n%s", want, cfg)
		}
	}
	if links["fraud/1"] != "/cache/v1" {
		t.Errorf("links = %v; want fraud/1 → the version's files", links)
	}
	argv, err := catalog.Default()[catalog.Triton].Argv(v, nil, 0)
	if err != nil || !slices.Contains(argv, "--model-repository=/state/r1.d/repository") {
		t.Errorf("argv = %q, %v; want the replica's repository", argv, err)
	}
	if _, _, err := catalog.TritonRepository(v, []string{"model.json"}, nil, 1); err == nil || !strings.Contains(err.Error(), "model.json") {
		t.Errorf("a version without a Triton model file: err = %v", err)
	}
}
