package handlers

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// TestRequestLogLine: one JSON line per request with request id, route,
// status, duration and the authenticated user — and never the key.
func TestRequestLogLine(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	var buf lockedBuffer
	e.srv.Log = slog.New(slog.NewJSONHandler(&buf, nil))
	key := e.Keys["risk-admin"]
	status, _ := e.api(key, http.MethodGet, "/endpoints/risk-endpoint", nil, "X-Request-Id", "req-123")
	if status != http.StatusOK {
		t.Fatalf("GET = %d", status)
	}
	buf.mu.Lock()
	out := buf.b.String()
	buf.mu.Unlock()
	if strings.Contains(out, key) {
		t.Fatalf("the API key was logged: %s", out)
	}
	var line map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["request_id"] == "req-123" {
			line = m
		}
	}
	if line == nil {
		t.Fatalf("no log line with request_id req-123 in %s", out)
	}
	for k, want := range map[string]any{"msg": "request", "route": "/api/v1/endpoints/{endpoint}", "status": float64(200), "teams": "risk"} {
		if line[k] != want {
			t.Errorf("log %s = %v, want %v (line %v)", k, line[k], want, line)
		}
	}
	if u, _ := line["user"].(string); !strings.HasPrefix(u, "mpk_") {
		t.Errorf("log user = %q, want the key's public prefix", u)
	}
	if _, ok := line["duration"]; !ok {
		t.Errorf("log line has no duration: %v", line)
	}
}
