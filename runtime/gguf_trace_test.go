package runtime

import (
	"io"
	"net/http"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"modelplane/busapi"
	"modelplane/tracing"
)

// TestGGUFChatContinuesTheCallersTrace: a chat carrying the gateway's
// traceparent gets the runtime's span under it, with the generation's
// queue wait, prefill and decode as children that follow each other
// inside it, one decode event a token up to the bound and the rest
// counted, and the token counts and finish reason on the runtime's span.
// Probes are not traced.
func TestGGUFChatContinuesTheCallersTrace(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	ts := serveGGUF(t, demoGGUFDir(t), Options{Token: "tok", Tracer: sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))})
	if resp, err := http.Get(ts.URL + "/v2/health/ready"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("ready probe: %v, %v", resp, err)
	}

	const tokens = tracing.MaxDecodeEvents + 10
	body := `{"messages":[{"role":"user","content":"hello"}],"max_tokens":74,"ignore_eos":true,"stream":true}`
	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set(busapi.ReplicaTokenHeader, "tok")
	req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw := new(strings.Builder)
	_, _ = io.Copy(raw, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(raw.String(), "[DONE]") {
		t.Fatalf("chat = %d %s", resp.StatusCode, raw)
	}
	spans := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		spans[s.Name] = s
	}
	if len(spans) != 4 {
		t.Fatalf("spans %v; want the runtime's and three children, the probe untraced", names(exp.GetSpans()))
	}
	root := spans["ml_serving.runtime"]
	if root.SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || root.Parent.SpanID().String() != "00f067aa0ba902b7" {
		t.Fatalf("runtime span %+v; want it in the caller's trace under the caller's span", root)
	}
	attrs := map[string]string{}
	for _, a := range root.Attributes {
		attrs[string(a.Key)] = a.Value.String()
	}
	if attrs["completion_tokens"] != "74" || attrs["finish_reason"] != "length" || attrs["prompt_tokens"] == "" || attrs["http.response.status_code"] != "200" {
		t.Errorf("runtime span attributes %v; want 74 completion tokens, finish length, prompt tokens, status 200", attrs)
	}
	q, p, d := spans["ml_serving.batch_queue_wait"], spans["ml_serving.prefill"], spans["ml_serving.decode"]
	for _, c := range []tracetest.SpanStub{q, p, d} {
		if c.Parent.SpanID() != root.SpanContext.SpanID() {
			t.Fatalf("%s has parent %s; want the runtime's span", c.Name, c.Parent.SpanID())
		}
	}
	if q.StartTime.Before(root.StartTime) || !q.EndTime.Equal(p.StartTime) || !p.EndTime.Equal(d.StartTime) || d.EndTime.After(root.EndTime) || d.EndTime.Before(d.StartTime) {
		t.Errorf("queue %v–%v, prefill %v–%v, decode %v–%v in %v–%v; want them in turn inside the request",
			q.StartTime, q.EndTime, p.StartTime, p.EndTime, d.StartTime, d.EndTime, root.StartTime, root.EndTime)
	}
	if len(d.Events) != tracing.MaxDecodeEvents || d.Events[0].Name != "decode_step" {
		t.Fatalf("decode events %d (%v); want %d decode steps", len(d.Events), d.Events[0].Name, tracing.MaxDecodeEvents)
	}
	var dropped int64
	for _, a := range d.Attributes {
		if a.Key == "dropped_events" {
			dropped = a.Value.AsInt64()
		}
	}
	if dropped != tokens-1-tracing.MaxDecodeEvents {
		t.Errorf("dropped_events %d; want %d (73 decode steps, %d kept)", dropped, tokens-1-tracing.MaxDecodeEvents, tracing.MaxDecodeEvents)
	}
	for i, e := range d.Events {
		if e.Time.Before(d.StartTime) || e.Time.After(d.EndTime) || i > 0 && e.Time.Before(d.Events[i-1].Time) {
			t.Fatalf("decode event %d at %v, decode %v–%v; want in order inside the span", i, e.Time, d.StartTime, d.EndTime)
		}
	}

	// Not streamed, the same spans: three tokens, two decode steps.
	exp.Reset()
	req, _ = http.NewRequest(http.MethodPost, ts.URL+"/v1/completions", strings.NewReader(`{"prompt":"the","max_tokens":3,"ignore_eos":true}`))
	req.Header.Set(busapi.ReplicaTokenHeader, "tok")
	if resp, err = http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("completion: %v, %v", resp, err)
	}
	resp.Body.Close()
	spans = map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		spans[s.Name] = s
	}
	if d := spans["ml_serving.decode"]; len(spans) != 4 || len(d.Events) != 2 || spans["ml_serving.runtime"].Parent.IsValid() {
		t.Errorf("completion's spans %v, decode events %d; want a root runtime span (no caller's trace) and its three children, 2 decode steps",
			names(exp.GetSpans()), len(d.Events))
	}
}

func names(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}
