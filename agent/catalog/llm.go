package catalog

import (
	"encoding/json"
	"fmt"
	"path"
	"strconv"
	"strings"
)

// VLLMVersion is the vLLM release whose `vllm serve` flags VLLMArgs
// writes (docs/llm-runtimes.md lists them). Flags change between
// releases: 0.11 takes speculative decoding as one --speculative-config
// JSON object; the --speculative-model flag of older releases is gone.
const VLLMVersion = "0.11.0"

// LLM are an LLM version's serving settings: the registry's
// metadata.serving.llm block, in the same JSON shape. Zero values are
// the runtime's own defaults and are left off the command line.
type LLM struct {
	// DType is the weights' and activations' type ("float16",
	// "bfloat16", "auto").
	DType string `json:"dtype,omitempty"`
	// MaxModelLen is the context length, prompt and completion.
	MaxModelLen int `json:"max_model_len,omitempty"`
	// GPUMemoryUtilization is the share of each GPU's memory the runtime
	// may take for weights and KV cache, above 0 and at most 1.
	GPUMemoryUtilization float64 `json:"gpu_memory_utilization,omitempty"`
	// MaxNumSeqs bounds the sequences in flight (the engine's batch).
	MaxNumSeqs int `json:"max_num_seqs,omitempty"`
	// PrefixCaching reuses the KV pages of shared prompt prefixes.
	PrefixCaching bool `json:"prefix_caching,omitempty"`
	// MaxQueuedRequests bounds the built-in runtime's waiting queue
	// (llmserve.Settings); vLLM and llama-server have no such flag and
	// take none.
	MaxQueuedRequests int `json:"max_queued_requests,omitempty"`
	// Quantization is the weights' quantisation method ("awq", "gptq",
	// "fp8"), empty for none.
	Quantization string `json:"quantization,omitempty"`
	// Speculative turns speculative decoding on.
	Speculative *Speculative `json:"speculative,omitempty"`
	// TensorParallel is the tensor-parallel degree; 0 means the
	// replica's GPU count.
	TensorParallel int `json:"tensor_parallel,omitempty"`
	// RuntimeVersion is the runtime release the version was tested
	// with; VLLMArgs writes the flags of VLLMVersion whatever it says.
	RuntimeVersion string `json:"runtime_version,omitempty"`
}

// Speculative are speculative decoding's settings: a draft model (a
// directory of the version's files, relative to its model directory)
// proposing NumTokens tokens per step, or a method without a draft model
// ("ngram").
type Speculative struct {
	Model     string `json:"model,omitempty"`
	Method    string `json:"method,omitempty"`
	NumTokens int    `json:"num_speculative_tokens"`
}

