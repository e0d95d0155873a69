package replica

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"modelplane/internal/wait"
)

// sseStream is a parsed chat stream.
type sseStream struct {
	chunks  []chatCompletion // every data chunk before [DONE]
	content int              // chunks carrying content
	text    string
	finish  string
	usage   *usage
	done    bool
}

// readSSE parses an SSE chat stream. The error is non-nil when the stream
// breaks off, carries an error event or does not end with [DONE].
func readSSE(r io.Reader) (sseStream, error) {
	var s sseStream
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			return s, fmt.Errorf("line %q is not a data line", line)
		}
		if s.done {
			return s, errors.New("data after [DONE]")
		}
		if data == "[DONE]" {
			s.done = true
			continue
		}
		if strings.HasPrefix(data, `{"error"`) {
			return s, fmt.Errorf("error event: %s", data)
		}
		var c chatCompletion
		dec := json.NewDecoder(strings.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return s, fmt.Errorf("chunk %q: %w", data, err)
		}
		s.chunks = append(s.chunks, c)
		if len(c.Choices) != 1 || c.Choices[0].Delta == nil {
			return s, fmt.Errorf("chunk %q: want one choice with a delta", data)
		}
		if d := c.Choices[0].Delta; d.Content != "" {
			if s.finish != "" {
				return s, errors.New("content after the finish chunk")
			}
			s.content++
			s.text += d.Content
		}
		if f := c.Choices[0].FinishReason; f != nil {
			s.finish = *f
			s.usage = c.Usage
		} else if c.Usage != nil {
			return s, errors.New("usage before the finish chunk")
		}
	}
	if err := sc.Err(); err != nil {
		return s, err
	}
	if !s.done {
		return s, errors.New("stream ended without [DONE]")
	}
	return s, nil
}

func chatBody(content string, maxTokens int, stream bool) string {
	b := map[string]any{"model": "chat-assistant", "messages": []map[string]string{{"role": "user", "content": content}}, "stream": stream}
	if maxTokens > 0 {
		b["max_tokens"] = maxTokens
	}
	out, _ := json.Marshal(b)
	return string(out)
}

func startLLM(t *testing.T, eng *testEngine, edit func(*Config)) (*Server, string) {
	t.Helper()
	cfg := Config{Task: TaskLLM, Version: "v42", Profile: json.RawMessage(llmProfile), Engine: eng, Seed: 42}
	if edit != nil {
		edit(&cfg)
	}
	return startReady(t, cfg)
}

func TestChatNonStream(t *testing.T) {
	t.Parallel()
	_, base := startLLM(t, newTestEngine(), func(c *Config) { c.DefaultMaxTokens = 20 })
	c := newClient(t)
	tests := []struct {
		name       string
		body       string
		wantPrompt int
		wantOut    int
		wantFinish string
	}{
		{"max_tokens hit", chatBody("Where is my parcel?", 17, false), 5, 17, "length"}, // 19 chars
		{"default length", chatBody("Hi", 0, false), 1, 20, "stop"},                     // 2 chars: minimum 1
		{"one token", chatBody(strings.Repeat("é", 8), 1, false), 2, 1, "length"},       // 8 code points
		{"max_completion_tokens wins", `{"messages":[{"role":"user","content":"abcd"}],"max_tokens":3,"max_completion_tokens":5}`, 1, 5, "length"},
		{"content parts", `{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hello"},{"type":"image_url","image_url":{"url":"x"}}]}],"max_tokens":2}`, 4, 2, "length"}, // 8+5 chars
		{"null content", `{"messages":[{"role":"assistant","content":null},{"role":"user","content":"12345678"}],"max_tokens":2}`, 2, 2, "length"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, h, raw := post(t, c, base+"/v1/chat/completions", tt.body)
			if code != http.StatusOK {
				t.Fatalf("status = %d %s", code, raw)
			}
			if got := h.Get("X-Model-Version"); got != "v42" {
				t.Errorf("X-Model-Version = %q; want v42", got)
			}
			got := decode[chatCompletion](t, raw)
			want := usage{PromptTokens: tt.wantPrompt, CompletionTokens: tt.wantOut, TotalTokens: tt.wantPrompt + tt.wantOut}
			if got.Usage == nil || *got.Usage != want {
				t.Errorf("usage = %+v; want %+v", got.Usage, want)
			}
			if got.Object != "chat.completion" || len(got.Choices) != 1 || got.Choices[0].Message == nil {
				t.Fatalf("completion = %s; want one choice with a message", raw)
			}
			ch := got.Choices[0]
			if ch.FinishReason == nil || *ch.FinishReason != tt.wantFinish {
				t.Errorf("finish_reason = %v; want %q", ch.FinishReason, tt.wantFinish)
			}
			if ch.Message.Role != "assistant" || countTokens(ch.Message.Content) != tt.wantOut {
				t.Errorf("message = %+v; want the assistant's %d tokens", ch.Message, tt.wantOut)
			}
		})
	}
}

