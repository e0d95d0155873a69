package llmserve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"modelplane/busapi"
	"modelplane/gguf"
	"modelplane/internal/wait"
	"modelplane/llm"
)

// chainModel writes a byte-level model whose greedy continuation of a
// prompt ending in "o" is the bytes of chain, then EOS: a bigram in which
// each byte of the chain is followed by the next (llm.WriteBigram).
func chainModel(t *testing.T, chain []byte) string {
	t.Helper()
	tokens, types, bos, eos := llm.ByteVocab()
	seq := append([]int{'o'}, func() []int {
		var ids []int
		for _, b := range chain {
			ids = append(ids, int(b))
		}
		return append(ids, eos)
	}()...)
	r := len(seq)
	in := make([][]float32, len(tokens))
	out := make([][]float32, len(tokens))
	for i := range in {
		in[i], out[i] = make([]float32, r), make([]float32, r)
	}
	for i := 0; i+1 < len(seq); i++ {
		if in[seq[i]][i] != 0 {
			t.Fatalf("token %d twice in the chain: a bigram cannot follow it two ways", seq[i])
		}
		in[seq[i]][i] = 1
		out[seq[i+1]][i] = 30
	}
	var b bytes.Buffer
	if err := llm.WriteBigram(&b, llm.Bigram{Name: "chain", Tokens: tokens, Types: types, BOS: bos, EOS: eos,
		Context: 256, In: in, Out: out}, gguf.F32); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "chain.gguf")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// serve starts the replica API on the model at path.
func serve(t *testing.T, path string) *httptest.Server {
	t.Helper()
	e, tok, err := Load(path, Config{Pages: 64})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		wait.Eventually(t, 10*time.Second, func() bool { return released(e.Counts()) },
			"KV pages still held after the test: %+v", e.Counts())
		e.Stop()
	})
	ts := httptest.NewServer(NewServer(e, tok, Options{Model: "m"}).Handler())
	t.Cleanup(ts.Close)
	return ts
}

