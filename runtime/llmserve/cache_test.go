package llmserve

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"modelplane/engine"
	"modelplane/internal/wait"
)

// sharedPrefix is a 256-token prefix and two prompts that start with it.
func sharedPrefix(tok Tokenizer) (a, b []int) {
	prefix := tok.Encode(strings.Repeat("You are a careful assistant. ", 20))[:256]
	a = append(append([]int(nil), prefix...), tok.Encode(" Hello there.")...)
	b = append(append([]int(nil), prefix...), tok.Encode(" And what is a page?")...)
	return a, b
}

// A request sharing a 256-token prefix with one that has already finished
// computes none of it: the first request's full pages stayed cached.
func TestPrefixCacheOutlivesTheRequest(t *testing.T) {
	t.Parallel()
	e, tok := open(t, Config{Pages: 128})
	a, b := sharedPrefix(tok)
	fresh, _ := open(t, Config{Pages: 128, NoPrefixCaching: true})
	want, _ := collect(t, fresh, Request{Prompt: b, MaxTokens: 12, Sampling: greedy()})

	collect(t, e, Request{Prompt: a, MaxTokens: 4, Sampling: greedy()})
	mid := e.Counts()
	if mid.HeldPages != 0 || mid.CachedPages < 256/PageTokens {
		t.Fatalf("after the first request: %d pages held, %d cached; want 0 held and its %d prefix pages cached",
			mid.HeldPages, mid.CachedPages, 256/PageTokens)
	}
	got, _ := collect(t, e, Request{Prompt: b, MaxTokens: 12, Sampling: greedy()})
	after := e.Counts()
	if computed := after.PrefillComputed - mid.PrefillComputed; computed != int64(len(b)-256) {
		t.Errorf("second request computed %d prompt tokens; want %d (all but the cached 256)", computed, len(b)-256)
	}
	if hits := after.PrefixHits - mid.PrefixHits; hits != 256 {
		t.Errorf("prefix cache hits = %d tokens; want 256", hits)
	}
	if q := after.PrefixQueries - mid.PrefixQueries; q != int64(len(b)) {
		t.Errorf("prefix cache queries = %d tokens; want the prompt's %d", q, len(b))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("from cached pages the tokens are %v; computed afresh %v", got, want)
	}
	// Without caching, nothing outlives a request.
	before := fresh.Counts()
	collect(t, fresh, Request{Prompt: a, MaxTokens: 4, Sampling: greedy()})
	if c := fresh.Counts(); c.CachedPages != 0 || c.PrefillComputed-before.PrefillComputed != int64(len(a)) {
		t.Errorf("without caching: %d pages cached, %d computed; want 0 and the whole %d-token prompt",
			c.CachedPages, c.PrefillComputed-before.PrefillComputed, len(a))
	}
}

// A text completion gets the cache too: the second of two prompts sharing
// 256 tokens computes only its own full pages and tail.
func TestCompletionsHitThePrefixCache(t *testing.T) {
	t.Parallel()
	ts, e := server(t, "")
	head := strings.Repeat("Pages hold sixteen tokens each. ", 12)
	complete := func(text string) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"prompt": text, "max_tokens": 3, "temperature": 0})
		resp := post(t, ts, "/v1/completions", string(body))
		var out chatAnswer
		decodeJSON(t, resp, &out)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("completion: %d", resp.StatusCode)
		}
	}
	complete(head + "First question?")
	mid := e.Counts()
	complete(head + "Second question, longer?")
	after := e.Counts()
	hits := after.PrefixHits - mid.PrefixHits
	if hits < 256 {
		t.Errorf("second completion hit %d cached tokens; want at least the 256 of its shared head", hits)
	}
	prompt := after.PromptTokens - mid.PromptTokens
	if computed := after.PrefillComputed - mid.PrefillComputed; computed != prompt-hits {
		t.Errorf("second completion computed %d of %d prompt tokens with %d cached; want %d", computed, prompt, hits, prompt-hits)
	}
}

// A chat with the same system message as an earlier one, finished, finds
// the system message's full pages cached: they are computed once.
func TestChatSystemMessageHitsThePrefixCache(t *testing.T) {
	t.Parallel()
	ts, e := server(t, "")
	sys := strings.Repeat("You answer in one short sentence. ", 10)
	chat := func(user string) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"messages": []map[string]string{{"role": "system", "content": sys}, {"role": "user", "content": user}},
			"max_tokens": 3, "temperature": 0})
		resp := post(t, ts, "/v1/chat/completions", string(body))
		var out chatAnswer
		decodeJSON(t, resp, &out)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("chat: %d", resp.StatusCode)
		}
	}
	chat("What is a page?")
	mid := e.Counts()
	chat("Why batch?")
	after := e.Counts()
	// The system message is 340 bytes, each a token: at least 21 full
	// pages of the prompt are the same in both chats.
	if hits := after.PrefixHits - mid.PrefixHits; hits < 21*PageTokens {
		t.Errorf("second chat hit %d cached tokens; want at least the %d of its system message's full pages", hits, 21*PageTokens)
	}
}

