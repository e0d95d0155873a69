package replica

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
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
	code, raw, err := postInTrace(newClient(t), url, body, callerTrace)
	if err != nil {
		t.Fatal(err)
	}
	return code, raw
}

// postInTrace sends body to url in the caller's trace traceID.
func postInTrace(c *http.Client, url, body, traceID string) (int, string, error) {
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+traceID+"-"+callerSpan+"-01")
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw), nil
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
// caller's, its queue wait, prefill then decode inside it, one decode
// event a token up to the bound and the rest counted, the counts and
// finish reason on its span. Streamed and not.
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
			spans := recorded(t, exp, 4)
			root, queue, prefill, decode := spans["ml_serving.runtime"], spans["ml_serving.batch_queue_wait"], spans["ml_serving.prefill"], spans["ml_serving.decode"]
			if root.SpanContext.TraceID().String() != callerTrace || root.Parent.SpanID().String() != callerSpan {
				t.Fatalf("runtime span in trace %s under %s; want the caller's", root.SpanContext.TraceID(), root.Parent.SpanID())
			}
			a := attrsOf(root)
			if a["model"] != "support-chat" || a["version"] != "v42" || a["simulated"] != "true" || a["http.response.status_code"] != "200" ||
				a["completion_tokens"] != strconv.Itoa(tokens) || a["prompt_tokens"] != "5" || a["finish_reason"] != "length" {
				t.Errorf("runtime span attributes %v", a)
			}
			for _, c := range []tracetest.SpanStub{queue, prefill, decode} {
				if c.Parent.SpanID() != root.SpanContext.SpanID() {
					t.Errorf("%s under %s; want the runtime span", c.Name, c.Parent.SpanID())
				}
			}
			if queue.StartTime.Before(root.StartTime) || queue.EndTime.Before(queue.StartTime) || !prefill.StartTime.Equal(queue.EndTime) ||
				decode.StartTime.Before(prefill.EndTime) || root.EndTime.Before(decode.EndTime) ||
				!prefill.EndTime.After(prefill.StartTime) || !decode.EndTime.After(decode.StartTime) {
				t.Errorf("runtime %v–%v, queue %v–%v, prefill %v–%v, decode %v–%v; want queue, prefill then decode inside the runtime's",
					root.StartTime, root.EndTime, queue.StartTime, queue.EndTime, prefill.StartTime, prefill.EndTime, decode.StartTime, decode.EndTime)
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

// TestSimulatedQueueWaitEndsAtAdmission: on an engine that runs one
// sequence at a time, a chat sent while another generates waits in the
// queue until the other's last token, and its trace says so: its
// batch_queue_wait starts before the first chat's decode ends and ends
// after it, where its prefill starts.
func TestSimulatedQueueWaitEndsAtAdmission(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	eng := newTestEngine()
	eng.maxBatch = 1
	eng.pause = make(chan struct{})
	srv, base := startLLM(t, eng, func(c *Config) {
		c.Tracer = sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	})
	const first, second = "11111111111111111111111111111111", "22222222222222222222222222222222"
	c := newClient(t)
	done := make(chan error, 2)
	post := func(trace string) {
		code, raw, err := postInTrace(c, base+"/v1/chat/completions", chatBody("Where is my parcel?", 20, false), trace)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("%d %s", code, raw)
		}
		done <- err
	}
	go post(first)
	// The first chat has run a step and the engine holds before its next.
	wait.Eventually(t, 10*time.Second, func() bool { eng.mu.Lock(); defer eng.mu.Unlock(); return eng.steps > 0 }, "the first chat's first step")
	go post(second)
	wait.Eventually(t, 10*time.Second, func() bool {
		eng.mu.Lock()
		defer eng.mu.Unlock()
		return len(eng.submitted) == 2 || srv.inbox.waiting() == 1
	}, "the second chat sent")
	close(eng.pause)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	wait.Eventually(t, 10*time.Second, func() bool { return len(exp.GetSpans()) >= 8 }, "spans: %v, want 8",
		wait.Show(func() any { return len(exp.GetSpans()) }))
	spans := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		spans[s.SpanContext.TraceID().String()+" "+s.Name] = s
	}
	firstDecode := spans[first+" ml_serving.decode"]
	queue, prefill := spans[second+" ml_serving.batch_queue_wait"], spans[second+" ml_serving.prefill"]
	if firstDecode.Name == "" || queue.Name == "" || prefill.Name == "" {
		t.Fatalf("spans %v; want each chat's queue wait, prefill and decode", slices.Sorted(maps.Keys(spans)))
	}
	if !queue.StartTime.Before(firstDecode.EndTime) || queue.EndTime.Before(firstDecode.EndTime) || !prefill.StartTime.Equal(queue.EndTime) {
		t.Errorf("second chat queued %v–%v, prefilled from %v; the first's decode ended %v: want the wait across it",
			queue.StartTime, queue.EndTime, prefill.StartTime, firstDecode.EndTime)
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
