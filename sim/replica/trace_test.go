package replica

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"modelplane/internal/wait"
	"modelplane/tracing"
)

const (
	callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan  = "00f067aa0ba902b7"
)

// tracedPost sends body to url as the gateway does, with its traceparent.
func tracedPost(t *testing.T, url, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+callerTrace+"-"+callerSpan+"-01")
	resp, err := newClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

// recorded waits until the replica has ended its span for the request
// (after the answer reached the client) and returns the spans by name.
func recorded(t *testing.T, exp *tracetest.InMemoryExporter, want int) map[string]tracetest.SpanStub {
	t.Helper()
	wait.Eventually(t, 10*time.Second, func() bool { return len(exp.GetSpans()) >= want }, "spans: %v, want %d",
		wait.Show(func() any { return len(exp.GetSpans()) }), want)
	spans := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		spans[s.Name] = s
	}
	if len(spans) != want {
		t.Fatalf("spans %v; want %d", spans, want)
	}
	return spans
}

func attrsOf(s tracetest.SpanStub) map[string]string {
	m := map[string]string{}
	for _, a := range s.Attributes {
		m[string(a.Key)] = a.Value.String()
	}
	return m
}

// TestSimulatedChatContinuesTheCallersTrace: a simulated LLM replica
// traces a generation as the built-in runtime does, so a trace through
// the gateway reaches the demo's GPU endpoints: its span under the
// caller's, prefill then decode inside it, one decode event a token up to
// the bound and the rest counted, the counts and finish reason on its
// span. Streamed and not.
func TestSimulatedChatContinuesTheCallersTrace(t *testing.T) {
	t.Parallel()
	const tokens = tracing.MaxDecodeEvents + 10
	for _, stream := range []bool{true, false} {
		t.Run("stream="+strconv.FormatBool(stream), func(t *testing.T) {
			t.Parallel()
			exp := tracetest.NewInMemoryExporter()
			_, base := startLLM(t, newTestEngine(), func(c *Config) {
				c.Endpoint = "support-chat"
				c.Tracer = sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
			})
			if code, raw := tracedPost(t, base+"/v1/chat/completions", chatBody("Where is my parcel?", tokens, stream)); code != http.StatusOK {
				t.Fatalf("chat = %d %s", code, raw)
			}
			spans := recorded(t, exp, 3)
			root, prefill, decode := spans["ml_serving.runtime"], spans["ml_serving.prefill"], spans["ml_serving.decode"]
			if root.SpanContext.TraceID().String() != callerTrace || root.Parent.SpanID().String() != callerSpan {
				t.Fatalf("runtime span in trace %s under %s; want the caller's", root.SpanContext.TraceID(), root.Parent.SpanID())
			}
			a := attrsOf(root)
			if a["model"] != "support-chat" || a["version"] != "v42" || a["simulated"] != "true" || a["http.response.status_code"] != "200" ||
				a["completion_tokens"] != strconv.Itoa(tokens) || a["prompt_tokens"] != "5" || a["finish_reason"] != "length" {
				t.Errorf("runtime span attributes %v", a)
			}
			for _, c := range []tracetest.SpanStub{prefill, decode} {
				if c.Parent.SpanID() != root.SpanContext.SpanID() {
					t.Errorf("%s under %s; want the runtime span", c.Name, c.Parent.SpanID())
				}
			}
			if prefill.StartTime.Before(root.StartTime) || decode.StartTime.Before(prefill.EndTime) || root.EndTime.Before(decode.EndTime) ||
				!prefill.EndTime.After(prefill.StartTime) || !decode.EndTime.After(decode.StartTime) {
				t.Errorf("runtime %v–%v, prefill %v–%v, decode %v–%v; want prefill then decode inside the runtime's",
					root.StartTime, root.EndTime, prefill.StartTime, prefill.EndTime, decode.StartTime, decode.EndTime)
			}
			if got := attrsOf(decode); got["tokens"] != strconv.Itoa(tokens-1) || got["dropped_events"] != strconv.Itoa(tokens-1-tracing.MaxDecodeEvents) {
				t.Errorf("decode attributes %v; want %d tokens, %d dropped", got, tokens-1, tokens-1-tracing.MaxDecodeEvents)
			}
			if len(decode.Events) != tracing.MaxDecodeEvents || decode.Events[0].Name != "decode_step" {
				t.Errorf("decode events %d; want %d decode steps", len(decode.Events), tracing.MaxDecodeEvents)
			}
		})
	}
}

// TestSimulatedPredictContinuesTheCallersTrace: a simulated classifier's
// span is under the caller's, with its modelled wait as
// ml_serving.gpu_inference; probes are not traced.
func TestSimulatedPredictContinuesTheCallersTrace(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	_, base := startReady(t, Config{Task: TaskClassification, Profile: []byte(classifierProfile), Seed: 1,
		Tracer: sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))})
	if code := get(t, newClient(t), base+"/v2/health/ready"); code != http.StatusOK {
		t.Fatalf("ready = %d", code)
	}
	if code, raw := tracedPost(t, base+"/predict", instances(0, 3)); code != http.StatusOK {
		t.Fatalf("predict = %d %s", code, raw)
	}
	spans := recorded(t, exp, 2)
	root, inf := spans["ml_serving.runtime"], spans["ml_serving.gpu_inference"]
	if root.SpanContext.TraceID().String() != callerTrace || inf.Parent.SpanID() != root.SpanContext.SpanID() {
		t.Fatalf("spans %v; want the runtime's in the caller's trace and gpu_inference under it", spans)
	}
	if a := attrsOf(root); a["model"] != "fraud-scoring" || a["simulated"] != "true" || a["http.response.status_code"] != "200" {
		t.Errorf("runtime span attributes %v", a)
	}
	if a := attrsOf(inf); a["rows"] != "3" || inf.EndTime.Before(inf.StartTime) || root.EndTime.Before(inf.EndTime) {
		t.Errorf("gpu_inference %v %v–%v inside %v–%v", a, inf.StartTime, inf.EndTime, root.StartTime, root.EndTime)
	}
}
