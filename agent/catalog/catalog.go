package catalog

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
)

// Runtime names of the catalogue.
const (
	Builtin     = "builtin"
	BuiltinLLM  = "builtin-llm"
	VLLM        = "vllm"
	Triton      = "triton"
	LlamaServer = "llama-server"
)

// Metrics adapters: how an entry's metrics become an Observation's fields.
const (
	// AdapterTriton reads Triton's nv_inference_* names, which the built-in
	// runtime exports too, so dashboards and the autoscaler read both alike.
	AdapterTriton = "triton"
	// AdapterVLLM reads vLLM's vllm:* names (queue, running, KV use).
	AdapterVLLM = "vllm"
	// AdapterLlamaCPP reads llama-server's llamacpp:* names.
	AdapterLlamaCPP = "llamacpp"
)

// Devices says how an entry is told which accelerators it owns.
type Devices string

const (
	// DevicesNone: a CPU runtime. The driver sets CUDA_VISIBLE_DEVICES to
	// the empty string, so that a library linked with CUDA never grabs a
	// GPU placement gave to another replica.
	DevicesNone Devices = "none"
	// DevicesCUDAEnv: CUDA_VISIBLE_DEVICES holds the replica's GPU indexes
	// or MIG device ids, comma-separated; the runtime sees them as devices
	// 0..n-1. vLLM, Triton and llama.cpp all honour it.
	DevicesCUDAEnv Devices = "cuda-env"
)

// Entry is how to run one runtime as a child process.
type Entry struct {
	Name string
	// Command is the argv template. Each element may hold placeholders,
	// replaced by Expand: {self} (the modelplane binary), {model_dir},
	// {host}, {port}, {threads}, {model} (the replica's model name),
	// {replica} (its id) and {metrics_port} (MetricsPort's port). The port and model directory are always passed
	// on the command line, never through the environment, so that `ps`
	// shows what a replica serves.
	Command []string
	// Env is added to the runtime's environment, after the agent's
	// configured Env so that it wins: what the runtime must run with
	// whatever the node's settings say (vLLM: HF_HUB_OFFLINE=1, so it never
	// fetches a model from the hub, only loads the version's files).
	Env []string
	// Program is the executable the entry runs, which a node must have on
	// PATH to run it (the driver looks it up before a start, and lists the
	// entries it has in its heartbeat); empty for the agent's own binary.
	// vLLM, Triton and llama-server build their command lines from the
	// version's settings (Argv), not from Command.
	Program string
	// Devices says how accelerators are passed.
	Devices Devices
	// Health answers 200 while the process lives (liveness); Ready answers
	// 200 once the model is loaded and warmed up (readiness); Metrics is
	// the Prometheus text endpoint the adapter reads.
	Health  string
	Ready   string
	Metrics string
	// ReadyLists says the ready path is an OpenAI model list
	// ({"data":[{"id":…}]}) that must name the replica's model: vLLM
	// answers /v1/models once its engine runs, and the model it lists is
	// what it serves. Ready may hold {model}, as Triton's per-model
	// /v2/models/{model}/ready does.
	ReadyLists bool
	// Adapter names the metrics adapter (AdapterTriton, …).
	Adapter string
	// ChecksToken says the runtime itself refuses requests without the
	// replica's token (busapi.ReplicaTokenHeader, given to it on a pipe
	// named by MP_REPLICA_TOKEN_FD), as the built-in runtime does. The
	// agent fronts every other runtime with a guard of its own that checks
	// it, and gives that runtime no token.
	ChecksToken bool
	// MetricsPort says the runtime serves Metrics on a port of its own,
	// not on the port gateways reach (Triton's --metrics-port). The
	// driver allocates it beside the replica's port, passes it as
	// Vars.MetricsPort, has the runtime listen for it on loopback only
	// and scrapes Metrics there: an agent-only port, which the token
	// guard neither forwards nor lets through.
	MetricsPort bool
	// Image is the container image the kubernetes driver runs the entry
	// from (the process driver ignores it): the runtime's own published
	// image, or modelplane's for the built-in runtime. The defaults name
	// public images; an installation that mirrors them, or pins other
	// tags, replaces them with SetImages (the agent's setting).
	Image string
}

// ReadyPath is the entry's ready path for a replica serving model.
func (e Entry) ReadyPath(model string) string {
	return strings.ReplaceAll(e.Ready, "{model}", url.PathEscape(model))
}

