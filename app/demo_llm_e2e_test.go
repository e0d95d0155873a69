package app

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"modelplane/busapi"
	"modelplane/internal/wait"
)

// openaiNodeVersion is the npm openai package the test runs, installed by
// scripts/install-deps.sh test into the cache directory outside the clone
// (the gateway's OpenAI client test runs the same one).
const openaiNodeVersion = "6.10.0"

// openaiModule is the installed package's directory: $MP_OPENAI_NODE_DIR
// (a node_modules parent) or the cache install-deps.sh fills.
func openaiModule(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("MP_OPENAI_NODE_DIR")
	if dir == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				t.Fatal(err)
			}
			cache = filepath.Join(home, ".cache")
		}
		dir = filepath.Join(cache, "modelplane", "openai-node-"+openaiNodeVersion)
	}
	mod := filepath.Join(dir, "node_modules", "openai")
	if _, err := os.Stat(filepath.Join(mod, "package.json")); err != nil {
		t.Fatalf("the npm openai package %s is not installed at %s (run scripts/install-deps.sh test): %v", openaiNodeVersion, mod, err)
	}
	return mod
}

type llmUsage struct {
	Prompt     int `json:"prompt_tokens"`
	Completion int `json:"completion_tokens"`
	Total      int `json:"total_tokens"`
}

type llmAnswer struct {
	Content      string    `json:"content"`
	FinishReason string    `json:"finish_reason"`
	Model        string    `json:"model"`
	Chunks       int       `json:"chunks"`
	Usage        *llmUsage `json:"usage"`
}

// TestDemoLLMOpenAIClient runs dev and has the unmodified npm openai
// client, with baseURL the dev gateway's /v1, call chat-cpu: the demo's
// real GGUF version (chat-assistant v44-cpu) that a CPU node serves with
// the built-in LLM engine through the process driver. The same seeded
// request gives the same text twice and streamed, and the usage counts
// add up and agree.
func TestDemoLLMOpenAIClient(t *testing.T) {
	t.Parallel()
	oneDevAtATime(t)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not on PATH (scripts/install-deps.sh test installs it): %v", err)
	}
	mod := openaiModule(t)
	dir, err := os.MkdirTemp("", "mp-dev-llm-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() { os.RemoveAll(dir) })
	// Two cores a node: fraud-scoring's two replicas take one each, chat-cpu
	// the other.
	d, stop := startDevWith(t, filepath.Join(dir, ".modelplane"), func(c *DevConfig) { c.CPUNodeCores = 2 })
	defer stop()
	env := readEnvFile(d.EnvFile)
	key := env["MP_SEARCH_KEY"]
	waitServing(t, env, DemoLLMEndpoint, key, 1, busapi.ProfileCPU)
	var last string
	wait.Eventually(t, 60*time.Second, func() bool {
		env = readEnvFile(d.EnvFile)
		if env["MP_GATEWAY"] == "" {
			return false
		}
		resp, body := postJSON(t, env["MP_GATEWAY"]+"/v1/chat/completions", key,
			`{"model":"`+DemoLLMEndpoint+`","messages":[{"role":"user","content":"hi"}],"max_tokens":1}`)
		last = resp.Status + " " + body
		return resp.StatusCode == http.StatusOK
	}, "the gateway never routed %s: %v", DemoLLMEndpoint, wait.Show(func() any { return last }))

	cmd := exec.CommandContext(t.Context(), node, filepath.Join("testdata", "openai_llm.cjs"))
	cmd.Env = append(os.Environ(), "MP_OPENAI_MODULE="+mod, "MP_BASE_URL="+env["MP_GATEWAY"]+"/v1", "MP_KEY="+key, "MP_MODEL="+DemoLLMEndpoint)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("node openai_llm.cjs: %v\n%s", err, stderr.Bytes())
	}
	var out struct{ First, Second, Stream llmAnswer }
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("client output %s: %v", raw, err)
	}
	t.Logf("chat-cpu answered %q (%+v)", out.First.Content, *out.First.Usage)
	if out.First.Content == "" || out.First.Usage == nil || out.First.Usage.Completion == 0 {
		t.Fatalf("first answer %+v; want generated tokens and usage", out.First)
	}
	if out.Second.Content != out.First.Content || out.Stream.Content != out.First.Content {
		t.Errorf("same seed gave %q, %q and streamed %q; want one text", out.First.Content, out.Second.Content, out.Stream.Content)
	}
	for name, a := range map[string]llmAnswer{"first": out.First, "second": out.Second, "stream": out.Stream} {
		u := a.Usage
		if u == nil {
			t.Errorf("%s: no usage", name)
			continue
		}
		if u.Prompt == 0 || u.Prompt+u.Completion != u.Total || *u != *out.First.Usage {
			t.Errorf("%s usage %+v; want prompt+completion = total and equal to the first's %+v", name, *u, *out.First.Usage)
		}
	}
	if out.Stream.Chunks < 3 || out.Stream.FinishReason != out.First.FinishReason {
		t.Errorf("stream had %d chunks, finish %q; want the text in chunks, then the usage, finishing as the first (%q)",
			out.Stream.Chunks, out.Stream.FinishReason, out.First.FinishReason)
	}
	if out.First.Model != DemoLLMEndpoint {
		t.Errorf("model %q; want the endpoint %s", out.First.Model, DemoLLMEndpoint)
	}
}
