package catalog

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// VLLMVersion is the vLLM release whose `vllm serve` flags LaunchVLLM
// writes (docs/llm-runtimes.md lists them). Flags change between
// releases: --speculative-model, in the seed's launch line, is gone; the
// draft model now goes in --speculative-config.
const VLLMVersion = "0.11.0"

// LLM is what an LLM version's serving metadata (registry.ServingLLM,
// same JSON) and its placement say about how to launch its runtime. Zero
// fields are left to the runtime's own defaults and produce no flag.
type LLM struct {
	// TensorParallel is the number of GPUs one replica shards the model
	// over; 0 means the replica's GPU count.
	TensorParallel       int          `json:"tensor_parallel,omitempty"`
	Dtype                string       `json:"dtype,omitempty"`
	MaxModelLen          int          `json:"max_model_len,omitempty"`
	GPUMemoryUtilization float64      `json:"gpu_memory_utilization,omitempty"`
	MaxNumSeqs           int          `json:"max_num_seqs,omitempty"`
	PrefixCaching        bool         `json:"prefix_caching,omitempty"`
	Quantization         string       `json:"quantization,omitempty"`
	Speculative          *Speculative `json:"speculative,omitempty"`
	// GPUs is the replica's GPU count, set by the agent from its slots.
	GPUs int `json:"-"`
}

// Speculative is speculative decoding: a draft model (a path inside the
// version's files) or a method such as "ngram", and how many tokens it
// proposes per step.
type Speculative struct {
	Method    string `json:"method,omitempty"`
	Model     string `json:"model,omitempty"`
	NumTokens int    `json:"num_speculative_tokens"`
}

// TritonModel is what a Triton model configuration needs beyond the LLM
// fields: the platform (backend), the endpoint's batching settings and
// the instance group.
type TritonModel struct {
	Platform            string `json:"platform"`
	MaxBatchSize        int    `json:"max_batch_size"`
	PreferredBatchSizes []int  `json:"preferred_batch_sizes,omitempty"`
	MaxQueueDelayUS     int    `json:"max_queue_delay_us,omitempty"`
	// Instances per GPU; GPUs are the device indexes as the runtime sees
	// them (0..n-1 under CUDA_VISIBLE_DEVICES), empty for a CPU instance.
	Instances int   `json:"instances,omitempty"`
	GPUs      []int `json:"-"`
	// Warmup are the inputs of the warm-up request Triton runs before it
	// reports ready: name, data type (TYPE_FP32…) and dims.
	Warmup []TensorSpec `json:"warmup,omitempty"`
}

// TensorSpec is one warm-up input.
type TensorSpec struct {
	Name     string `json:"name"`
	DataType string `json:"data_type"`
	Dims     []int  `json:"dims"`
}

// LaunchVLLM is the `vllm serve` command line of a replica: the model
// directory, its port and host, the served model name, and one flag per
// setting that is set, in the order of the seed's launch line.
func LaunchVLLM(v Vars, s LLM) []string {
	argv := []string{"vllm", "serve", v.ModelDir}
	if v.Host != "" {
		argv = append(argv, "--host", v.Host)
	}
	if v.Endpoint != "" {
		argv = append(argv, "--served-model-name", v.Endpoint)
	}
	tp := s.TensorParallel
	if tp == 0 {
		tp = s.GPUs
	}
	if tp > 0 {
		argv = append(argv, "--tensor-parallel-size", strconv.Itoa(tp))
	}
	if s.Dtype != "" {
		argv = append(argv, "--dtype", s.Dtype)
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
		cfg := map[string]any{"num_speculative_tokens": sp.NumTokens}
		if sp.Method != "" {
			cfg["method"] = sp.Method
		}
		if sp.Model != "" {
			cfg["model"] = filepath.Join(v.ModelDir, sp.Model)
		}
		b, _ := json.Marshal(cfg) // a map of strings and ints always encodes
		argv = append(argv, "--speculative-config", string(b))
	}
	return append(argv, "--port", strconv.Itoa(v.Port))
}

// LaunchLlamaServer is llama.cpp's `llama-server` command line: the GGUF
// file, host and port, parallel sequences (slots), context length, the
// Prometheus endpoint, and every layer offloaded when the replica has a
// GPU.
func LaunchLlamaServer(v Vars, s LLM) []string {
	argv := []string{"llama-server", "-m", filepath.Join(v.ModelDir, "model.gguf"), "--host", v.Host, "--port", strconv.Itoa(v.Port)}
	if v.Endpoint != "" {
		argv = append(argv, "--alias", v.Endpoint)
	}
	if s.MaxNumSeqs > 0 {
		argv = append(argv, "--parallel", strconv.Itoa(s.MaxNumSeqs))
	}
	if s.MaxModelLen > 0 {
		// -c is the total context, shared by the parallel slots.
		argv = append(argv, "-c", strconv.Itoa(s.MaxModelLen*max(s.MaxNumSeqs, 1)))
	}
	argv = append(argv, "--threads", strconv.Itoa(max(v.Threads, 1)), "--metrics")
	if s.GPUs > 0 {
		argv = append(argv, "-ngl", "999")
	}
	return argv
}

