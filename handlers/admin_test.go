package handlers

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestMetricsOnlyOnAdmin: the public listener answers 404 on /metrics and
// /sd/runtimes, whose labels name every team's routes, and the admin
// handler serves them.
func TestMetricsOnlyOnAdmin(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	resp, err := http.Get(e.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("public GET /metrics = %d, want 404; body %.200s", resp.StatusCode, body)
	}
	if strings.Contains(string(body), "mp_http_requests_total") {
		t.Errorf("public GET /metrics serves the metrics: %.200s", body)
	}

	rec := httptest.NewRecorder()
	e.srv.AdminHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `mp_http_requests_total{method="GET",route="unmatched",status="404"}`) {
		t.Errorf("admin GET /metrics = %d, want 200 counting the public 404; body %.300s", rec.Code, rec.Body.String())
	}
	// Service discovery, which names every team's replicas, is the
	// admin listener's too: a fleet with no ready replica is [], which
	// Prometheus reads as no targets.
	if resp, err := http.Get(e.URL + "/sd/runtimes"); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusNotFound {
		t.Errorf("public GET /sd/runtimes = %d, want 404", resp.StatusCode)
	}
	rec = httptest.NewRecorder()
	e.srv.AdminHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/sd/runtimes", nil))
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" || strings.TrimSpace(rec.Body.String()) != "[]" {
		t.Errorf("admin GET /sd/runtimes = %d %q %q, want 200 application/json []", rec.Code, rec.Header().Get("Content-Type"), rec.Body.String())
	}
	rec = httptest.NewRecorder()
	e.srv.AdminHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("admin GET /healthz = %d, want 200", rec.Code)
	}
}
