package tracing

import (
	"context"
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

func TestUnknownProtocolRefused(t *testing.T) {
	t.Parallel()
	env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}
	if _, err := fromEnv(context.Background(), "x", func(k string) string { return env[k] }); err == nil {
		t.Fatal("http/json accepted")
	}
}
