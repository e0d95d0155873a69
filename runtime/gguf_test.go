package runtime

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"modelplane/agent/proto"
	"modelplane/gguf"
	"modelplane/llm"
)

// A model directory holding a GGUF file is served by the LLM engine, with
// the replica token still required.
func TestGGUFDirectoryServesChat(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "demo.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	if err := llm.WriteDemo(f, gguf.F32); err != nil {
		t.Fatal(err)
	}
	f.Close()
	s := New(Options{Token: "tok"})
	if err := s.Load(dir, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)

	for path, want := range map[string]int{"/health": 200, "/v2/health/ready": 200, "/v2/stats": 200, "/metrics": 200} {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d; want %d", path, resp.StatusCode, want)
		}
	}
	resp, err := http.Get(ts.URL + "/v2/stats")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Task         string `json:"task"`
		KVPagesTotal int    `json:"kv_pages_total"`
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || st.Task != "llm" || st.KVPagesTotal < 1 {
		t.Errorf("/v2/stats = %+v (%v); want task llm with KV pages", st, err)
	}
	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/chat/completions",
		strings.NewReader(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":5,"temperature":0}`))
	req.Header.Set(proto.ReplicaTokenHeader, "tok")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct {
		Model   string `json:"model"`
		Choices []struct {
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || got.Model != "demo" || len(got.Choices) != 1 || got.Usage.CompletionTokens < 1 {
		t.Fatalf("chat: %d %+v", resp.StatusCode, got)
	}
}