// LaunchTriton is `tritonserver` on a model repository, with gRPC off so
// that one HTTP port is all a replica holds.
func LaunchTriton(v Vars, repository string) []string {
	return []string{"tritonserver", "--model-repository=" + repository, "--http-address=" + v.Host,
		"--http-port=" + strconv.Itoa(v.Port), "--allow-grpc=false", "--allow-metrics=true",
		"--metrics-config=summary_latencies=true"}
}

// TritonConfig is the config.pbtxt of a model in a Triton repository:
// platform, batch size, dynamic batching with its preferred sizes and
// queue delay, the instance group and a warm-up request of zeros.
func TritonConfig(name string, t TritonModel) (string, error) {
	if t.Platform == "" {
		return "", fmt.Errorf("triton config of %s: no platform", name)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "name: %q\nplatform: %q\nmax_batch_size: %d\n", name, t.Platform, max(t.MaxBatchSize, 0))
	if t.MaxBatchSize > 0 {
		b.WriteString("dynamic_batching {\n")
		if len(t.PreferredBatchSizes) > 0 {
			fmt.Fprintf(&b, "  preferred_batch_size: [ %s ]\n", joinInts(t.PreferredBatchSizes))
		}
		if t.MaxQueueDelayUS > 0 {
			fmt.Fprintf(&b, "  max_queue_delay_microseconds: %d\n", t.MaxQueueDelayUS)
		}
		b.WriteString("}\n")
	}
	b.WriteString("instance_group [\n  {\n")
	fmt.Fprintf(&b, "    count: %d\n", max(t.Instances, 1))
	if len(t.GPUs) > 0 {
		fmt.Fprintf(&b, "    kind: KIND_GPU\n    gpus: [ %s ]\n", joinInts(t.GPUs))
	} else {
		b.WriteString("    kind: KIND_CPU\n")
	}
	b.WriteString("  }\n]\n")
	if len(t.Warmup) > 0 {
		b.WriteString("model_warmup [\n  {\n    name: \"warmup\"\n    batch_size: 1\n")
		for _, in := range t.Warmup {
			fmt.Fprintf(&b, "    inputs {\n      key: %q\n      value: { dims: [ %s ], data_type: %s, zero_data: true }\n    }\n",
				in.Name, joinInts(in.Dims), in.DataType)
		}
		b.WriteString("    count: 3\n  }\n]\n")
	}
	return b.String(), nil
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

// Launch is what the driver runs for a replica: the command line and, for
// Triton, the files of its model repository (paths relative to
// Vars.WorkDir, the replica's own directory) and the link of the model's
// version directory to the version's files.
type Launch struct {
	Argv  []string
	Files map[string]string
	Links map[string]string
}

// Launch builds the replica's command line. vLLM, llama-server and Triton
// are generated from the replica's settings (an LLM, or for Triton a
// TritonModel, as JSON in proto.ReplicaSpec.Settings) and its GPU count;
// other entries expand their Command template.
func (e Entry) Launch(v Vars, settings json.RawMessage, gpus int) (Launch, error) {
	switch e.Name {
	case VLLM, LlamaServer:
		var s LLM
		if len(settings) > 0 {
			if err := json.Unmarshal(settings, &s); err != nil {
				return Launch{}, fmt.Errorf("catalogue entry %s: settings: %w", e.Name, err)
			}
		}
		s.GPUs = gpus
		if e.Name == VLLM {
			return Launch{Argv: LaunchVLLM(v, s)}, nil
		}
		return Launch{Argv: LaunchLlamaServer(v, s)}, nil
	case Triton:
		t := TritonModel{Platform: "onnxruntime_onnx"}
		if len(settings) > 0 {
			if err := json.Unmarshal(settings, &t); err != nil {
				return Launch{}, fmt.Errorf("catalogue entry %s: settings: %w", e.Name, err)
			}
		}
		for i := range gpus {
			t.GPUs = append(t.GPUs, i)
		}
		name := v.Model
		if name == "" {
			name = "model"
		}
		cfg, err := TritonConfig(name, t)
		if err != nil {
			return Launch{}, err
		}
		if v.WorkDir == "" {
			return Launch{}, fmt.Errorf("catalogue entry %s: no directory for the model repository", e.Name)
		}
		repo := filepath.Join(v.WorkDir, "repository")
		return Launch{
			Argv:  LaunchTriton(v, repo),
			Files: map[string]string{filepath.Join("repository", name, "config.pbtxt"): cfg},
			Links: map[string]string{filepath.Join("repository", name, "1"): v.ModelDir},
		}, nil
	}
	argv, err := e.Expand(v)
	return Launch{Argv: argv}, err
}