// countTokens counts the vocabulary tokens in generated text; every token
// starts with a space or is punctuation.
func countTokens(text string) int {
	n := 0
	for text != "" {
		for _, w := range vocabulary {
			if rest, ok := strings.CutPrefix(text, w); ok && (rest == "" || rest[0] == ' ' || rest[0] == '.' || rest[0] == ',') {
				text = rest
				n++
				goto next
			}
		}
		return -1
	next:
	}
	return n
}

func TestChatStreamTokensMatchUsage(t *testing.T) {
	t.Parallel()
	eng := newTestEngine()
	eng.maxBatch = 4 // so some requests wait for a slot
	_, base := startLLM(t, eng, nil)
	c := newClient(t)

	const requests = 12
	var wg sync.WaitGroup
	texts := make([]string, requests)
	for i := range requests {
		wg.Go(func() {
			maxTokens := 1 + i*7 // 1 .. 78: page boundaries included
			resp, err := c.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(chatBody(fmt.Sprint("question ", i), maxTokens, true)))
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			defer resp.Body.Close()
			if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
				t.Errorf("request %d: status %d, Content-Type %q; want 200 text/event-stream", i, resp.StatusCode, ct)
				return
			}
			s, err := readSSE(resp.Body)
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			if s.usage == nil || s.content != s.usage.CompletionTokens || s.content != maxTokens {
				t.Errorf("request %d: %d tokens streamed, usage %+v; want %d in both", i, s.content, s.usage, maxTokens)
			}
			if s.finish != "length" {
				t.Errorf("request %d: finish_reason %q; want length", i, s.finish)
			}
			if s.chunks[0].Choices[0].Delta.Role != "assistant" {
				t.Errorf("request %d: first chunk has no assistant role", i)
			}
			for _, ch := range s.chunks {
				if ch.Object != "chat.completion.chunk" || ch.ID != s.chunks[0].ID {
					t.Errorf("request %d: chunk %+v; want object chat.completion.chunk with one id", i, ch)
					break
				}
			}
			texts[i] = s.text
		})
	}
	wg.Wait()

	// Streamed and gathered answers are the same text.
	code, _, raw := post(t, c, base+"/v1/chat/completions", chatBody("question 3", 22, false))
	if code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	if got := decode[chatCompletion](t, raw).Choices[0].Message.Content; got != texts[3] {
		t.Errorf("non-streamed text %q; streamed %q", got, texts[3])
	}
}

func TestChatDeterministic(t *testing.T) {
	t.Parallel()
	_, a := startLLM(t, newTestEngine(), nil)
	_, b := startLLM(t, newTestEngine(), nil)
	_, other := startLLM(t, newTestEngine(), func(c *Config) { c.Seed = 43 })
	c := newClient(t)
	text := func(base, q string) string {
		code, _, raw := post(t, c, base+"/v1/chat/completions", chatBody(q, 30, false))
		if code != http.StatusOK {
			t.Fatalf("status %d", code)
		}
		return decode[chatCompletion](t, raw).Choices[0].Message.Content
	}
	first := text(a, "same question")
	if got := text(b, "same question"); got != first {
		t.Errorf("same seed, same question: %q vs %q", got, first)
	}
	if got := text(a, "same question"); got != first {
		t.Errorf("same replica, same question: %q vs %q", got, first)
	}
	code, _, raw := post(t, c, a+"/v1/chat/completions", chatBody("same question", 10, false))
	if short := decode[chatCompletion](t, raw).Choices[0].Message.Content; code != http.StatusOK || !strings.HasPrefix(first, short) {
		t.Errorf("10-token answer %q is not the start of the 30-token one %q", short, first)
	}
	if got := text(a, "another question"); got == first {
		t.Error("another question got the same text")
	}
	if got := text(other, "same question"); got == first {
		t.Error("another seed got the same text")
	}
}

