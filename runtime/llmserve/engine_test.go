package llmserve

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"modelplane/busapi"
	"modelplane/engine"
	"modelplane/gguf"
	"modelplane/internal/wait"
	"modelplane/llm"
)

// demoPath writes the deterministic demo GGUF once per test.
func demoPath(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "demo.gguf")
	if err := llm.WriteDemoFile(path, gguf.F32); err != nil {
		t.Fatal(err)
	}
	return path
}

// open loads the demo model into an engine and checks, when the test
// ends, that no request holds a KV page: every page is free or cached
// (a computed prefix page nobody holds, evictable).
func open(t *testing.T, cfg Config) (*Engine, Tokenizer) {
	t.Helper()
	e, tok, err := Load(demoPath(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		wait.Eventually(t, 10*time.Second, func() bool { return released(e.Counts()) },
			"KV pages still held after the test: %+v", e.Counts())
		e.Stop()
	})
	return e, tok
}

// released reports that no request holds a page: free + cached = total.
func released(c Counts) bool { return c.HeldPages == 0 && c.FreePages+c.CachedPages == c.Pages }

func greedy() Sampling { return Sampling{Temperature: 0} }

// collect runs a request to its end and returns its tokens and reason.
func collect(t *testing.T, e *Engine, r Request) ([]int, string) {
	t.Helper()
	_, ev, err := e.Submit(r)
	if err != nil {
		t.Fatal(err)
	}
	var toks []int
	for x := range ev {
		if x.Done {
			if x.Err != nil {
				t.Fatalf("generation failed: %v", x.Err)
			}
			return toks, x.Reason
		}
		toks = append(toks, x.Token)
	}
	t.Fatal("events closed without Done")
	return nil, ""
}

func prompt(tok Tokenizer, i int) []int {
	return tok.Encode(fmt.Sprintf("prompt number %d: tell me about pages %d", i, i*7))
}

func TestSameSeedSameTokens(t *testing.T) {
	t.Parallel()
	e, tok := open(t, Config{Pages: 64})
	seed := int64(42)
	r := Request{Prompt: prompt(tok, 1), MaxTokens: 24, Sampling: Sampling{Temperature: 1, TopP: 0.9, Seed: &seed}}
	a, _ := collect(t, e, r)
	b, _ := collect(t, e, r)
	if len(a) == 0 || fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("same seed gave %v then %v", a, b)
	}
}

// Sixteen different prompts in one batch each give the tokens they give
// alone.
func TestConcurrentPromptsMatchAlone(t *testing.T) {
	t.Parallel()
	e, tok := open(t, Config{Pages: 256, MaxBatch: 16})
	const n = 16
	alone := make([][]int, n)
	for i := range n {
		alone[i], _ = collect(t, e, Request{Prompt: prompt(tok, i), MaxTokens: 20, Sampling: greedy()})
	}
	maxBatch := 0
	e2, _ := open(t, Config{Pages: 256, MaxBatch: 16, OnStep: func(w []engine.Work) { maxBatch = max(maxBatch, len(w)) }})
	got := make([][]int, n)
	var wg sync.WaitGroup
	chans := make([]<-chan Event, n)
	for i := range n {
		_, ch, err := e2.Submit(Request{Prompt: prompt(tok, i), MaxTokens: 20, Sampling: greedy()})
		if err != nil {
			t.Fatal(err)
		}
		chans[i] = ch
	}
	for i := range n {
		wg.Go(func() {
			for x := range chans[i] {
				if !x.Done {
					got[i] = append(got[i], x.Token)
				}
			}
		})
	}
	wg.Wait()
	for i := range n {
		if fmt.Sprint(got[i]) != fmt.Sprint(alone[i]) {
			t.Errorf("prompt %d in a batch gave %v; alone %v", i, got[i], alone[i])
		}
	}
	if maxBatch < 2 {
		t.Errorf("largest batch was %d; want the prompts batched together", maxBatch)
	}
}