// DraftModelPath reports whether p can name a directory of a version's
// files: relative, clean, without "..", backslashes or control characters.
// A hub id ("org/model") reads as one too; it names nothing among the
// version's files, so vLLM, which runs offline, fails to load it rather
// than fetch it.
func DraftModelPath(p string) bool {
	if p == "" || len(p) > 1024 || strings.HasPrefix(p, "/") || strings.ContainsAny(p, "\\:") || path.Clean(p) != p {
		return false
	}
	for _, e := range strings.Split(p, "/") {
		if e == ".." || e == "." {
			return false
		}
	}
	for _, c := range p {
		if c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

// Launch is where one LLM replica serves: its model directory, listen
// address, GPUs and the name it answers to.
type Launch struct {
	ModelDir string
	// Host is the listen address; empty leaves the runtime's default.
	Host string
	Port int
	// GPUs is the replica's GPU count (its slots).
	GPUs int
	// ServedName is the model name clients send; empty leaves vLLM's
	// default, the model directory.
	ServedName string
	// MetricsPort is Triton's separate metrics port, served on loopback
	// only; 0 leaves Triton's default (8002 on the HTTP address).
	MetricsPort int
}

// VLLMArgs is the `vllm serve` command line of VLLMVersion for a
// replica. The seed's 70B example (4 GPUs, float16, 32,768 context, 0.90
// memory, 256 sequences, prefix caching, port 8000) gives exactly the
// seed's eight flags.
func VLLMArgs(l Launch, s LLM) []string {
	argv := []string{"vllm", "serve", l.ModelDir}
	if l.ServedName != "" {
		argv = append(argv, "--served-model-name", l.ServedName)
	}
	if l.Host != "" {
		argv = append(argv, "--host", l.Host)
	}
	tp := s.TensorParallel
	if tp == 0 {
		tp = max(l.GPUs, 1)
	}
	argv = append(argv, "--tensor-parallel-size", strconv.Itoa(tp))
	if s.DType != "" {
		argv = append(argv, "--dtype", s.DType)
	}
	if s.MaxModelLen > 0 {
		argv = append(argv, "--max-model-len", strconv.Itoa(s.MaxModelLen))
	}
	if s.GPUMemoryUtilization > 0 {
		argv = append(argv, "--gpu-memory-utilization", strconv.FormatFloat(s.GPUMemoryUtilization, 'f', 2, 64))
	}
	if s.MaxNumSeqs > 0 {
		argv = append(argv, "--max-num-seqs", strconv.Itoa(s.MaxNumSeqs))
	}
	if s.PrefixCaching {
		argv = append(argv, "--enable-prefix-caching")
	}
	if s.Quantization != "" {
		argv = append(argv, "--quantization", s.Quantization)
	}
	if sp := s.Speculative; sp != nil {
		// Keys in vLLM's SpeculativeConfig names; marshalled from a map
		// so the order is stable (sorted keys).
		cfg := map[string]any{"num_speculative_tokens": sp.NumTokens}
		if sp.Model != "" {
			// A directory of the version's files (the registry refuses
			// anything else; Argv refuses it again), never a hub id or a
			// path elsewhere on the node.
			cfg["model"] = path.Join(l.ModelDir, sp.Model)
		}
		if sp.Method != "" {
			cfg["method"] = sp.Method
		}
		b, _ := json.Marshal(cfg)
		argv = append(argv, "--speculative-config", string(b))
	}
	return append(argv, "--port", strconv.Itoa(l.Port))
}

// LlamaServerArgs is llama.cpp's `llama-server` command line: the GGUF
// file, the listen address, parallel slots (max_num_seqs, default 1),
// the context (-c, max_model_len per slot times the slots: llama-server
// splits -c among them), the Prometheus endpoint, and every layer on the
// GPU when the replica has one.
func LlamaServerArgs(file string, l Launch, s LLM) []string {
	slots := max(s.MaxNumSeqs, 1)
	argv := []string{"llama-server", "-m", file}
	if l.Host != "" {
		argv = append(argv, "--host", l.Host)
	}
	argv = append(argv, "--port", strconv.Itoa(l.Port), "--parallel", strconv.Itoa(slots))
	if s.MaxModelLen > 0 {
		argv = append(argv, "-c", strconv.Itoa(s.MaxModelLen*slots))
	}
	argv = append(argv, "--metrics")
	if l.ServedName != "" {
		argv = append(argv, "--alias", l.ServedName)
	}
	if l.GPUs > 0 {
		// More layers than any model has: all of them.
		argv = append(argv, "-ngl", "999")
	}
	return argv
}

// TritonTensor is one input or output of a Triton model.
type TritonTensor struct {
	Name     string
	DataType string // "TYPE_INT64", "TYPE_FP32", …
	Dims     []int
}

// TritonModel is what config.pbtxt says of one model in a Triton
// repository. Zero values leave the setting out (Triton's default).
type TritonModel struct {
	Name         string
	Platform     string // "onnxruntime_onnx", "tensorrt_plan", …
	MaxBatchSize int
	Inputs       []TritonTensor
	Outputs      []TritonTensor
	// Dynamic batching: the endpoint's preferred sizes and max queue
	// delay; a queue timeout rejects a request waiting longer.
	PreferredBatchSizes []int
	MaxQueueDelayUS     int
	PreserveOrdering    bool
	QueueTimeoutUS      int
	// InstanceCount model instances of kind KIND_GPU on GPUs, or
	// KIND_CPU when GPUs is empty.
	InstanceCount int
	GPUs          []int
	// WarmupDims are the per-input dims of a zero-filled warm-up request
	// (by input name), run WarmupCount times at batch size 1.
	WarmupDims  map[string][]int
	WarmupCount int
}

// TritonConfig writes the model's config.pbtxt (protobuf text format,
// Triton's ModelConfig). The seed's bert-embedder example round-trips:
// see the golden file in testdata.
func TritonConfig(m TritonModel) string {
	var b strings.Builder
	fmt.Fprintf(&b, "name: %q\n", m.Name)
	fmt.Fprintf(&b, "platform: %q\n", m.Platform)
	fmt.Fprintf(&b, "max_batch_size: %d\n", m.MaxBatchSize)
	tensors := func(kind string, ts []TritonTensor) {
		if len(ts) == 0 {
			return
		}
		fmt.Fprintf(&b, "\n%s [\n", kind)
		for i, t := range ts {
			fmt.Fprintf(&b, "  {\n    name: %q\n    data_type: %s\n    dims: %s\n  }", t.Name, t.DataType, dims(t.Dims))
			if i < len(ts)-1 {
				b.WriteString(",")
			}
			b.WriteString("\n")
		}
		b.WriteString("]\n")
	}
	tensors("input", m.Inputs)
	tensors("output", m.Outputs)
	if len(m.PreferredBatchSizes) > 0 || m.MaxQueueDelayUS > 0 {
		b.WriteString("\ndynamic_batching {\n")
		if len(m.PreferredBatchSizes) > 0 {
			fmt.Fprintf(&b, "  preferred_batch_size: %s\n", dims(m.PreferredBatchSizes))
		}
		fmt.Fprintf(&b, "  max_queue_delay_microseconds: %d\n", m.MaxQueueDelayUS)
		if m.PreserveOrdering {
			b.WriteString("  preserve_ordering: true\n")
		}
		if m.QueueTimeoutUS > 0 {
			fmt.Fprintf(&b, "  default_queue_policy {\n    timeout_action: REJECT\n    default_timeout_microseconds: %d\n    allow_timeout_override: true\n  }\n", m.QueueTimeoutUS)
		}
		b.WriteString("}\n")
	}
	kind := "KIND_CPU"
	if len(m.GPUs) > 0 {
		kind = "KIND_GPU"
	}
	fmt.Fprintf(&b, "\ninstance_group [\n  {\n    count: %d\n    kind: %s\n", max(m.InstanceCount, 1), kind)
	if len(m.GPUs) > 0 {
		fmt.Fprintf(&b, "    gpus: %s\n", dims(m.GPUs))
	}
	b.WriteString("  }\n]\n")
	if len(m.WarmupDims) > 0 {
		b.WriteString("\nmodel_warmup [\n  {\n    name: \"warmup\"\n    batch_size: 1\n")
		for _, in := range m.Inputs { // in input order, for a stable file
			d, ok := m.WarmupDims[in.Name]
			if !ok {
				continue
			}
			fmt.Fprintf(&b, "    inputs {\n      key: %q\n      value: { dims: %s, data_type: %s, zero_data: true }\n    }\n", in.Name, dims(d), in.DataType)
		}
		fmt.Fprintf(&b, "    count: %d\n  }\n]\n", max(m.WarmupCount, 1))
	}
	return b.String()
}

func dims(ds []int) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = strconv.Itoa(d)
	}
	return "[ " + strings.Join(s, ", ") + " ]"
}

