package tracing

import (
	"context"
	"strings"
	"testing"
	"time"
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

// TestSamplerFromEnv: OTEL_TRACES_SAMPLER and its argument choose the
// sampler the SDK and the request spans share; parent-based ratio 1 when
// unset; a name or ratio modelplane does not take is refused, named.
func TestSamplerFromEnv(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		env  map[string]string
		want string // the sampler's description; empty: an error naming wantErr
		err  string
	}{
		{"unset is parent-based ratio 1", nil, "ParentBased{root:TraceIDRatioBased{1},", ""},
		{"the argument sets the ratio", map[string]string{"OTEL_TRACES_SAMPLER_ARG": "0.25"}, "ParentBased{root:TraceIDRatioBased{0.25},", ""},
		{"traceidratio is not parent-based", map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.5"}, "TraceIDRatioBased{0.5}", ""},
		{"always_off", map[string]string{"OTEL_TRACES_SAMPLER": "always_off"}, "AlwaysOffSampler", ""},
		{"parentbased_always_on", map[string]string{"OTEL_TRACES_SAMPLER": "parentbased_always_on"}, "ParentBased{root:AlwaysOnSampler,", ""},
		{"a ratio above 1", map[string]string{"OTEL_TRACES_SAMPLER_ARG": "2"}, "", "OTEL_TRACES_SAMPLER_ARG"},
		{"a ratio that is no number", map[string]string{"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "half"}, "", "OTEL_TRACES_SAMPLER_ARG"},
		{"a sampler modelplane does not have", map[string]string{"OTEL_TRACES_SAMPLER": "jaeger_remote"}, "", "OTEL_TRACES_SAMPLER"},
	} {
		s, err := samplerFrom(func(k string) string { return tt.env[k] })
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%s: err = %v, want one naming %s", tt.name, err, tt.err)
		case tt.err == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.err == "" && !strings.HasPrefix(s.Description(), tt.want):
			t.Errorf("%s: sampler %s, want %s…", tt.name, s.Description(), tt.want)
		}
	}
}

// TestBatchFromEnv: the OTEL_BSP_* settings size the request spans'
// batches as the SDK's; a setting that is not a positive number is
// refused, named.
func TestBatchFromEnv(t *testing.T) {
	t.Parallel()
	env := map[string]string{"OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_BSP_MAX_QUEUE_SIZE": "64", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "128", "OTEL_BSP_EXPORT_TIMEOUT": "2000"}
	got, err := batchFrom(func(k string) string { return env[k] })
	want := batchConfig{delay: 100 * time.Millisecond, queue: 64, batch: 64, timeout: 2 * time.Second}
	if err != nil || got != want {
		t.Errorf("batchFrom = %+v, %v; want %+v (a batch no larger than the queue)", got, err, want)
	}
	if got, err := batchFrom(func(string) string { return "" }); err != nil || got != defaultBatch() {
		t.Errorf("batchFrom of nothing = %+v, %v; want the defaults", got, err)
	}
	for _, bad := range []string{"OTEL_BSP_SCHEDULE_DELAY", "OTEL_BSP_MAX_QUEUE_SIZE"} {
		if _, err := batchFrom(func(k string) string { return map[string]string{bad: "-1"}[k] }); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("%s=-1: err = %v, want one naming it", bad, err)
		}
	}
}
