package catalog_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	"modelplane/agent/catalog"
)

// The seed's 70B example (001 §4): 4 × A100 tensor parallel, FP16, 32,768
// context, 0.90 memory, 256 sequences, prefix caching, port 8000. Its
// launch line has eight flags; `vllm serve` takes the model as its first
// argument instead of --model, and the seven others come out exactly.
func TestVLLMSeedLaunchLine(t *testing.T) {
	got := catalog.LaunchVLLM(catalog.Vars{ModelDir: "/models/llm-70b-chat/v3", Port: 8000}, catalog.LLM{
		GPUs: 4, Dtype: "float16", MaxModelLen: 32768, GPUMemoryUtilization: 0.90, MaxNumSeqs: 256, PrefixCaching: true,
	})
	want := []string{"vllm", "serve", "/models/llm-70b-chat/v3",
		"--tensor-parallel-size", "4", "--dtype", "float16", "--max-model-len", "32768",
		"--gpu-memory-utilization", "0.90", "--max-num-seqs", "256", "--enable-prefix-caching", "--port", "8000"}
	if !slices.Equal(got, want) {
		t.Fatalf("launch line\n got %q\nwant %q", got, want)
	}
}

// On a node the agent adds its host and the served model name, and the
// seed's speculative settings become --speculative-config: vLLM 0.11 has
// no --speculative-model.
func TestVLLMSpeculativeQuantisedOnANode(t *testing.T) {
	got := strings.Join(catalog.LaunchVLLM(catalog.Vars{ModelDir: "/m", Host: "10.0.0.5", Port: 9001, Model: "llama-70b", Endpoint: "chat"}, catalog.LLM{
		TensorParallel: 2, GPUs: 4, Quantization: "awq",
		Speculative: &catalog.Speculative{Model: "draft", NumTokens: 5},
	}), " ")
	want := `vllm serve /m --host 10.0.0.5 --served-model-name chat --tensor-parallel-size 2 --quantization awq ` +
		`--speculative-config {"model":"/m/draft","num_speculative_tokens":5} --port 9001`
	if got != want {
		t.Fatalf("launch line\n got %s\nwant %s", got, want)
	}
	if strings.Contains(got, "--speculative-model") {
		t.Fatal("--speculative-model is not a flag of current vllm serve")
	}
}

func TestLlamaServerLaunchLine(t *testing.T) {
	v := catalog.Vars{ModelDir: "/m", Host: "127.0.0.1", Port: 8080, Threads: 4, Model: "llama", Endpoint: "chat"}
	cpu := strings.Join(catalog.LaunchLlamaServer(v, catalog.LLM{MaxNumSeqs: 4, MaxModelLen: 4096}), " ")
	if want := "llama-server -m /m/model.gguf --host 127.0.0.1 --port 8080 --alias chat --parallel 4 -c 16384 --threads 4 --metrics"; cpu != want {
		t.Fatalf("cpu\n got %s\nwant %s", cpu, want)
	}
	gpu := catalog.LaunchLlamaServer(v, catalog.LLM{GPUs: 1})
	if !slices.Contains(gpu, "-ngl") {
		t.Fatalf("a GPU replica offloads its layers: %q", gpu)
	}
}

// The seed's bert-embedder config.pbtxt, as far as the platform writes it:
// Triton reads the inputs and outputs from the ONNX file itself, and the
// queue policy is the runtime's default.
func TestTritonSeedConfig(t *testing.T) {
	got, err := catalog.TritonConfig("bert-embedder", catalog.TritonModel{
		Platform: "onnxruntime_onnx", MaxBatchSize: 64, PreferredBatchSizes: []int{8, 16, 32}, MaxQueueDelayUS: 5000,
		Instances: 2, GPUs: []int{0},
		Warmup: []catalog.TensorSpec{{Name: "input_ids", DataType: "TYPE_INT64", Dims: []int{128}}, {Name: "attention_mask", DataType: "TYPE_INT64", Dims: []int{128}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("testdata/seed-bert-embedder.pbtxt")
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Fatalf("config.pbtxt\n got:\n%s\nwant:\n%s", got, want)
	}
	if _, err := catalog.TritonConfig("x", catalog.TritonModel{}); err == nil {
		t.Fatal("a config without a platform must be refused")
	}
	cpu, _ := catalog.TritonConfig("x", catalog.TritonModel{Platform: "onnxruntime_onnx"})
	if !strings.Contains(cpu, "KIND_CPU") || strings.Contains(cpu, "dynamic_batching") {
		t.Fatalf("an unbatched CPU model:\n%s", cpu)
	}
	cmd := strings.Join(catalog.LaunchTriton(catalog.Vars{Host: "0.0.0.0", Port: 8000}, "/repo"), " ")
	if !strings.Contains(cmd, "--model-repository=/repo") || !strings.Contains(cmd, "--http-port=8000") {
		t.Fatalf("tritonserver line: %s", cmd)
	}
}
