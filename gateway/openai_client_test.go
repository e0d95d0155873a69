package gateway_test

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"modelplane/gateway"
	"modelplane/internal/wait"
	"modelplane/sim/replica"
)

// openaiNodeVersion is the npm openai package the test runs, installed by
// scripts/install-deps.sh test into the cache directory outside the clone.
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

// startLLMReplica runs a sim LLM replica with profile.
func startLLMReplica(t *testing.T, version, profile string) (*replica.Server, string) {
	t.Helper()
	s, err := replica.New(replica.Config{ReplicaID: "r-" + version + "-" + rand.Text()[:6], Endpoint: "e", Version: version,
		Task: replica.TaskLLM, Profile: json.RawMessage(profile), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	addr, err := s.Start(t.Context(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	wait.Eventually(t, 10*time.Second, s.Ready, "waiting for replica ready")
	return s, addr.String()
}

// openaiError is what the script reports of a failed call.
type openaiError struct {
	Class      string  `json:"class"`
	Status     int     `json:"status"`
	Type       *string `json:"type"`
	Code       *string `json:"code"`
	Param      *string `json:"param"`
	Message    string  `json:"message"`
	RetryAfter *string `json:"retry_after"`
}

type openaiUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// TestOpenAIClient runs the official OpenAI Node library against a real
// gateway with sim replicas, through base URL <gateway>/v1 and the endpoint
// as model: plain and streamed chat (with include_usage), completions,
// models.list, a stream cancelled mid-way, and each error it must get in
// OpenAI's shape.
func TestOpenAIClient(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not on PATH (scripts/install-deps.sh test installs it): %v", err)
	}
	mod := openaiModule(t)

	e := newEnv(t)
	// A context window of 2,048 tokens: the 40,000-character prompt (about
	// 10,000 tokens) cannot run.
	chatRep, chatAddr := startLLMReplica(t, "v1", `{"prefill_ms_per_token":0.05,"decode_base_ms":2,"decode_ms_per_seq":0.1,"kv_mb_per_token":0.8,"usable_gb":13,"max_model_len":2048}`)
	// 4,000 tokens at 20 ms each: the stream is cancelled long before it ends.
	slowRep, slowAddr := startLLMReplica(t, "v1", `{"prefill_ms_per_token":0.05,"decode_base_ms":20,"decode_ms_per_seq":0.1,"kv_mb_per_token":0.8,"usable_gb":13}`)
	e.putRoute(t, route("support-chat", "search", "llm", 1, ver("v1", 100, chatAddr)))
	e.putRoute(t, route("slow-chat", "search", "llm", 1, ver("v1", 100, slowAddr)))
	limited := route("limited-chat", "search", "llm", 1, ver("v1", 100, chatAddr))
	limited.RateLimitRPS, limited.RateLimitBurst = 0.001, 1 // one request, then 429 for ~1,000 s
	e.putRoute(t, limited)
	e.putRoute(t, route("fraud", "search", "classification", 1, ver("v3", 100, startReplica(t, "v3", replica.TaskClassification))))
	e.putRoute(t, route("other-chat", "payments", "llm", 1, ver("v1", 100, chatAddr)))
	key := e.newKey(t, "search", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{})
	wait.Eventually(t, 10*time.Second, func() bool {
		_, ok := g.RouteGeneration("other-chat")
		return ok && g.Ready()
	}, "waiting for the gateway's routes")

	cmd := exec.CommandContext(t.Context(), node, filepath.Join("testdata", "openai_client.cjs"))
	cmd.Env = append(os.Environ(), "MP_OPENAI_MODULE="+mod, "MP_BASE_URL="+g.url+"/v1", "MP_KEY="+key,
		"MP_MODEL=support-chat", "MP_LIMITED=limited-chat", "MP_CANCEL=slow-chat", "MP_PREDICT=fraud")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("node openai_client.cjs: %v\n%s", err, stderr.Bytes())
	}
	var out struct {
		Version string `json:"version"`
		Chat    struct {
			Object, Content, Role string
			FinishReason          string      `json:"finish_reason"`
			Usage                 openaiUsage `json:"usage"`
		} `json:"chat"`
		Stream struct {
			Chunks       int          `json:"chunks"`
			Content      string       `json:"content"`
			FinishReason string       `json:"finish_reason"`
			Usage        *openaiUsage `json:"usage"`
			UsageChoices *int         `json:"usage_choices"`
			AfterUsage   int          `json:"after_usage"`
		} `json:"stream"`
		Completion struct {
			Object, Text string
			FinishReason string      `json:"finish_reason"`
			Usage        openaiUsage `json:"usage"`
		} `json:"completion"`
		CompletionStream struct {
			Text  string       `json:"text"`
			Usage *openaiUsage `json:"usage"`
		} `json:"completion_stream"`
		Models []struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			OwnedBy string `json:"owned_by"`
		} `json:"models"`
		Retrieved string `json:"retrieved"`
		Cancel    struct {
			Chunks  int  `json:"chunks"`
			Aborted bool `json:"aborted"`
		} `json:"cancel"`
		Err401        openaiError `json:"err_401"`
		Err404        openaiError `json:"err_404"`
		Err404Predict openaiError `json:"err_404_predict"`
		ErrN          openaiError `json:"err_n"`
		ErrContext    openaiError `json:"err_context"`
		LimitedFirst  string      `json:"limited_first"`
		Err429        openaiError `json:"err_429"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("script output %q: %v", raw, err)
	}
	if out.Version != openaiNodeVersion {
		t.Errorf("openai library %q; want %s", out.Version, openaiNodeVersion)
	}

	if c := out.Chat; c.Object != "chat.completion" || c.Role != "assistant" || c.Content == "" || c.FinishReason != "length" ||
		c.Usage.CompletionTokens != 5 || c.Usage.TotalTokens != c.Usage.PromptTokens+5 {
		t.Errorf("chat = %+v; want a 5-token assistant message ending at length", c)
	}
	if s := out.Stream; s.Usage == nil || s.Usage.CompletionTokens != 6 || s.UsageChoices == nil || *s.UsageChoices != 0 ||
		s.AfterUsage != 0 || s.FinishReason != "length" || s.Content == "" {
		t.Errorf("stream = %+v; want 6 tokens and a last chunk of no choices with their usage", s)
	}
	if c := out.Completion; c.Object != "text_completion" || c.Text == "" || c.FinishReason != "length" || c.Usage.CompletionTokens != 4 {
		t.Errorf("completion = %+v; want a 4-token text completion", c)
	}
	if c := out.CompletionStream; c.Text == "" || c.Usage == nil || c.Usage.CompletionTokens != 3 {
		t.Errorf("completion stream = %+v; want 3 tokens and their usage", c)
	}
	var ids []string
	for _, m := range out.Models {
		ids = append(ids, m.ID)
		if m.Object != "model" || m.OwnedBy != "search" {
			t.Errorf("model %+v; want object model owned by search", m)
		}
	}
	if want := []string{"limited-chat", "slow-chat", "support-chat"}; !slices.Equal(ids, want) {
		t.Errorf("models.list = %v; want %v (LLM endpoints of the key's team only)", ids, want)
	}

	if out.Retrieved != "support-chat" {
		t.Errorf("models.retrieve = %q; want support-chat", out.Retrieved)
	}

	// The cancel: the replica stopped generating and freed its pages.
	if out.Cancel.Chunks != 3 || !out.Cancel.Aborted {
		t.Errorf("cancel = %+v; want an abort after 3 chunks", out.Cancel)
	}
	wait.Eventually(t, 10*time.Second, func() bool {
		st := slowRep.Stats()
		return st.Cancelled == 1 && st.InFlight == 0 && st.KVPagesUsed == 0 && st.BatchSize == 0
	}, "slow replica %v; want the generation cancelled and its pages freed", wait.Show(func() any { return slowRep.Stats() }))

	wantErr := func(name string, got openaiError, status int, typ, code, param string) {
		t.Helper()
		str := func(p *string) string {
			if p == nil {
				return "<null>"
			}
			return *p
		}
		if got.Status != status || str(got.Type) != typ || str(got.Code) != code || str(got.Param) != param {
			t.Errorf("%s: %+v (type %s, code %s, param %s); want %d, type %s, code %s, param %s",
				name, got, str(got.Type), str(got.Code), str(got.Param), status, typ, code, param)
		}
	}
	wantErr("401", out.Err401, 401, "invalid_request_error", "invalid_api_key", "<null>")
	if out.Err401.Class != "AuthenticationError" {
		t.Errorf("401 raised %s; want AuthenticationError", out.Err401.Class)
	}
	wantErr("404", out.Err404, 404, "invalid_request_error", "model_not_found", "model")
	if out.Err404.Class != "NotFoundError" {
		t.Errorf("404 raised %s; want NotFoundError", out.Err404.Class)
	}
	wantErr("404 predict endpoint", out.Err404Predict, 404, "invalid_request_error", "model_not_found", "model")
	wantErr("n=2", out.ErrN, 400, "invalid_request_error", "<null>", "n")
	if out.ErrN.Class != "BadRequestError" {
		t.Errorf("n=2 raised %s; want BadRequestError", out.ErrN.Class)
	}
	wantErr("context length", out.ErrContext, 400, "invalid_request_error", "context_length_exceeded", "messages")
	if out.LimitedFirst != "chat.completion" {
		t.Errorf("first request to the limited endpoint: %q; want a completion", out.LimitedFirst)
	}
	wantErr("429", out.Err429, 429, "rate_limit_error", "rate_limit_exceeded", "<null>")
	if out.Err429.Class != "RateLimitError" || out.Err429.RetryAfter == nil {
		t.Errorf("429 = %+v; want RateLimitError with Retry-After", out.Err429)
	} else if s, err := strconv.Atoi(*out.Err429.RetryAfter); err != nil || s < 900 {
		t.Errorf("429 Retry-After %q; want about 1000 seconds", *out.Err429.RetryAfter)
	}
	// The streams were metered as on the per-endpoint path: 6 chat and 3
	// completion tokens (a plain answer's tokens are the replica's to
	// count).
	tokens := func() string {
		resp, err := http.Get(g.adminURL + "/metrics")
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for l := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(l, `ml_serving_tokens_total{endpoint="support-chat",version="v1"} `); ok {
				return strings.TrimSpace(v)
			}
		}
		return "absent"
	}
	wait.Eventually(t, 10*time.Second, func() bool { return tokens() == "9" },
		"support-chat tokens metered %v; want 9", wait.Show(func() any { return tokens() }))
	// Every answer reached the chat replica through the one request path.
	if st := chatRep.Stats(); st.KVPagesUsed != 0 || st.InFlight != 0 {
		t.Errorf("chat replica %+v; want its pages free", st)
	}
}
