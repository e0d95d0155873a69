package process

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/coder/quartz"
	"github.com/nats-io/nats.go"

	"modelplane/agent/catalog"
	"modelplane/busapi"
	"modelplane/internal/wait"
)

// standIn installs an executable called name on PATH that writes the
// arguments it was started with, one a line, to the file it returns, and
// then runs the fake runtime on the port that port (a shell expression
// over "$@") picks out. Tests using it are not parallel: PATH is the
// process's.
func standIn(t *testing.T, name, port, modelDir string) (argsFile string) {
	t.Helper()
	bin := t.TempDir()
	out := t.TempDir()
	// The runtime runs as nobody when the tests run as root.
	if err := os.Chmod(out, 0o777); err != nil {
		t.Fatal(err)
	}
	argsFile = filepath.Join(out, "args")
	script := `#!/bin/sh
printf '%s\n' "$@" > ` + argsFile + `
for a in "$@"; do
  case "$a" in
    ` + port + `
  esac
  prev="$a"
done
exec ` + fakeBin + ` -port "$port" -model-dir ` + modelDir + `
`
	if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	return argsFile
}

// argsRun are the arguments the stand-in was started with, once it was.
func argsRun(t *testing.T, file string) []string {
	t.Helper()
	var data []byte
	wait.Eventually(t, long, func() bool {
		var err error
		data, err = os.ReadFile(file)
		return err == nil && len(data) > 0
	}, "the stand-in never started")
	return strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
}

// heartbeats keeps the last heartbeat node published on NATS.
type heartbeats struct {
	mu   sync.Mutex
	last busapi.NodeStatus
}