// A second request sharing a 256-token prefix computes none of it, and
// still gives the tokens it gives with nothing shared.
func TestPrefixSharingSkipsPrefill(t *testing.T) {
	t.Parallel()
	e, tok := open(t, Config{Pages: 128})
	prefix := tok.Encode(strings.Repeat("You are a careful assistant. ", 20))[:256]
	b := append(append([]int(nil), prefix...), tok.Encode(" And what is a page?")...)
	// Computed in an engine of its own, so that b's pages are not cached here.
	alone, _ := open(t, Config{Pages: 128})
	want, _ := collect(t, alone, Request{Prompt: b, MaxTokens: 12, Sampling: greedy()})

	a := append(append([]int(nil), prefix...), tok.Encode(" Hello there.")...)
	idA, evA, err := e.Submit(Request{Prompt: a, MaxTokens: 10000, Sampling: greedy()})
	if err != nil {
		t.Fatal(err)
	}
	<-evA // A's first token: its prefix pages are computed
	before := e.Counts()
	got, _ := collect(t, e, Request{Prompt: b, MaxTokens: 12, Sampling: greedy()})
	after := e.Counts()
	e.Cancel(idA)
	for range evA {
	}
	if computed := after.PrefillComputed - before.PrefillComputed; computed != int64(len(b)-256) {
		t.Errorf("second request computed %d prompt tokens; want %d (all but the shared 256)", computed, len(b)-256)
	}
	if cached := after.CachedTokens - before.CachedTokens; cached != 256 {
		t.Errorf("cached tokens = %d; want 256", cached)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("with the shared prefix the tokens are %v; without %v", got, want)
	}
}