func TestChatBadRequests(t *testing.T) {
	t.Parallel()
	eng := newTestEngine()
	eng.totalPages = 8 // 128 tokens
	_, base := startLLM(t, eng, func(c *Config) { c.MaxTokens = 100; c.MaxBodyBytes = 2048 })
	c := newClient(t)
	tests := []struct {
		name, body string
		want       int
		wantDetail string
	}{
		{"malformed", `{"messages":`, http.StatusBadRequest, "unexpected end"},
		{"no messages", `{"model":"m"}`, http.StatusBadRequest, "messages must not be empty"},
		{"messages wrong type", `{"messages":"hi"}`, http.StatusBadRequest, "messages has the wrong type"},
		{"no role", `{"messages":[{"content":"hi"}]}`, http.StatusBadRequest, "messages[0].role"},
		{"content a number", `{"messages":[{"role":"user","content":5}]}`, http.StatusBadRequest, "messages[0].content"},
		{"max_tokens 0", chatBody("hi", 0, false)[:len(chatBody("hi", 0, false))-1] + `,"max_tokens":0}`, http.StatusBadRequest, "between 1 and 100"},
		{"max_tokens too large", chatBody("hi", 101, false), http.StatusBadRequest, "between 1 and 100"},
		{"n of 2", `{"messages":[{"role":"user","content":"hi"}],"n":2}`, http.StatusBadRequest, "n:"},
		{"prompt beyond the cache", chatBody(strings.Repeat("x", 1000), 5, false), http.StatusBadRequest, "rejected by the engine: prompt of 250 tokens"},
		{"too large", chatBody(strings.Repeat("x", 3000), 5, false), http.StatusRequestEntityTooLarge, "exceeds 2048"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, _, raw := post(t, c, base+"/v1/chat/completions", tt.body)
			if code != tt.want {
				t.Fatalf("status = %d (%s); want %d", code, raw, tt.want)
			}
			// The LLM routes answer in OpenAI's shape, as vLLM does.
			e := decode[struct {
				Error openAIError `json:"error"`
			}](t, raw).Error
			if !strings.Contains(e.Message, tt.wantDetail) || e.Type != "invalid_request_error" {
				t.Errorf("error = %+v; want an invalid_request_error whose message contains %q", e, tt.wantDetail)
			}
		})
	}
}

func TestChatQueueFull(t *testing.T) {
	t.Parallel()
	eng := newTestEngine()
	eng.maxBatch = 1
	s, base := startLLM(t, eng, func(c *Config) { c.MaxQueue = 1 })
	c := newClient(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	long := func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(chatBody("long", 4000, true)))
		if resp, err := c.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	go long()
	wait.Eventually(t, 10*time.Second, func() bool { return s.Stats().BatchSize == 1 }, "waiting for one running")
	go long()
	wait.Eventually(t, 10*time.Second, func() bool { st := s.Stats(); return st.BatchSize == 1 && st.QueueDepth == 1 }, "waiting for one queued")
	code, h, raw := post(t, c, base+"/v1/chat/completions", chatBody("one more", 5, false))
	if code != http.StatusTooManyRequests || h.Get("Retry-After") == "" {
		t.Errorf("status %d (%s), Retry-After %q; want 429 with Retry-After", code, raw, h.Get("Retry-After"))
	}
	cancel()
	wait.Eventually(t, 10*time.Second, func() bool { st := eng.Stats(); return st.Running == 0 && st.Waiting == 0 && st.KVPagesUsed == 0 }, "waiting for queue drained")
}

func TestChatErrorRate(t *testing.T) {
	t.Parallel()
	_, base := startLLM(t, newTestEngine(), func(c *Config) { c.Profile = json.RawMessage(`{"error_rate":0.5,` + llmProfile[1:]) })
	c := newClient(t)
	failed := 0
	const n = 200
	for i := range n {
		code, _, _ := post(t, c, base+"/v1/chat/completions", chatBody(fmt.Sprint("q", i), 1, false))
		switch code {
		case http.StatusInternalServerError:
			failed++
		case http.StatusOK:
		default:
			t.Fatalf("status %d; want 200 or 500", code)
		}
	}
	if failed < 70 || failed > 130 {
		t.Errorf("%d of %d failed; want about half", failed, n)
	}
}