// When pages run short, cached pages are evicted, least recently released
// first, and nothing is preempted for them.
func TestCachedPagesEvictedBeforePreemption(t *testing.T) {
	t.Parallel()
	e, tok := open(t, Config{Pages: 40})
	a, _ := sharedPrefix(tok) // 17 full pages once computed
	collect(t, e, Request{Prompt: a, MaxTokens: 2, Sampling: greedy()})
	cached := e.Counts().CachedPages
	if cached < 16 {
		t.Fatalf("%d pages cached after the first request; want its 16 prefix pages", cached)
	}
	// A different prompt of 30 pages fits only by evicting cached ones.
	long := tok.Encode(strings.Repeat("Nothing in common with the other prompt! ", 12))[:470]
	want, _ := collect(t, e, Request{Prompt: long, MaxTokens: 8, Sampling: greedy()})
	c := e.Counts()
	if c.Preemptions != 0 {
		t.Errorf("%d preemptions; want 0: cached pages go first", c.Preemptions)
	}
	// The long prompt's 29 full pages are cached now; of the first
	// prompt's, what the 30 pages it held left: 10.
	left := c.CachedPages - 29
	if left != 40-30 {
		t.Errorf("%d of the first prompt's %d cached pages left; want %d", left, cached, 40-30)
	}
	fresh, _ := open(t, Config{Pages: 40, NoPrefixCaching: true})
	if got, _ := collect(t, fresh, Request{Prompt: long, MaxTokens: 8, Sampling: greedy()}); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("into evicted pages the tokens are %v; in a fresh cache %v", want, got)
	}
	// A chain is evicted from its end, so the first prompt's head is what
	// is left, and asking again hits all of it.
	before := e.Counts()
	collect(t, e, Request{Prompt: a, MaxTokens: 2, Sampling: greedy()})
	if hits := e.Counts().PrefixHits - before.PrefixHits; hits != int64(left*PageTokens) {
		t.Errorf("the first prompt again hit %d tokens; want its %d leading pages' %d", hits, left, left*PageTokens)
	}
}

// A request beyond the queue bound is refused: ErrQueueFull from the
// engine, 429 in OpenAI's shape with Retry-After from the server.
func TestQueueBoundRefuses(t *testing.T) {
	t.Parallel()
	var gate sync.Mutex
	stepping := make(chan struct{}, 1)
	e, tok := open(t, Config{Pages: 128, MaxBatch: 1, MaxWaiting: 2, OnStep: func([]engine.Work) {
		select {
		case stepping <- struct{}{}:
		default:
		}
		gate.Lock()
		defer gate.Unlock()
	}})
	gate.Lock()
	_, first, err := e.Submit(Request{Prompt: prompt(tok, 0), MaxTokens: 4, Sampling: greedy()})
	if err != nil {
		t.Fatal(err)
	}
	<-stepping // the first request is in the batch, the loop held
	var queued []<-chan Event
	for i := range 2 {
		_, ch, err := e.Submit(Request{Prompt: prompt(tok, i+1), MaxTokens: 4, Sampling: greedy()})
		if err != nil {
			t.Fatalf("request %d of 2 the queue holds: %v", i+1, err)
		}
		queued = append(queued, ch)
	}
	if _, _, err := e.Submit(Request{Prompt: prompt(tok, 3), MaxTokens: 4}); !errors.Is(err, ErrQueueFull) {
		t.Errorf("a third waiting request: %v; want ErrQueueFull", err)
	}
	ts := httptest.NewServer(NewServer(e, tok, Options{Model: "m"}).Handler())
	defer ts.Close()
	resp := post(t, ts, "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`)
	var body struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	decodeJSON(t, resp, &body)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" ||
		body.Error.Type != "rate_limit_error" || body.Error.Code == nil || *body.Error.Code != "overloaded" ||
		body.Error.Param != nil || body.Error.Message == "" {
		t.Errorf("over the bound: %d Retry-After %q %+v; want 429 with Retry-After, rate_limit_error, code overloaded, param null",
			resp.StatusCode, resp.Header.Get("Retry-After"), body.Error)
	}
	gate.Unlock()
	for _, ch := range append(queued, first) {
		for ev := range ch {
			if ev.Done && ev.Err != nil {
				t.Errorf("a queued request failed: %v", ev.Err)
			}
		}
	}
	// With the queue drained there is room again.
	wait.Eventually(t, 10*time.Second, func() bool { return e.SchedulerStats().Waiting == 0 }, "queue not drained")
	collect(t, e, Request{Prompt: prompt(tok, 4), MaxTokens: 2, Sampling: greedy()})
}

// The serving.llm settings size the engine: the context window capped by
// max_model_len, the batch, the KV cache (a window per sequence) and the
// queue bound.
func TestSettingsSizeTheEngine(t *testing.T) {
	t.Parallel()
	s := Settings{MaxModelLen: 512, MaxNumSeqs: 3, MaxQueuedRequests: 7}
	cfg := s.Config(2048)
	if cfg.MaxBatch != 3 || cfg.MaxWaiting != 7 || cfg.Pages != 3*512/PageTokens {
		t.Errorf("Config = %+v; want batch 3, queue 7, %d pages", cfg, 3*512/PageTokens)
	}
	if d := (Settings{}).Config(2048); d.MaxBatch != DefaultMaxNumSeqs || d.MaxWaiting != DefaultMaxQueued || d.Pages != DefaultPages(2048) {
		t.Errorf("default Config = %+v; want batch %d, queue %d, %d pages", d, DefaultMaxNumSeqs, DefaultMaxQueued, DefaultPages(2048))
	}
	if got := (Settings{MaxModelLen: 4096}).Context(2048); got != 2048 {
		t.Errorf("max_model_len above the model's context gives %d; want the model's 2048", got)
	}
	e, tok, err := Open(demoPath(t), s)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop()
	if st := e.SchedulerStats(); st.KVPagesTotal != cfg.Pages || e.m.Context() != 512 {
		t.Errorf("engine has %d pages and a %d-token context; want %d and 512", st.KVPagesTotal, e.m.Context(), cfg.Pages)
	}
	long := tok.Encode(strings.Repeat("a long prompt ", 60))
	if _, _, err := e.Submit(Request{Prompt: long}); !errors.Is(err, ErrTooLong) {
		t.Errorf("a %d-token prompt under max_model_len 512: %v; want ErrTooLong", len(long), err)
	}
}
