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

	"modelplane/busapi"
	"modelplane/gguf"
	"modelplane/llm"
	"modelplane/runtime/llmserve"
	"modelplane/serveapi"
)

// A model directory holding a GGUF file is served by the LLM engine, with
// the replica token still required.
func TestGGUFDirectoryServesChat(t *testing.T) {
	t.Parallel()
	ts := serveGGUF(t, demoGGUFDir(t), Options{Token: "tok"})

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
	req.Header.Set(busapi.ReplicaTokenHeader, "tok")
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

// The version's serving.llm block, in the directory's configuration,
// sizes the engine: context window, KV cache (a window per sequence).
func TestGGUFSettingsSizeTheEngine(t *testing.T) {
	t.Parallel()
	dir := demoGGUFDir(t)
	cfg := `{"model":"chat","version":"v1","format":"gguf","file":"demo.gguf",
		"llm":{"max_model_len":1024,"max_num_seqs":2,"max_queued_requests":5}}`
	if err := os.WriteFile(filepath.Join(dir, serveapi.ConfigFile), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ts := serveGGUF(t, dir, Options{})
	get := func(path string, v any) {
		t.Helper()
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatal(err)
		}
	}
	var st struct {
		KVPagesTotal int `json:"kv_pages_total"`
	}
	get("/v2/stats", &st)
	if want := llmserve.KVPages(1024, 2); st.KVPagesTotal != want {
		t.Errorf("kv_pages_total = %d; want %d (two windows of 1,024 tokens)", st.KVPagesTotal, want)
	}
	var models struct {
		Data []struct {
			MaxModelLen int `json:"max_model_len"`
		} `json:"data"`
	}
	get("/v1/models", &models)
	if len(models.Data) != 1 || models.Data[0].MaxModelLen != 1024 {
		t.Errorf("/v1/models = %+v; want max_model_len 1024", models)
	}
}

// demoGGUFDir is a model directory holding the LLM engine's demo model
// (demo.gguf) alone.
func demoGGUFDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := llm.WriteDemoFile(filepath.Join(dir, "demo.gguf"), gguf.F32); err != nil {
		t.Fatal(err)
	}
	return dir
}

// serveGGUF loads dir into a runtime made with opt, warms it and serves
// it over HTTP until the test ends.
func serveGGUF(t *testing.T, dir string, opt Options) *httptest.Server {
	t.Helper()
	s := New(opt)
	if err := s.Load(dir, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return ts
}