// Listed reports whether an OpenAI model list (GET /v1/models) names
// model among its ids.
func Listed(body io.Reader, model string) (bool, error) {
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(body, 1<<20)).Decode(&list); err != nil {
		return false, fmt.Errorf("model list: %w", err)
	}
	for _, m := range list.Data {
		if m.ID == model {
			return true, nil
		}
	}
	return false, nil
}

// Probes are the entry's health, readiness and metrics paths of a
// replica serving model: what the
// agent asks of a runtime, open without the replica's token. Metrics
// served on a port of their own (MetricsPort) are not among them.
func (e Entry) Probes(model string) []string {
	metrics := e.Metrics
	if e.MetricsPort {
		metrics = ""
	}
	var out []string
	for _, p := range []string{e.Health, e.ReadyPath(model), metrics} {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Vars are the values of an entry's placeholders.
type Vars struct {
	Self     string
	ModelDir string
	Host     string
	Port     int
	Threads  int
	Model    string
	Replica  string
	// Endpoint is the replica's endpoint: the model name an OpenAI client
	// sends through the gateway (which passes the body on as it is), so
	// vLLM and llama-server serve under it.
	Endpoint string
	// WorkDir is the replica's own directory on the node, where Triton's
	// model repository goes (TritonRepository).
	WorkDir string
	// MetricsPort is the runtime's own metrics port on 127.0.0.1, for an
	// entry with MetricsPort; 0 otherwise.
	MetricsPort int
}

// Default images of the entries. ModelplaneImage is what `make images`
// builds (the same binary runs the platform and the built-in runtime); an
// installation pushes it to its own registry and names it there.
const (
	ModelplaneImage  = "modelplane/modelplane:latest"
	VLLMImage        = "docker.io/vllm/vllm-openai:v0.11.0"
	TritonImage      = "nvcr.io/nvidia/tritonserver:25.09-py3"
	LlamaServerImage = "ghcr.io/ggml-org/llama.cpp:server-cuda"
)

// SetImages replaces entries' images from an installation's setting,
// "name=image" pairs separated by commas, such as
// "vllm=registry.corp/vllm-openai:v0.11.0,builtin=registry.corp/modelplane:1.4".
// An unknown entry name or an empty image is an error that names it.
func SetImages(entries map[string]Entry, setting string) error {
	for _, pair := range strings.Split(setting, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		name, image, ok := strings.Cut(pair, "=")
		name, image = strings.TrimSpace(name), strings.TrimSpace(image)
		if !ok || image == "" {
			return fmt.Errorf("runtime images: %q is not name=image", pair)
		}
		e, found := entries[name]
		if !found {
			return fmt.Errorf("runtime images: %w named %q", ErrUnknown, name)
		}
		e.Image = image
		entries[name] = e
	}
	return nil
}

// ErrUnknown means no catalogue entry serves a runtime.
var ErrUnknown = errors.New("no catalogue entry")

// Default is the catalogue as shipped. Callers get a copy and may add or
// replace entries (tests run a runtime of their own under a name).
func Default() map[string]Entry {
	return map[string]Entry{
		// The built-in runtime with a GGUF model (runtime/llmserve): the
		// built-in command; its metrics are in vLLM's names.
		BuiltinLLM: {
			Name:        BuiltinLLM,
			Image:       ModelplaneImage,
			Command:     []string{"{self}", "runtime", "--model-dir", "{model_dir}", "--port", "{port}"},
			Devices:     DevicesNone,
			Health:      "/v2/health/live",
			Ready:       "/v2/health/ready",
			Metrics:     "/metrics",
			Adapter:     AdapterVLLM,
			ChecksToken: true,
		},
		Builtin: {
			Name:    Builtin,
			Image:   ModelplaneImage,
			Command: []string{"{self}", "runtime", "--model-dir", "{model_dir}", "--port", "{port}"},
			Devices: DevicesNone,
			Health:  "/v2/health/live",
			Ready:   "/v2/health/ready",
			Metrics: "/metrics",
			Adapter: AdapterTriton,
			// runtime.Options.Token, from MP_REPLICA_TOKEN_FD.
			ChecksToken: true,
		},
		// vLLM's OpenAI server: /health answers once the engine is up, which
		// for vLLM is also when the model is loaded; /v1/models is served
		// only then, so it is the readiness path.
		VLLM: {
			Name:       VLLM,
			Image:      VLLMImage,
			Program:    "vllm",
			Env:        []string{"HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1"},
			Devices:    DevicesCUDAEnv,
			Health:     "/health",
			Ready:      "/v1/models",
			ReadyLists: true,
			Metrics:    "/metrics",
			Adapter:    AdapterVLLM,
		},
		// Triton with one model repository: HTTP on the replica's port,
		// gRPC off, and its metrics (served on a port of their own) on a
		// second port the agent allocates, bound to loopback for the
		// agent alone.
		Triton: {
			Name:        Triton,
			Image:       TritonImage,
			Program:     "tritonserver",
			Devices:     DevicesCUDAEnv,
			Health:      "/v2/health/live",
			Ready:       "/v2/models/{model}/ready",
			Metrics:     "/metrics",
			Adapter:     AdapterTriton,
			MetricsPort: true,
		},
		// llama.cpp's server with a GGUF file in the model directory
		// (model.gguf); --metrics turns its Prometheus endpoint on. /health
		// answers 503 while the model loads, so it serves as both paths.
		LlamaServer: {
			Name:    LlamaServer,
			Image:   LlamaServerImage,
			Program: "llama-server",
			Devices: DevicesCUDAEnv,
			Health:  "/health",
			Ready:   "/health",
			Metrics: "/metrics",
			Adapter: AdapterLlamaCPP,
		},
	}
}

// Name is the catalogue entry that serves a registry runtime (a version's
// metadata.runtime) on a node with GPUs (gpu) or without. The classic
// runtimes on CPU are the built-in runtime's; on a GPU ONNX and
// TensorRT-LLM go to Triton, which has backends for both.
func Name(registryRuntime string, gpu bool) (string, error) {
	switch registryRuntime {
	case "xgboost", "lightgbm", "tokenizer":
		// tokenizer: the built-in runtime's tokenizer, which turns text
		// into a tokenizer.json's ids on CPU, whatever the node.
		return Builtin, nil
	case "onnxruntime":
		if gpu {
			return Triton, nil
		}
		return Builtin, nil
	case "triton", "tensorrt-llm":
		return Triton, nil
	case "vllm":
		return VLLM, nil
	case "llamacpp", LlamaServer:
		return LlamaServer, nil
	case Builtin:
		return Builtin, nil
	case BuiltinLLM:
		// The built-in runtime serving a GGUF model directory with its
		// LLM engine: the same command, metrics in vLLM's names.
		return BuiltinLLM, nil
	}
	return "", fmt.Errorf("%w for runtime %q (gpu %t)", ErrUnknown, registryRuntime, gpu)
}

// Expand fills the command template. An unknown placeholder is an error,
// so a typo in an entry fails the start with its name instead of passing a
// literal "{prot}" to the runtime.
func (e Entry) Expand(v Vars) ([]string, error) {
	if len(e.Command) == 0 {
		return nil, fmt.Errorf("catalogue entry %s has no command", e.Name)
	}
	vals := map[string]string{
		"self": v.Self, "model_dir": v.ModelDir, "host": v.Host, "port": strconv.Itoa(v.Port),
		"threads": strconv.Itoa(max(v.Threads, 1)), "model": v.Model, "replica": v.Replica,
		"metrics_port": strconv.Itoa(v.MetricsPort),
	}
	out := make([]string, len(e.Command))
	for i, arg := range e.Command {
		var b strings.Builder
		rest := arg
		for {
			open := strings.IndexByte(rest, '{')
			if open < 0 {
				b.WriteString(rest)
				break
			}
			end := strings.IndexByte(rest[open:], '}')
			if end < 0 {
				return nil, fmt.Errorf("catalogue entry %s: unclosed placeholder in %q", e.Name, arg)
			}
			name := rest[open+1 : open+end]
			val, ok := vals[name]
			if !ok {
				return nil, fmt.Errorf("catalogue entry %s: unknown placeholder {%s} in %q", e.Name, name, arg)
			}
			b.WriteString(rest[:open])
			b.WriteString(val)
			rest = rest[open+end+1:]
		}
		out[i] = b.String()
	}
	if out[0] == "" {
		return nil, fmt.Errorf("catalogue entry %s: empty program name", e.Name)
	}
	return out, nil
}