// TritonArgs is the tritonserver command line on a model repository:
// HTTP on the replica's port, gRPC off, strict readiness (ready only once
// every model loaded). Triton serves its metrics on a port of their own
// (--metrics-port, default 8002, on the HTTP address); MetricsPort sets
// it when not zero, bound to 127.0.0.1 (--metrics-address, Triton 23.05
// and later) so that only the agent on the node reads it, with the GPU
// metrics the adapter reads as GPU use.
func TritonArgs(repo string, l Launch) []string {
	argv := []string{"tritonserver", "--model-repository=" + repo}
	if l.Host != "" {
		argv = append(argv, "--http-address="+l.Host)
	}
	argv = append(argv, "--http-port="+strconv.Itoa(l.Port), "--allow-grpc=false", "--allow-metrics=true", "--strict-readiness=true")
	if l.MetricsPort > 0 {
		argv = append(argv, "--allow-gpu-metrics=true", "--metrics-address=127.0.0.1", "--metrics-port="+strconv.Itoa(l.MetricsPort))
	}
	return argv
}

// Argv is the command line of a replica: for vLLM and llama-server the
// generated one (VLLMArgs, LlamaServerArgs) from the version's LLM
// settings (settings, the JSON of metadata.serving.llm; empty for the
// runtime's defaults) on gpus GPUs, served under v.Endpoint (v.Model
// without one); for the other
// entries the Command template expanded.
func (e Entry) Argv(v Vars, settings json.RawMessage, gpus int) ([]string, error) {
	if e.Name == Triton {
		if v.WorkDir == "" {
			return nil, fmt.Errorf("catalogue entry %s: no replica directory for the model repository", e.Name)
		}
		return TritonArgs(path.Join(v.WorkDir, "repository"), Launch{Host: v.Host, Port: v.Port, MetricsPort: v.MetricsPort}), nil
	}
	if e.Name != VLLM && e.Name != LlamaServer {
		return e.Expand(v)
	}
	var s LLM
	if len(settings) > 0 {
		if err := json.Unmarshal(settings, &s); err != nil {
			return nil, fmt.Errorf("catalogue entry %s: llm settings: %w", e.Name, err)
		}
	}
	served := v.Endpoint
	if served == "" {
		served = v.Model
	}
	l := Launch{ModelDir: v.ModelDir, Host: v.Host, Port: v.Port, GPUs: gpus, ServedName: served}
	if sp := s.Speculative; sp != nil && sp.Model != "" && !DraftModelPath(sp.Model) {
		return nil, fmt.Errorf("catalogue entry %s: speculative.model %q is not a directory of the version's files", e.Name, sp.Model)
	}
	if e.Name == VLLM {
		return VLLMArgs(l, s), nil
	}
	return LlamaServerArgs(v.ModelDir+"/model.gguf", l, s), nil
}