func TestChatCancelOnClientDisconnect(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		stream bool
		// after is when the client leaves: after some streamed tokens, or
		// while a non-streamed answer is being generated.
		readTokens int
	}{
		{"stream", true, 5},
		{"non-stream", false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			eng := newTestEngine()
			s, base := startLLM(t, eng, nil)
			ctx, cancel := context.WithCancel(t.Context())
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(chatBody("tell me everything", 4000, tt.stream)))
			errc := make(chan error, 1)
			go func() {
				resp, err := newClient(t).Do(req)
				if err != nil {
					errc <- err
					return
				}
				defer resp.Body.Close()
				sc := bufio.NewScanner(resp.Body)
				for n := 0; n < tt.readTokens && sc.Scan(); {
					if sc.Text() != "" {
						n++
					}
				}
				errc <- nil
				_, _ = io.Copy(io.Discard, resp.Body) // until the cancel cuts it
			}()
			wait.Eventually(t, 10*time.Second, func() bool { return eng.Stats().Running == 1 }, "waiting for generation running")
			if tt.stream {
				if err := <-errc; err != nil {
					t.Fatalf("stream: %v", err)
				}
			}
			cancel()
			id := eng.submittedIDs()[0]
			wait.Eventually(t, 10*time.Second, func() bool { ok, _ := eng.sawCancel(id); return ok }, "waiting for engine saw the cancel")
			if _, used := eng.sawCancel(id); used != 0 {
				t.Errorf("pages used after the cancel = %d; want 0", used)
			}
			if st := eng.Stats(); st.Running != 0 || st.Waiting != 0 {
				t.Errorf("engine after the cancel: %+v; want nothing running or waiting", st)
			}
			wait.Eventually(t, 10*time.Second, func() bool { return s.Stats().Cancelled == 1 }, "waiting for replica counted the cancel")
			if st := s.Stats(); st.InFlight != 0 {
				t.Errorf("in flight after the cancel = %d; want 0", st.InFlight)
			}
		})
	}
}

func TestChatStats(t *testing.T) {
	t.Parallel()
	eng := newTestEngine()
	_, base := startLLM(t, eng, func(c *Config) { c.Endpoint = "support-chat" })
	c := newClient(t)
	for i := range 5 {
		if code, _, raw := post(t, c, base+"/v1/chat/completions", chatBody(fmt.Sprint("q", i), 20, false)); code != http.StatusOK {
			t.Fatalf("status %d %s", code, raw)
		}
	}
	resp, err := c.Get(base + "/v2/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	st := decode[Stats](t, raw)
	if st.ReplicaID != "r1" || st.Endpoint != "support-chat" || st.Version != "v42" || st.Task != TaskLLM || !st.Ready {
		t.Errorf("identity = %+v", st)
	}
	if st.Requests != 5 || st.Errors != 0 {
		t.Errorf("requests %d errors %d; want 5 and 0", st.Requests, st.Errors)
	}
	if st.KVPagesTotal != 256 || st.KVPagesUsed != 0 || st.KVUtilization != 0 || st.BatchSize != 0 || st.QueueDepth != 0 {
		t.Errorf("engine state = %+v; want an idle 256-page cache", st)
	}
	// A decode step is 1ms + 0.05ms per sequence and is really slept, so
	// TPOT is at least that; wall-clock timers add an unbounded delay under
	// load, so the exact values are checked in model time
	// (TestChatTimingInModelTime).
	if st.TPOTP50Ms < 1.05 || st.TTFTP50Ms < 1.06 || st.TTFTP99Ms < st.TTFTP50Ms || st.TPOTP99Ms < st.TPOTP50Ms {
		t.Errorf("ttft p50 %.2f p99 %.2f, tpot p50 %.2f p99 %.2f; want at least the step times", st.TTFTP50Ms, st.TTFTP99Ms, st.TPOTP50Ms, st.TPOTP99Ms)
	}
	if st.TokensPerSecond < 100/60.0 {
		t.Errorf("tokens/s = %.1f; want at least the 100 tokens over the window", st.TokensPerSecond)
	}
}