// TestStreamingJoinsSplitCharacters: a model whose tokens are bytes emits
// "é", "€" and "😀" a byte a token, then a byte that starts no character,
// then "x", then the first byte of a character it never finishes. Streamed,
// each character arrives whole in the chunk of its last byte, the lone
// byte as U+FFFD at once and the unfinished one flushed as U+FFFD in the
// final chunk; the text equals the non-streamed answer, every chunk is
// valid UTF-8, and there is one chunk per token counted in the usage.
func TestStreamingJoinsSplitCharacters(t *testing.T) {
	t.Parallel()
	chain := []byte("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xffx\xe3")
	want := "é€😀\uFFFDx\uFFFD"
	ts := serve(t, chainModel(t, chain))
	body := `{"model":"m","prompt":"go","max_tokens":40,"temperature":0%s}`

	resp := post(t, ts, "/v1/completions", fmt.Sprintf(body, ""))
	var whole chatAnswer
	decodeJSON(t, resp, &whole)
	if len(whole.Choices) != 1 || whole.Choices[0].Text != want || whole.Choices[0].FinishReason != "stop" {
		t.Fatalf("answer %+v; want %q ending at stop", whole, want)
	}
	if u := whole.Usage; u == nil || u.CompletionTokens != len(chain)+1 {
		t.Errorf("usage %+v; want %d completion tokens (the chain and EOS)", u, len(chain)+1)
	}

	lines := sse(t, post(t, ts, "/v1/completions", fmt.Sprintf(body, `,"stream":true,"stream_options":{"include_usage":true}`)))
	var texts []string
	tokens, finish := 0, ""
	var u *usage
	for _, l := range lines {
		if l == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Text         string  `json:"text"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *usage `json:"usage"`
		}
		if err := json.Unmarshal([]byte(l), &c); err != nil {
			t.Fatal(err)
		}
		for _, ch := range c.Choices {
			if !utf8.ValidString(ch.Text) {
				t.Errorf("chunk %q is not valid UTF-8", l)
			}
		}
		if c.Usage != nil {
			u = c.Usage
		}
		for _, ch := range c.Choices {
			texts = append(texts, ch.Text)
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			} else {
				tokens++
			}
		}
	}
	if got := strings.Join(texts, ""); got != want || finish != "stop" {
		t.Errorf("streamed %q (chunks %q), finish %q; want %q, stop", got, texts, finish, want)
	}
	// The chunks: "" for the lead bytes, whole characters at their last
	// byte, and the unfinished one in the final chunk.
	wantChunks := []string{"", "é", "", "", "€", "", "", "", "😀", "\uFFFD", "x", "", "", "\uFFFD"}
	if fmt.Sprint(texts) != fmt.Sprint(wantChunks) {
		t.Errorf("chunks %q; want %q", texts, wantChunks)
	}
	if u == nil || u.CompletionTokens != tokens || tokens != len(chain)+1 {
		t.Errorf("usage %+v after %d token chunks; want completion_tokens = chunks = %d", u, tokens, len(chain)+1)
	}
}

// postAs posts body to path as team, the gateway's team header.
func postAs(t *testing.T, ts *httptest.Server, team, path, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, ts.URL+path, strings.NewReader(body))
	req.Header.Set(busapi.TeamHeader, team)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestSecurityPrefixCacheKeepsTeamsApart: the same long prompt from two
// teams. The second team's request finds none of the first's pages in the
// prefix cache (so it cannot time whether the other team sent it); the
// first team's repeat finds all of its own.
func TestSecurityPrefixCacheKeepsTeamsApart(t *testing.T) {
	t.Parallel()
	e, tok := open(t, Config{Pages: 128})
	ts := httptest.NewServer(NewServer(e, tok, Options{Model: "m"}).Handler())
	t.Cleanup(ts.Close)
	body := fmt.Sprintf(`{"prompt":%q,"max_tokens":1,"temperature":0}`, strings.Repeat("a shared system prompt ", 20))
	hits := func(team string) int64 {
		t.Helper()
		before := e.Counts().PrefixHits
		resp := postAs(t, ts, team, "/v1/completions", body)
		var a chatAnswer
		decodeJSON(t, resp, &a)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d", team, resp.StatusCode)
		}
		return e.Counts().PrefixHits - before
	}
	if h := hits("team-a"); h != 0 {
		t.Fatalf("first request hit %d tokens; want 0", h)
	}
	if h := hits("team-b"); h != 0 {
		t.Errorf("team-b's request hit %d tokens of team-a's cached pages; want 0", h)
	}
	if h := hits("team-a"); h < 2*PageTokens {
		t.Errorf("team-a's repeat hit %d tokens; want its own pages (at least %d)", h, 2*PageTokens)
	}
	if h := hits("team-b"); h < 2*PageTokens {
		t.Errorf("team-b's repeat hit %d tokens; want its own pages (at least %d)", h, 2*PageTokens)
	}
}

// TestSecurityPromptRefusedBeforeEncoding: a prompt that cannot fit the
// context is refused on its byte count before the encoder runs (400
// context_length_exceeded), and one whose caller has gone is not encoded.
func TestSecurityPromptRefusedBeforeEncoding(t *testing.T) {
	t.Parallel()
	path := demoPath(t)
	m, err := llm.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	tok := llmTokenizer{m}
	huge := strings.Repeat("a", 8<<20-1024)
	before := m.Tokenizer().Ops()
	if _, err := tok.Prompt(context.Background(), huge, 2047); !errors.Is(err, llm.ErrTooLong) {
		t.Errorf("8 MiB prompt: %v; want llm.ErrTooLong", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tok.Prompt(ctx, strings.Repeat("word ", 300), 2047); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v; want context.Canceled", err)
	}
	if _, _, err := tok.Chat(ctx, []Message{{Role: "user", Content: strings.Repeat("word ", 300)}}, 2047); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled chat: %v; want context.Canceled", err)
	}
	if ops := m.Tokenizer().Ops() - before; ops != 0 {
		t.Errorf("%d merge operations; want none", ops)
	}
	ts := serve(t, path)
	resp := post(t, ts, "/v1/completions", fmt.Sprintf(`{"prompt":%q}`, huge))
	var got struct {
		Error struct {
			Param, Code *string
		} `json:"error"`
	}
	decodeJSON(t, resp, &got)
	if resp.StatusCode != http.StatusBadRequest || got.Error.Code == nil || *got.Error.Code != "context_length_exceeded" ||
		got.Error.Param == nil || *got.Error.Param != "prompt" {
		t.Errorf("8 MiB prompt: %d %+v; want 400 context_length_exceeded on prompt", resp.StatusCode, got.Error)
	}
}