// tritonPlatforms are the Triton backends by the model file a version
// holds.
var tritonPlatforms = map[string]string{
	"model.onnx": "onnxruntime_onnx",
	"model.plan": "tensorrt_plan",
	"model.pt":   "pytorch_libtorch",
}

// TritonRepository is the model repository of a Triton replica: its
// config.pbtxt (by path relative to the repository) and the link of the
// model's version 1 to the version's files (files, the names in its model
// directory). The platform follows the model file; the batching is the
// endpoint's, from the replica's settings (the built-in runtime's
// configuration, whose "batching" Triton's dynamic batcher takes: max
// batch size, preferred sizes, queue delay and timeout); the instances run
// on the replica's GPUs as it sees them (0..gpus-1), or on the CPU.
func TritonRepository(v Vars, files []string, settings json.RawMessage, gpus int) (cfg map[string]string, links map[string]string, err error) {
	name := v.Model
	if name == "" {
		return nil, nil, fmt.Errorf("catalogue entry %s: a model repository needs the model's name", Triton)
	}
	m := TritonModel{Name: name}
	for _, f := range files {
		if p, ok := tritonPlatforms[f]; ok {
			m.Platform = p
		}
	}
	if m.Platform == "" {
		return nil, nil, fmt.Errorf("catalogue entry %s: no model file Triton serves (one of model.onnx, model.plan, model.pt) among %q", Triton, files)
	}
	var s struct {
		Batching struct {
			MaxBatchSize        int   `json:"max_batch_size"`
			MaxQueueDelayUS     int   `json:"max_queue_delay_us"`
			PreferredBatchSizes []int `json:"preferred_batch_sizes"`
			QueueTimeoutMS      int   `json:"queue_timeout_ms"`
		} `json:"batching"`
	}
	if len(settings) > 0 {
		if err := json.Unmarshal(settings, &s); err != nil {
			return nil, nil, fmt.Errorf("catalogue entry %s: settings: %w", Triton, err)
		}
	}
	b := s.Batching
	m.MaxBatchSize, m.PreferredBatchSizes, m.MaxQueueDelayUS, m.QueueTimeoutUS = b.MaxBatchSize, b.PreferredBatchSizes, b.MaxQueueDelayUS, b.QueueTimeoutMS*1000
	for i := range gpus {
		m.GPUs = append(m.GPUs, i)
	}
	return map[string]string{path.Join(name, "config.pbtxt"): TritonConfig(m)}, map[string]string{path.Join(name, "1"): v.ModelDir}, nil
}