func listen(t *testing.T, nc *nats.Conn, node string) *heartbeats {
	t.Helper()
	h := &heartbeats{}
	sub, err := nc.Subscribe(busapi.NodeStatusSubject(node), func(m *nats.Msg) {
		var st busapi.NodeStatus
		if json.Unmarshal(m.Data, &st) == nil {
			h.mu.Lock()
			h.last = st
			h.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return h
}

func (h *heartbeats) replica(id string) busapi.ReplicaStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.last.Replicas {
		if r.ID == id {
			return r
		}
	}
	return busapi.ReplicaStatus{}
}

// TestHeartbeatCarriesTritonsCommandAndConfig: the heartbeat a Triton
// replica's agent publishes carries the argv tritonserver was started
// with, exactly, and the config.pbtxt the driver wrote into its model
// repository, byte for byte, beside the link of version 1; neither the
// replica's token nor a credential of the operator's runtime environment
// is in it, while a setting such as the ONNX Runtime library path is.
func TestHeartbeatCarriesTritonsCommandAndConfig(t *testing.T) {
	models := openDir(t)
	if err := os.WriteFile(filepath.Join(models, "model.onnx"), []byte("onnx"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := standIn(t, "tritonserver", `--http-port=*) port="${a#--http-port=}" ;;`, models)
	nc, kv := agentEnv(t)
	state := t.TempDir()
	d := newDriver(t, state, quartz.NewMock(t), func(c *Config) {
		c.Catalog = map[string]catalog.Entry{catalog.Triton: catalog.Default()[catalog.Triton]}
		c.Resolve = func(context.Context, busapi.ReplicaSpec, string) (Launch, error) {
			return Launch{Runtime: catalog.Triton, ModelDir: models}, nil
		}
		c.Env = []string{"HF_TOKEN=hf_operator_secret", "MP_ONNXRUNTIME_LIB=/opt/onnxruntime/lib/libonnxruntime.so",
			"DATABASE_URL=postgres://app:operator_secret@db/x"}
	})
	a := startAgent(t, nc, "gpu-launch", t.TempDir(), d)
	hb := listen(t, nc, "gpu-launch")
	s := spec("r-triton-launch")
	s.Token = "replica-token-0123456789"
	s.Settings = []byte(`{"batching":{"max_batch_size":8,"preferred_batch_sizes":[4,8],"max_queue_delay_us":2000}}`)
	putDesired(t, kv, "gpu-launch", 1, s)
	wait.Eventually(t, long, func() bool {
		rs := hb.replica(s.ID)
		return rs.State == busapi.StateReady && rs.Launch != nil
	}, "no heartbeat with the replica ready and its launch: %v", wait.Show(func() any { return hb.replica(s.ID) }))
	l := hb.replica(s.ID).Launch

	ran := argsRun(t, args)
	if want := append([]string{"tritonserver"}, ran...); !slices.Equal(l.Argv, want) {
		t.Errorf("argv in the heartbeat = %q, want what ran: %q", l.Argv, want)
	}
	repo := filepath.Join(state, s.ID+".d", "repository")
	if !slices.Contains(l.Argv, "--model-repository="+repo) || l.Dir != repo {
		t.Errorf("launch dir %q, argv %q: want the model repository %s", l.Dir, l.Argv, repo)
	}
	cfg, err := os.ReadFile(filepath.Join(repo, "fraud", "config.pbtxt"))
	if err != nil {
		t.Fatal(err)
	}
	want := []busapi.LaunchFile{{Path: "fraud/1", Link: models}, {Path: "fraud/config.pbtxt", Content: string(cfg)}}
	if !slices.Equal(l.Files, want) || l.Truncated {
		t.Errorf("files in the heartbeat = %+v (truncated %t), want %+v", l.Files, l.Truncated, want)
	}
	if !strings.Contains(string(cfg), "preferred_batch_size: [ 4, 8 ]") {
		t.Errorf("config.pbtxt is not the endpoint's batching:\n%s", cfg)
	}
	// Triton does not check the token; the guard in front of it does, and
	// the runtime listens behind it on a port of its own.
	_, port, _ := net.SplitHostPort(hb.replica(s.ID).Addr)
	if slices.Contains(l.Argv, "--http-port="+port) {
		t.Errorf("argv %q serves on the guard's port %s", l.Argv, port)
	}
	raw, _ := json.Marshal(l)
	for _, secret := range []string{s.Token, "hf_operator_secret", "operator_secret"} {
		if strings.Contains(string(raw), secret) {
			t.Errorf("launch shows a secret %q: %s", secret, raw)
		}
	}
	// A credential is masked, and so is any other value the operator
	// added (a secret may have any name); the library path is a setting
	// the agent adds, shown as is.
	for _, kv := range []string{"HF_TOKEN=" + busapi.LaunchSecret, "DATABASE_URL=" + busapi.LaunchSecret, "MP_ONNXRUNTIME_LIB=/opt/onnxruntime/lib/libonnxruntime.so",
		"CUDA_VISIBLE_DEVICES=0", "MP_REPLICA_ID=" + s.ID} {
		if !slices.Contains(l.Env, kv) {
			t.Errorf("env %q lacks %s", l.Env, kv)
		}
	}
	// The guard checks the token: the runtime is not given it at all.
	for _, kv := range l.Env {
		if strings.HasPrefix(kv, "MP_REPLICA_TOKEN") {
			t.Errorf("env %q holds %s; a guarded runtime needs no token", l.Env, kv)
		}
	}
	if got := replicaStatus(a, s.ID).Launch; got == nil || !slices.Equal(got.Argv, l.Argv) {
		t.Errorf("agent status launch = %+v, want the heartbeat's", got)
	}
}

// TestStartingVLLMReplicaShowsItsGeneratedCommandLine: a vLLM replica
// reports its generated `vllm serve` line while it is still starting (vLLM
// takes minutes to load a model, and that is when an operator reads it):
// the seed's settings on the replica's two GPUs, exactly as vllm got them.
func TestStartingVLLMReplicaShowsItsGeneratedCommandLine(t *testing.T) {
	models := openDir(t)
	// The fake runtime answers no /v1/models: the replica stays starting.
	args := standIn(t, "vllm", `*) [ "$prev" = --port ] && port="$a" ;;`, models)
	d := newDriver(t, t.TempDir(), quartz.NewMock(t), func(c *Config) {
		c.Catalog = map[string]catalog.Entry{catalog.VLLM: catalog.Default()[catalog.VLLM]}
		c.Resolve = func(_ context.Context, s busapi.ReplicaSpec, _ string) (Launch, error) {
			return Launch{Runtime: catalog.VLLM, GPU: true, ModelDir: models}, nil
		}
	})
	s := spec("r-vllm-launch")
	s.Endpoint, s.Task, s.Runtime = "chat", "llm", catalog.VLLM
	s.Slots = []busapi.Slot{{GPU: 0}, {GPU: 1}}
	s.Settings = []byte(`{"dtype":"float16","max_model_len":32768,"gpu_memory_utilization":0.9,"max_num_seqs":256,"prefix_caching":true}`)
	r := start(t, d, s, "")
	ran := argsRun(t, args)
	o := observe(t, r)
	if o.Ready || o.Launch == nil {
		t.Fatalf("observation = %+v, want starting with its launch", o)
	}
	_, port, _ := net.SplitHostPort(r.Addr())
	want := []string{"vllm", "serve", models, "--served-model-name", "chat", "--host", "127.0.0.1", "--tensor-parallel-size", "2",
		"--dtype", "float16", "--max-model-len", "32768", "--gpu-memory-utilization", "0.90", "--max-num-seqs", "256",
		"--enable-prefix-caching", "--port", port}
	if !slices.Equal(o.Launch.Argv, want) {
		t.Errorf("argv = %q, want %q", o.Launch.Argv, want)
	}
	if !slices.Equal(o.Launch.Argv[1:], ran) {
		t.Errorf("argv = %q, but vllm ran with %q", o.Launch.Argv, ran)
	}
	if len(o.Launch.Files) != 0 || o.Launch.Dir != "" {
		t.Errorf("vLLM launch has files %+v in %q, want none", o.Launch.Files, o.Launch.Dir)
	}
	if !slices.Contains(o.Launch.Env, "CUDA_VISIBLE_DEVICES=0,1") {
		t.Errorf("env %q lacks the replica's GPUs", o.Launch.Env)
	}
}

// TestCredentialName: a launch masks a variable whose name says it holds
// a credential, whoever set it.
func TestCredentialName(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		want bool
	}{
		{"HF_TOKEN", true},
		{"MP_REPLICA_TOKEN", true},
		{"AWS_SECRET_ACCESS_KEY", true},
		{"PGPASSWORD", true},
		{"OTEL_EXPORTER_OTLP_HEADERS", true},
		{"api_key", true},
		{"MP_ONNXRUNTIME_LIB", false},
		{"CUDA_VISIBLE_DEVICES", false},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", false},
		{"MP_REPLICA_ID", false},
	} {
		if got := credentialName(c.name); got != c.want {
			t.Errorf("credentialName(%q) = %t, want %t", c.name, got, c.want)
		}
	}
}
