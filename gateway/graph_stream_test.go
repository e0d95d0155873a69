package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"modelplane/gateway"
	"modelplane/gguf"
	"modelplane/internal/wait"
	"modelplane/llm"
	"modelplane/runtime"
	"modelplane/runtime/llmserve"
	"modelplane/serveapi"
)

// llmRuntime serves the demo GGUF model (llm.WriteDemo) with the built-in
// runtime's LLM engine and returns its address.
func llmRuntime(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := llm.WriteDemoFile(filepath.Join(dir, "demo.gguf"), gguf.F32); err != nil {
		t.Fatal(err)
	}
	cfg := `{"model":"chat","version":"v1","format":"gguf","file":"demo.gguf"}`
	if err := os.WriteFile(filepath.Join(dir, serveapi.ConfigFile), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	s := runtime.New(runtime.Options{})
	if err := s.Load(dir, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Warm(t.Context()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return strings.TrimPrefix(srv.URL, "http://")
}

// llmStats reads the runtime's /v2/stats.
// gatedModel is a model whose forward passes past the first free wait
// for a value on open, so that a test decides how far a generation gets,
// whatever the machine's load.
type gatedModel struct {
	llmserve.Model
	free, n int
	open    chan struct{}
}

func (g *gatedModel) Forward(batch []llmserve.Step) [][]float32 {
	if g.n++; g.n > g.free {
		<-g.open
	}
	return g.Model.Forward(batch)
}

// gatedLLM serves the demo model with the LLM engine on a gatedModel and
// returns its address, the gate, and a channel closed when the first
// chat request the runtime took has ended (answered or cancelled).
func gatedLLM(t *testing.T) (addr string, open chan struct{}, ended <-chan struct{}) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "demo.gguf")
	if err := llm.WriteDemoFile(path, gguf.F32); err != nil {
		t.Fatal(err)
	}
	m, tok, err := llmserve.LoadModel(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedModel{Model: m, free: 4, open: make(chan struct{})}
	e, err := llmserve.New(g, llmserve.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Stop)
	// Runs before e.Stop: a pass held at the gate goes on.
	t.Cleanup(func() { close(g.open) })
	h := llmserve.NewServer(e, tok, llmserve.Options{Model: "chat"}).Handler()
	done := make(chan struct{})
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/chat/completions") {
			defer once.Do(func() { close(done) })
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), g.open, done
}

func llmStats(t *testing.T, addr string) (inFlight, cancelled int) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/v2/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		InFlight  int `json:"in_flight"`
		Cancelled int `json:"cancelled"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st.InFlight, st.Cancelled
}

// explainGraph scores the second payment with the real XGBoost model and
// has the LLM step write about its label: the graph's last step.
func explainGraph(maxTokens int) string { return explainGraphOn("chat", maxTokens) }

// explainGraphOn is explainGraph with its LLM step on endpoint llm.
func explainGraphOn(llm string, maxTokens int) string {
	return fmt.Sprintf(`{"entry":"s","nodes":[{"id":"s","type":"sequence","steps":["score","explain"]},
	 {"id":"score","type":"call","endpoint":"xgb","input":{"instances":["$request/instances/1"]}},
	 {"id":"explain","type":"call","endpoint":%q,"input":{"messages":[{"role":"user","content":"$score/predictions/0/label"}],"max_tokens":%d,"temperature":0}}]}`, llm, maxTokens)
}

// streamed POSTs body to the graph asking for an event stream and returns
// the response with the stream open.
func streamed(t *testing.T, ctx context.Context, ge *graphEnv, endpoint, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ge.g.url+predictPath(endpoint), strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+ge.key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// chunk is one event of an OpenAI chat completion stream.
type chunk struct {
	Object  string `json:"object"`
	Choices []struct {
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
}

// TestGraphStreamsItsLLMStep runs a graph whose last step calls an LLM
// endpoint served by the built-in runtime's real engine (the demo GGUF
// model), after a real XGBoost step whose label the LLM's prompt takes:
// asked for an event stream, the graph streams the LLM's tokens in the
// OpenAI chunk shape, the same text as calling the steps by hand; without,
// it answers the chat completion; a failing LLM step is the graph's 502
// naming it, not a broken stream; and a caller that goes away mid-stream
// cancels the generation upstream.
func TestGraphStreamsItsLLMStep(t *testing.T) {
	t.Parallel()
	ge := newGraphEnv(t, gateway.Config{})
	chat := llmRuntime(t)
	ge.put(t, route("chat", "risk", "llm", 1, ver("v1", 100, chat)))
	explain := graphRoute("explain", "risk", 1, graphVer("g1", 100, explainGraph(12)))
	explain.SamplingRate = 1
	ge.put(t, explain)

	// The steps by hand: xgb's label of the second payment, then the chat.
	label := decodeLabels(t, ge.predict(t, "xgb", payments))[1]
	msg, _ := json.Marshal(map[string]any{"messages": []map[string]string{{"role": "user", "content": label}}, "max_tokens": 12, "temperature": 0})
	direct := call(t, ge.g.url, chatPath("chat"), ge.key, string(msg))
	var completion struct {
		Object  string `json:"object"`
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if direct.status != http.StatusOK || json.Unmarshal(direct.body, &completion) != nil || len(completion.Choices) != 1 || completion.Choices[0].Message.Content == "" {
		t.Fatalf("chat by hand: %d %s", direct.status, direct.body)
	}
	want, wantTokens := completion.Choices[0].Message.Content, completion.Usage.CompletionTokens

	t.Run("without a stream the graph answers the chat completion", func(t *testing.T) {
		res := ge.predict(t, "explain", payments)
		completion.Choices = nil
		if res.status != http.StatusOK || json.Unmarshal(res.body, &completion) != nil || len(completion.Choices) != 1 {
			t.Fatalf("graph answered %d %s", res.status, res.body)
		}
		if got := completion.Choices[0].Message.Content; got != want || completion.Object != "chat.completion" || res.header.Get("X-Model-Version") != "g1" {
			t.Errorf("graph %s %q (version %q); want chat.completion %q from g1", completion.Object, got, res.header.Get("X-Model-Version"), want)
		}
	})

	t.Run("asked for a stream the graph streams the LLM's tokens", func(t *testing.T) {
		resp := streamed(t, t.Context(), ge, "explain", payments)
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") || resp.Header.Get("X-Model-Version") != "g1" {
			t.Fatalf("stream: %d %q version %q", resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("X-Model-Version"))
		}
		var text strings.Builder
		var events int
		done := false
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			if data == "[DONE]" {
				done = true
				break
			}
			var c chunk
			if err := json.Unmarshal([]byte(data), &c); err != nil || c.Object != "chat.completion.chunk" {
				t.Fatalf("event %q: want a chat.completion.chunk (%v)", data, err)
			}
			events++
			for _, ch := range c.Choices {
				text.WriteString(ch.Delta.Content)
			}
		}
		if !done || events < 2 || text.String() != want {
			t.Errorf("streamed %q in %d events (done %v); want %q token by token, then [DONE]", text.String(), events, done, want)
		}
		// Sampled as an LLM answer: the completion's length, no text.
		got := sampleOf(t, ge.nc, resp.Header.Get("X-Request-Id"))
		// The gateway counts a stream's tokens by the events that carry
		// content, as for an LLM endpoint: at most the chat's.
		if got.Version != "g1" || got.Tokens < 1 || got.Tokens > wantTokens || len(got.Instances) != 0 {
			t.Errorf("sample %+v; want version g1 with 1 to %d tokens and no instances", got, wantTokens)
		}
	})

	t.Run("a failing LLM step is the graph's 502 naming it", func(t *testing.T) {
		ge.put(t, graphRoute("explain", "risk", 2, graphVer("g2", 100, explainGraph(1_000_000))))
		resp := streamed(t, t.Context(), ge, "explain", payments)
		defer resp.Body.Close()
		var p struct {
			Node       string `json:"node"`
			StepStatus int    `json:"step_status"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&p); err != nil || resp.StatusCode != http.StatusBadGateway || p.Node != "explain" || p.StepStatus/100 != 4 {
			t.Errorf("graph answered %d %+v (%v); want 502 naming explain with the step's 4xx", resp.StatusCode, p, err)
		}
	})

	t.Run("a caller that goes away cancels the generation", func(t *testing.T) {
		// The LLM step's runtime holds its generation after a few passes,
		// so it is still running when the caller leaves.
		held, open, ended := gatedLLM(t)
		ge.put(t, route("held-chat", "risk", "llm", 1, ver("v1", 100, held)))
		ge.put(t, graphRoute("explain", "risk", 3, graphVer("g3", 100, explainGraphOn("held-chat", 1900))))
		ctx, cancel := context.WithCancel(t.Context())
		resp := streamed(t, ctx, ge, "explain", payments)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("stream: %d", resp.StatusCode)
		}
		// The first token arrived: the generation is running upstream.
		if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		if inFlight, _ := llmStats(t, held); inFlight != 1 {
			t.Fatalf("in flight %d after the first token, want 1", inFlight)
		}
		cancel()
		resp.Body.Close()
		wait.Eventually(t, 30*time.Second, func() bool {
			select {
			case <-ended:
				return true
			default:
				return false
			}
		}, "the gateway never ended the LLM step's request")
		// The passes go on one by one until the engine takes the cancel:
		// 1,900 tokens would take as many polls.
		wait.Eventually(t, 30*time.Second, func() bool {
			select {
			case open <- struct{}{}:
			default:
			}
			inFlight, cancelled := llmStats(t, held)
			return inFlight == 0 && cancelled == 1
		}, "the runtime never saw the generation cancelled: %v", wait.Show(func() any {
			inFlight, cancelled := llmStats(t, held)
			return fmt.Sprintf("in flight %d, cancelled %d", inFlight, cancelled)
		}))
	})
}
