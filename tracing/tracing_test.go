package tracing

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

func TestEnabled(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		env  map[string]string
		want bool
	}{
		{"nothing set is off", nil, false},
		{"an OTLP endpoint turns it on", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true},
		{"a traces endpoint turns it on", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true},
		{"the otlp exporter turns it on", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{"exporter none wins over an endpoint", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, false},
		{"the SDK disabled wins", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, false},
	} {
		if got := enabled(func(k string) string { return tt.env[k] }); got != tt.want {
			t.Errorf("%s: enabled = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestExportsOverHTTP: with an endpoint set, spans leave over OTLP/HTTP
// (protobuf) to <endpoint>/v1/traces when the provider shuts down.
func TestExportsOverHTTP(t *testing.T) {
	var mu sync.Mutex
	var got []*http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r)
		mu.Unlock()
	}))
	defer srv.Close()
	env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL}
	for k, v := range env {
		t.Setenv(k, v)
	}
	p, err := fromEnv(context.Background(), "modelplane-test", func(k string) string { return env[k] })
	if err != nil || !p.On {
		t.Fatalf("fromEnv = %+v, %v; want on", p, err)
	}
	_, span := p.Tracer("t").Start(context.Background(), "ml_serving.request")
	span.End()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) == 0 || got[0].URL.Path != "/v1/traces" || got[0].Header.Get("Content-Type") != "application/x-protobuf" {
		t.Fatalf("receiver got %d requests (first %+v), want an OTLP/HTTP export to /v1/traces", len(got), got)
	}
}

func TestUnknownProtocolRefused(t *testing.T) {
	t.Parallel()
	env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}
	if _, err := fromEnv(context.Background(), "x", func(k string) string { return env[k] }); err == nil {
		t.Fatal("http/json accepted")
	}
}
