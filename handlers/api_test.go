package handlers

import (
	"net/http"
	"strings"
	"testing"
)

func TestAPISmoke(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	status, body := e.api(e.Keys["risk-admin"], http.MethodGet, "/endpoints", nil)
	if status != http.StatusOK || !strings.Contains(string(body), `"risk-endpoint"`) || strings.Contains(string(body), "search-endpoint") {
		t.Fatalf("GET /endpoints as risk admin = %d %s; want 200 with only risk-endpoint", status, body)
	}
}
