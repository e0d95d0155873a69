package gateway_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"modelplane/gateway"
	"modelplane/internal/wait"
	"modelplane/sim/replica"
)

// oaError is OpenAI's error body.
type oaError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// openaiErr decodes r's body as OpenAI's error, failing on any other shape.
func openaiErr(t *testing.T, r result) oaError {
	t.Helper()
	var e oaError
	dec := json.NewDecoder(strings.NewReader(string(r.body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil || r.header.Get("Content-Type") != "application/json" || e.Error.Message == "" {
		t.Fatalf("%d %s %s: not an OpenAI error (%v)", r.status, r.header.Get("Content-Type"), r.body, err)
	}
	return e
}

func deref(p *string) string {
	if p == nil {
		return "<null>"
	}
	return *p
}

// TestOpenAIRoutesShareThePath: the model field selects the endpoint and
// the rest is the per-endpoint path's: a pin picks the version, and the
// per-endpoint completions path answers like the OpenAI one.
func TestOpenAIRoutesShareThePath(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, b := startReplica(t, "v1", replica.TaskLLM), startReplica(t, "v2", replica.TaskLLM)
	e.putRoute(t, route("support-chat", "search", "llm", 1, ver("v1", 99, a), ver("v2", 1, b)))
	key := e.newKey(t, "search", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")

	chat := `{"model":"support-chat","messages":[{"role":"user","content":"hi"}],"max_tokens":3}`
	if r := call(t, g.url, "/v1/chat/completions", key, chat); r.status != http.StatusOK || r.header.Get("X-Model-Version") == "" {
		t.Errorf("chat: %d version %q %s; want 200 from a version", r.status, r.header.Get("X-Model-Version"), r.body)
	}
	// v2 takes 1 percent: a pin reaches it every time.
	for range 5 {
		if r := call(t, g.url, "/v1/chat/completions", key, chat, "X-Model-Version", "v2"); r.status != http.StatusOK || r.header.Get("X-Model-Version") != "v2" {
			t.Errorf("pinned chat: %d version %q; want 200 from v2", r.status, r.header.Get("X-Model-Version"))
		}
	}
	comp := `{"model":"support-chat","prompt":"The gateway","max_tokens":2}`
	for _, path := range []string{"/v1/completions", "/v1/endpoints/support-chat/completions"} {
		r := call(t, g.url, path, key, comp)
		var got struct {
			Object  string `json:"object"`
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(r.body, &got); r.status != http.StatusOK || err != nil || got.Object != "text_completion" || len(got.Choices) != 1 || got.Choices[0].Text == "" {
			t.Errorf("%s: %d %s; want a text completion", path, r.status, r.body)
		}
	}
	// The per-endpoint paths keep the problem shape.
	if r := call(t, g.url, chatPath("nope"), key, chat); r.status != http.StatusNotFound || r.header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("per-endpoint 404: %d %s; want a problem", r.status, r.header.Get("Content-Type"))
	}
}

// TestCompletionsWhateverTheChatSchema: an LLM endpoint whose input
// schema is a chat request's (messages required, as the demo's
// support-chat has) answers /v1/completions, on both paths; its chat
// route still holds chat bodies to the schema, and a completion is
// still held to the completion's shape.
func TestCompletionsWhateverTheChatSchema(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rt := route("support-chat", "search", "llm", 1, ver("v1", 100, startReplica(t, "v1", replica.TaskLLM)))
	rt.InputSchema = json.RawMessage(`{"type":"object","properties":{"messages":{"type":"array","minItems":1}},"required":["messages"]}`)
	e.putRoute(t, rt)
	key := e.newKey(t, "search", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")

	comp := `{"model":"support-chat","prompt":"The gateway","max_tokens":2}`
	for _, path := range []string{"/v1/completions", "/v1/endpoints/support-chat/completions"} {
		if r := call(t, g.url, path, key, comp); r.status != http.StatusOK {
			t.Errorf("%s: %d %s; want 200", path, r.status, r.body)
		}
	}
	if r := call(t, g.url, "/v1/chat/completions", key, `{"model":"support-chat","messages":"hi"}`); r.status != http.StatusBadRequest {
		t.Errorf("chat against its schema: %d %s; want 400", r.status, r.body)
	} else if got := openaiErr(t, r); deref(got.Error.Param) != "messages" {
		t.Errorf("chat against its schema: param %s; want messages", deref(got.Error.Param))
	}
	if r := call(t, g.url, "/v1/completions", key, `{"model":"support-chat","max_tokens":2}`); r.status != http.StatusBadRequest {
		t.Errorf("completion without a prompt: %d %s; want 400", r.status, r.body)
	} else if got := openaiErr(t, r); deref(got.Error.Param) != "prompt" {
		t.Errorf("completion without a prompt: param %s; want prompt", deref(got.Error.Param))
	}
}

// TestOpenAIRouteErrors: the gateway's own errors on the OpenAI routes
// are in OpenAI's shape, with the status, type, code and param a client
// branches on.
func TestOpenAIRouteErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putRoute(t, route("support-chat", "search", "llm", 1, ver("v1", 100, startReplica(t, "v1", replica.TaskLLM))))
	e.putRoute(t, route("starting", "search", "llm", 1, ver("v1", 100)))
	zero := route("sleepy", "search", "llm", 1, ver("v1", 100))
	zero.ScaledToZero = true
	e.putRoute(t, zero)
	key := e.newKey(t, "search", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{MaxBodyBytes: 4096, RetryAfter: 3 * time.Second})
	wait.Eventually(t, 10*time.Second, func() bool { _, ok := g.RouteGeneration("sleepy"); return ok && g.Ready() }, "waiting for routes")

	msgs := `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name, path, key, body   string
		status                  int
		typ, code, param, retry string
	}{
		{"no key", "/v1/chat/completions", "", `{"model":"support-chat",` + msgs + `}`, 401, "invalid_request_error", "invalid_api_key", "<null>", ""},
		{"no model", "/v1/chat/completions", key, `{` + msgs + `}`, 400, "invalid_request_error", "<null>", "model", ""},
		{"model not a string", "/v1/chat/completions", key, `{"model":5,` + msgs + `}`, 400, "invalid_request_error", "<null>", "model", ""},
		{"not JSON", "/v1/chat/completions", key, `{"model":`, 400, "invalid_request_error", "<null>", "<null>", ""},
		{"unknown model", "/v1/completions", key, `{"model":"nope","prompt":"hi"}`, 404, "invalid_request_error", "model_not_found", "model", ""},
		{"no messages", "/v1/chat/completions", key, `{"model":"support-chat","messages":[]}`, 400, "invalid_request_error", "<null>", "messages", ""},
		{"no prompt", "/v1/completions", key, `{"model":"support-chat","prompt":""}`, 400, "invalid_request_error", "<null>", "prompt", ""},
		{"n of 2", "/v1/completions", key, `{"model":"support-chat","prompt":"hi","n":2}`, 400, "invalid_request_error", "<null>", "n", ""},
		{"too large", "/v1/completions", key, `{"model":"support-chat","prompt":"` + strings.Repeat("x", 5000) + `"}`, 413, "invalid_request_error", "request_too_large", "<null>", ""},
		{"no replica", "/v1/chat/completions", key, `{"model":"starting",` + msgs + `}`, 503, "server_error", "no_replica_ready", "<null>", "3"},
		// A 2xx would be taken for an answer: scaled to zero is a 503 the
		// client retries after Retry-After.
		{"scaled to zero", "/v1/chat/completions", key, `{"model":"sleepy",` + msgs + `}`, 503, "server_error", "scaled_to_zero", "<null>", "3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := call(t, g.url, tt.path, tt.key, tt.body)
			got := openaiErr(t, r).Error
			if r.status != tt.status || got.Type != tt.typ || deref(got.Code) != tt.code || deref(got.Param) != tt.param ||
				r.header.Get("Retry-After") != tt.retry {
				t.Errorf("%d Retry-After %q %s; want %d Retry-After %q type %s code %s param %s",
					r.status, r.header.Get("Retry-After"), r.body, tt.status, tt.retry, tt.typ, tt.code, tt.param)
			}
		})
	}
}

// TestOpenAIModels: GET /v1/models lists the LLM endpoints the caller may
// call in OpenAI's list shape; an org-wide admin key sees every team's.
func TestOpenAIModels(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putRoute(t, route("support-chat", "search", "llm", 1, ver("v1", 100)))
	e.putRoute(t, route("faq-chat", "search", "llm", 1, ver("v1", 100)))
	e.putRoute(t, route("fraud", "search", "classification", 1, ver("v1", 100)))
	e.putRoute(t, route("pay-chat", "payments", "llm", 1, ver("v1", 100)))
	key := e.newKey(t, "search", "engineer", nil)
	admin := e.newKey(t, "", "platform_admin", nil)
	g := startGateway(t, e.nc, gateway.Config{})
	wait.Eventually(t, 10*time.Second, func() bool { _, ok := g.RouteGeneration("pay-chat"); return ok && g.Ready() }, "waiting for routes")

	list := func(k string) (int, string, []string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, g.url+"/v1/models", nil)
		if k != "" {
			req.Header.Set("Authorization", "Bearer "+k)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var l struct {
			Object string `json:"object"`
			Data   []struct {
				ID      string `json:"id"`
				Object  string `json:"object"`
				Created *int64 `json:"created"`
				OwnedBy string `json:"owned_by"`
			} `json:"data"`
		}
		_ = json.Unmarshal(b, &l)
		var ids []string
		for _, m := range l.Data {
			if m.Object != "model" || m.Created == nil || m.OwnedBy == "" {
				t.Errorf("entry %+v; want object model, created and owned_by", m)
			}
			ids = append(ids, m.OwnedBy+"/"+m.ID)
		}
		if resp.StatusCode == http.StatusOK && l.Object != "list" {
			t.Errorf("object %q; want list", l.Object)
		}
		return resp.StatusCode, string(b), ids
	}
	if code, _, ids := list(key); code != 200 || strings.Join(ids, ",") != "search/faq-chat,search/support-chat" {
		t.Errorf("team key: %d %v; want search's two LLM endpoints", code, ids)
	}
	if code, _, ids := list(admin); code != 200 || strings.Join(ids, ",") != "search/faq-chat,payments/pay-chat,search/support-chat" {
		t.Errorf("admin key: %d %v; want every LLM endpoint", code, ids)
	}
	one := func(name string) result {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, g.url+"/v1/models/"+name, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return result{status: resp.StatusCode, header: resp.Header, body: b}
	}
	if r := one("faq-chat"); r.status != 200 || string(r.body) != `{"id":"faq-chat","object":"model","created":0,"owned_by":"search"}`+"\n" {
		t.Errorf("GET /v1/models/faq-chat: %d %s", r.status, r.body)
	}
	for _, name := range []string{"pay-chat", "fraud", "nope"} {
		if r := one(name); r.status != 404 || deref(openaiErr(t, r).Error.Code) != "model_not_found" {
			t.Errorf("GET /v1/models/%s: %d %s; want 404 model_not_found", name, r.status, r.body)
		}
	}
	if code, body, _ := list(""); code != 401 || !strings.Contains(body, `"code":"invalid_api_key"`) {
		t.Errorf("no key: %d %s; want 401 invalid_api_key", code, body)
	}
}

// TestOpenAIReplicaBusyPassesOn: a replica that refuses for a full queue
// (the built-in LLM runtime's 429 in OpenAI's shape, with Retry-After)
// reaches the client as it answered, on the OpenAI route too.
func TestOpenAIReplicaBusyPassesOn(t *testing.T) {
	t.Parallel()
	busy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"error":{"message":"the runtime's waiting queue is full; retry later","type":"rate_limit_error","param":null,"code":"overloaded"}}`)
	}))
	t.Cleanup(busy.Close)
	e := newEnv(t)
	e.putRoute(t, route("support-chat", "search", "llm", 1, ver("v1", 100, strings.TrimPrefix(busy.URL, "http://"))))
	key := e.newKey(t, "search", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")
	for _, path := range []string{"/v1/chat/completions", chatPath("support-chat")} {
		r := call(t, g.url, path, key, `{"model":"support-chat","messages":[{"role":"user","content":"hi"}]}`)
		got := openaiErr(t, r).Error
		if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") != "1" || got.Type != "rate_limit_error" || deref(got.Code) != "overloaded" {
			t.Errorf("%s: %d Retry-After %q %s; want the replica's 429 with Retry-After 1, rate_limit_error, overloaded",
				path, r.status, r.header.Get("Retry-After"), r.body)
		}
	}
}
