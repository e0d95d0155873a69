package replica

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// dataLines returns the data of an SSE body's events, [DONE] included.
func dataLines(t *testing.T, body []byte) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

func TestCompletion(t *testing.T) {
	t.Parallel()
	_, base := startLLM(t, newTestEngine(), nil)
	c := newClient(t)
	code, _, raw := post(t, c, base+"/v1/completions", `{"model":"m","prompt":"The gateway routes","max_tokens":4}`)
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, raw)
	}
	got := decode[textCompletion](t, raw)
	if got.Object != "text_completion" || got.Model != "m" || len(got.Choices) != 1 || got.Choices[0].Text == "" ||
		got.Choices[0].FinishReason == nil || *got.Choices[0].FinishReason != "length" {
		t.Errorf("completion = %+v; want one text choice ending at length", got)
	}
	// "The gateway routes" is 18 characters: 5 tokens at four a token.
	if want := (usage{PromptTokens: 5, CompletionTokens: 4, TotalTokens: 9}); got.Usage == nil || *got.Usage != want {
		t.Errorf("usage = %+v; want %+v", got.Usage, want)
	}
	// An array of strings is the same prompt joined.
	_, _, raw2 := post(t, c, base+"/v1/completions", `{"model":"m","prompt":["The gateway"," routes"],"max_tokens":4}`)
	if got2 := decode[textCompletion](t, raw2); got2.Choices[0].Text != got.Choices[0].Text {
		t.Errorf("array prompt text %q; want %q", got2.Choices[0].Text, got.Choices[0].Text)
	}
}

func TestCompletionStreamIncludeUsage(t *testing.T) {
	t.Parallel()
	_, base := startLLM(t, newTestEngine(), nil)
	c := newClient(t)
	code, h, raw := post(t, c, base+"/v1/completions", `{"prompt":"hello there","max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`)
	if code != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d %s: %s", code, h.Get("Content-Type"), raw)
	}
	lines := dataLines(t, raw)
	// Three tokens, the finish chunk, the usage chunk, [DONE].
	if len(lines) != 6 || lines[5] != "[DONE]" {
		t.Fatalf("events %q; want 3 tokens, finish, usage, [DONE]", lines)
	}
	for i, l := range lines[:4] {
		c := decode[textCompletion](t, []byte(l))
		if c.Object != "text_completion" || len(c.Choices) != 1 || c.Usage != nil {
			t.Errorf("event %d %s; want one choice and no usage", i, l)
		}
		if (i < 3) != (c.Choices[0].Text != "") || (i == 3) != (c.Choices[0].FinishReason != nil) {
			t.Errorf("event %d %s; want text on the tokens, finish_reason on the last", i, l)
		}
	}
	u := decode[usageChunk](t, []byte(lines[4]))
	if len(u.Choices) != 0 || u.Usage == nil || u.Usage.CompletionTokens != 3 || !strings.Contains(lines[4], `"choices":[]`) {
		t.Errorf("usage chunk %s; want empty choices and 3 completion tokens", lines[4])
	}
}

func TestChatStreamIncludeUsage(t *testing.T) {
	t.Parallel()
	_, base := startLLM(t, newTestEngine(), nil)
	c := newClient(t)
	body := `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"stream":true,"stream_options":{"include_usage":true}}`
	_, _, raw := post(t, c, base+"/v1/chat/completions", body)
	lines := dataLines(t, raw)
	if len(lines) != 5 || lines[4] != "[DONE]" {
		t.Fatalf("events %q; want 2 tokens, finish, usage, [DONE]", lines)
	}
	fin := decode[chatCompletion](t, []byte(lines[2]))
	if fin.Usage != nil || fin.Choices[0].FinishReason == nil {
		t.Errorf("finish chunk %s; want a finish_reason and, with include_usage, no usage", lines[2])
	}
	u := decode[usageChunk](t, []byte(lines[3]))
	if u.Object != "chat.completion.chunk" || len(u.Choices) != 0 || u.Usage == nil || u.Usage.CompletionTokens != 2 {
		t.Errorf("usage chunk %s; want no choices and 2 completion tokens", lines[3])
	}
	// Without include_usage the finish chunk carries the usage, as before.
	_, _, raw = post(t, c, base+"/v1/chat/completions", chatBody("hi", 2, true))
	s, err := readSSE(strings.NewReader(string(raw)))
	if err != nil || s.usage == nil || s.usage.CompletionTokens != 2 {
		t.Errorf("stream %+v, %v; want the usage on the finish chunk", s, err)
	}
}

// TestOpenAIErrors checks the OpenAI shape of the LLM routes' errors: the
// field in param, and a prompt past the context window as
// context_length_exceeded on the field holding it.
func TestOpenAIErrors(t *testing.T) {
	t.Parallel()
	// The real scheduler, with a context window of 64 tokens.
	p := `{"prefill_ms_per_token":0.05,"decode_base_ms":1,"decode_ms_per_seq":0.1,"kv_mb_per_token":0.8,"usable_gb":13,"max_model_len":64}`
	_, base := startReady(t, Config{Task: TaskLLM, Version: "v1", Profile: json.RawMessage(p), Seed: 1, MaxTokens: 100})
	c := newClient(t)
	long := strings.Repeat("x", 400) // 100 tokens
	tests := []struct {
		name, path, body string
		typ, param, code string
	}{
		{"chat context", "/v1/chat/completions", chatBody(long, 5, false), "invalid_request_error", "messages", "context_length_exceeded"},
		{"chat context streamed", "/v1/chat/completions", chatBody(long, 5, true), "invalid_request_error", "messages", "context_length_exceeded"},
		{"completion context", "/v1/completions", `{"prompt":"` + long + `","max_tokens":5}`, "invalid_request_error", "prompt", "context_length_exceeded"},
		{"chat n", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"n":3}`, "invalid_request_error", "n", ""},
		{"completion n", "/v1/completions", `{"prompt":"hi","n":2}`, "invalid_request_error", "n", ""},
		{"max_tokens", "/v1/completions", `{"prompt":"hi","max_tokens":1000}`, "invalid_request_error", "max_tokens", ""},
		{"no prompt", "/v1/completions", `{"model":"m"}`, "invalid_request_error", "prompt", ""},
		{"prompt a number", "/v1/completions", `{"prompt":5}`, "invalid_request_error", "prompt", ""},
		{"malformed", "/v1/completions", `{"prompt":`, "invalid_request_error", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, h, raw := post(t, c, base+tt.path, tt.body)
			if code != http.StatusBadRequest || h.Get("Content-Type") != "application/json" {
				t.Fatalf("status %d %s: %s; want 400 JSON", code, h.Get("Content-Type"), raw)
			}
			e := decode[struct {
				Error openAIError `json:"error"`
			}](t, raw).Error
			str := func(p *string) string {
				if p == nil {
					return ""
				}
				return *p
			}
			if e.Message == "" || e.Type != tt.typ || str(e.Param) != tt.param || str(e.Code) != tt.code {
				t.Errorf("error %s; want type %q param %q code %q", raw, tt.typ, tt.param, tt.code)
			}
		})
	}
}