// With too few pages for every sequence to grow, sequences are preempted
// and re-prefilled, and still give their greedy tokens.
func TestPreemptionRePrefillKeepsTokens(t *testing.T) {
	t.Parallel()
	e, tok := open(t, Config{Pages: 64})
	const n = 4
	alone := make([][]int, n)
	for i := range n {
		alone[i], _ = collect(t, e, Request{Prompt: prompt(tok, i), MaxTokens: 40, Sampling: greedy()})
	}
	small, _ := open(t, Config{Pages: 12})
	chans := make([]<-chan Event, n)
	for i := range n {
		_, ch, err := small.Submit(Request{Prompt: prompt(tok, i), MaxTokens: 40, Sampling: greedy()})
		if err != nil {
			t.Fatal(err)
		}
		chans[i] = ch
	}
	for i := range n {
		var got []int
		for x := range chans[i] {
			if !x.Done {
				got = append(got, x.Token)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(alone[i]) {
			t.Errorf("prompt %d under preemption gave %v; alone %v", i, got, alone[i])
		}
	}
	if c := small.Counts(); c.Preemptions == 0 {
		t.Errorf("no preemption happened (%+v); the test needs fewer pages", c)
	}
}

// A team at its batch-slot cap waits; another team's request runs beside.
func TestTenantCapByTeam(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	worst := map[string]int{}
	e, tok := open(t, Config{Pages: 128, MaxBatch: 4, TenantBatchShare: 0.25, OnStep: func(w []engine.Work) {
		per := map[string]int{}
		for _, x := range w {
			per[x.Tenant]++
		}
		mu.Lock()
		for k, v := range per {
			worst[k] = max(worst[k], v)
		}
		mu.Unlock()
	}})
	var chans []<-chan Event
	for i, team := range []string{"a", "a", "a", "b"} {
		_, ch, err := e.Submit(Request{Tenant: team, Prompt: prompt(tok, i), MaxTokens: 8, Sampling: greedy()})
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
	}
	for _, ch := range chans {
		for range ch {
		}
	}
	if worst["a"] != 1 || worst["b"] != 1 {
		t.Errorf("most sequences of one team in a step: %v; want 1 each (cap of 1 slot)", worst)
	}
}

// server starts the HTTP server on the demo model.
func server(t *testing.T, token string) (*httptest.Server, *Engine) {
	t.Helper()
	e, tok := open(t, Config{Pages: 128})
	ts := httptest.NewServer(NewServer(e, tok, Options{Model: "chat-assistant", Token: token}).Handler())
	t.Cleanup(ts.Close)
	return ts, e
}

func post(t *testing.T, ts *httptest.Server, path, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, ts.URL+path, strings.NewReader(body))
	req.Header.Set(busapi.TeamHeader, "team-a")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

type chatAnswer struct {
	Choices []struct {
		Message      struct{ Content string } `json:"message"`
		Text         string                   `json:"text"`
		FinishReason string                   `json:"finish_reason"`
	} `json:"choices"`
	Usage *usage `json:"usage"`
}

func decodeJSON(t *testing.T, resp *http.Response, v any) {
	t.Helper()
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// sse reads a stream's data lines, [DONE] included.
func sse(t *testing.T, resp *http.Response) []string {
	t.Helper()
	defer resp.Body.Close()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

const chatBodyJSON = `{"model":"chat-assistant","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"What is a KV page?"}],"max_tokens":%d,"temperature":0%s}`

func TestChatStreamingMatchesNonStreaming(t *testing.T) {
	t.Parallel()
	ts, _ := server(t, "")
	resp := post(t, ts, "/v1/chat/completions", fmt.Sprintf(chatBodyJSON, 40, ""))
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var whole chatAnswer
	decodeJSON(t, resp, &whole)
	if whole.Usage == nil || whole.Usage.CompletionTokens < 1 || whole.Usage.PromptTokens < 1 {
		t.Fatalf("usage = %+v", whole.Usage)
	}

	lines := sse(t, post(t, ts, "/v1/chat/completions", fmt.Sprintf(chatBodyJSON, 40, `,"stream":true,"stream_options":{"include_usage":true}`)))
	if len(lines) < 3 || lines[len(lines)-1] != "[DONE]" {
		t.Fatalf("stream = %q; want chunks then [DONE]", lines)
	}
	var text strings.Builder
	var u *usage
	reason := ""
	chunks := 0
	for _, l := range lines[:len(lines)-1] {
		var c struct {
			Choices []struct {
				Delta        struct{ Content string } `json:"delta"`
				FinishReason *string                  `json:"finish_reason"`
			} `json:"choices"`
			Usage *usage `json:"usage"`
		}
		if err := json.Unmarshal([]byte(l), &c); err != nil {
			t.Fatal(err)
		}
		for _, ch := range c.Choices {
			text.WriteString(ch.Delta.Content)
			if ch.FinishReason != nil {
				reason = *ch.FinishReason
			} else {
				chunks++
			}
		}
		if c.Usage != nil {
			u = c.Usage
		}
	}
	if text.String() != whole.Choices[0].Message.Content || reason != whole.Choices[0].FinishReason {
		t.Errorf("streamed %q (%s); non-streamed %q (%s)", text.String(), reason, whole.Choices[0].Message.Content, whole.Choices[0].FinishReason)
	}
	if u == nil || *u != *whole.Usage {
		t.Errorf("stream usage %+v; want %+v", u, whole.Usage)
	}
	if chunks != whole.Usage.CompletionTokens {
		t.Errorf("%d token chunks for %d completion tokens; want one per token, page boundaries included", chunks, whole.Usage.CompletionTokens)
	}
}

func TestCompletionsStopString(t *testing.T) {
	t.Parallel()
	ts, _ := server(t, "")
	var a chatAnswer
	decodeJSON(t, post(t, ts, "/v1/completions", `{"prompt":"Once upon a time","max_tokens":30,"temperature":0}`), &a)
	full := a.Choices[0].Text
	if a.Choices[0].FinishReason != "length" || len(full) < 6 {
		t.Fatalf("answer %+v; want 30 tokens of text ending on length", a)
	}
	// A stop string of two printable ASCII bytes past the first token (the
	// demo model's bytes are often not UTF-8).
	stop := ""
	for i := 1; i+2 <= len(full) && stop == ""; i++ {
		if c, d := full[i], full[i+1]; c > ' ' && c < 0x7f && d > ' ' && d < 0x7f {
			stop = full[i : i+2]
		}
	}
	if stop == "" {
		t.Fatalf("no ASCII pair in %q to stop on", full)
	}
	want, _, _ := strings.Cut(full, stop)
	body, _ := json.Marshal(map[string]any{"prompt": "Once upon a time", "max_tokens": 30, "temperature": 0, "stop": []string{stop}})
	var b chatAnswer
	decodeJSON(t, post(t, ts, "/v1/completions", string(body)), &b)
	if b.Choices[0].Text != want || b.Choices[0].FinishReason != "stop" {
		t.Errorf("with stop %q: %q (%s); want %q (stop)", stop, b.Choices[0].Text, b.Choices[0].FinishReason, want)
	}
}

// gated is a model whose forward passes past the first `free` wait for a
// value on open, so a test decides how far a generation may get.
type gated struct {
	Model
	free int
	n    int
	open chan struct{}
}

func (g *gated) Forward(batch []Step) [][]float32 {
	if g.n++; g.n > g.free {
		<-g.open
	}
	return g.Model.Forward(batch)
}

// TestCancelMidStreamFreesPages: a client that leaves mid-stream cancels
// its generation and frees its pages. The model is held after a few
// passes, so the generation is still running when the client leaves,
// whatever the machine's load.
func TestCancelMidStreamFreesPages(t *testing.T) {
	t.Parallel()
	m, tok, err := LoadModel(demoPath(t), 128)
	if err != nil {
		t.Fatal(err)
	}
	g := &gated{Model: m, free: 6, open: make(chan struct{})}
	e, err := New(g, Config{Pages: 128})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Stop)
	ts := httptest.NewServer(NewServer(e, tok, Options{Model: "chat-assistant"}).Handler())
	t.Cleanup(ts.Close)
	resp := post(t, ts, "/v1/completions", `{"prompt":"Once upon a time","max_tokens":1500,"temperature":0,"stream":true}`)
	r := bufio.NewReader(resp.Body)
	for range 3 {
		if _, err := r.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	if c := e.Counts(); c.HeldPages == 0 {
		t.Fatal("no pages held mid-stream")
	}
	resp.Body.Close()
	// The passes go on one by one until the engine sees the client gone.
	wait.Eventually(t, 10*time.Second, func() bool {
		select {
		case g.open <- struct{}{}:
		default:
		}
		return released(e.Counts())
	}, "pages held after the client left")
	close(g.open)
	if st := e.SchedulerStats(); st.Cancelled < 1 {
		t.Errorf("cancelled = %d, want the generation counted as cancelled", st.Cancelled)
	}
}

func TestBadRequestsInOpenAIShape(t *testing.T) {
	t.Parallel()
	ts, _ := server(t, "")
	long := strings.Repeat("word ", 5000)
	for _, c := range []struct{ name, path, body, param string }{
		{"prompt over the context length", "/v1/completions", fmt.Sprintf(`{"prompt":%q}`, long), "prompt"},
		{"chat over the context length", "/v1/chat/completions", fmt.Sprintf(`{"messages":[{"role":"user","content":%q}]}`, long), "messages"},
		{"n above 1", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"n":2}`, "n"},
		{"no messages", "/v1/chat/completions", `{"messages":[]}`, "messages"},
		{"bad temperature", "/v1/completions", `{"prompt":"x","temperature":3}`, "temperature"},
	} {
		resp := post(t, ts, c.path, c.body)
		var got struct {
			Error struct {
				Message, Type string
				Param         *string
				Code          any
			} `json:"error"`
		}
		decodeJSON(t, resp, &got)
		if resp.StatusCode != http.StatusBadRequest || got.Error.Type != "invalid_request_error" || got.Error.Message == "" ||
			got.Error.Param == nil || *got.Error.Param != c.param {
			t.Errorf("%s: %d %+v; want 400 invalid_request_error on %s", c.name, resp.StatusCode, got.Error, c.param)
		}
	}
}

// Like runtime.TestTokenRequiredButForProbes: only the probes answer
// without the replica token.
func TestTokenRequiredButForProbes(t *testing.T) {
	t.Parallel()
	ts, _ := server(t, "s3cret")
	for _, p := range []string{"/health", "/v2/health/live", "/v2/health/ready", "/v1/models", "/metrics"} {
		resp, err := http.Get(ts.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s without token: %d", p, resp.StatusCode)
		}
		if p == "/metrics" {
			for _, name := range []string{"vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc",
				"vllm:generation_tokens_total", "vllm:prompt_tokens_total", "vllm:time_to_first_token_seconds", "vllm:prefix_cache_hits_total"} {
				if !bytes.Contains(body, []byte(name)) {
					t.Errorf("/metrics lacks %s", name)
				}
			}
		}
	}
	resp := post(t, ts, "/v1/completions", `{"prompt":"x","max_tokens":2}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST without token: %d; want 401", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/completions", strings.NewReader(`{"prompt":"x","max_tokens":2}`))
	req.Header.Set(busapi.ReplicaTokenHeader, "s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("POST with token: %d; want 200", resp.StatusCode)
	}
}
