package runtime_test

import (
	"net/http"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"modelplane/runtime"
)

// TestPredictContinuesTheCallersTrace: a predict carrying the gateway's
// traceparent gets the replica's span under it, with the batcher's queue
// wait and the batch's execution as children that tile the request.
func TestPredictContinuesTheCallersTrace(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	o := &opened{}
	_, url := serve(t, modelDir(t, fraudConfig(), fraudModel(), "model.json"), o, runtime.Options{Tracer: tp})
	req, err := http.NewRequest("POST", url+"/predict", strings.NewReader(`{"instances": [{"amount": 5, "country": "us", "merchant": "grocery"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	spans := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		spans[s.Name] = s
	}
	root, ok := spans["ml_serving.runtime"]
	if !ok || root.SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || root.Parent.SpanID().String() != "00f067aa0ba902b7" {
		t.Fatalf("runtime span %+v; want it in the caller's trace under the caller's span", root)
	}
	q, x := spans["ml_serving.batch_queue_wait"], spans["ml_serving.gpu_inference"]
	if q.Parent.SpanID() != root.SpanContext.SpanID() || x.Parent.SpanID() != root.SpanContext.SpanID() {
		t.Fatalf("queue wait %v and execution %v; want both children of the runtime's span", q.Name, x.Name)
	}
	if !q.EndTime.Equal(x.StartTime) || x.EndTime.After(root.EndTime) || q.StartTime.Before(root.StartTime) {
		t.Errorf("queue %v–%v, execution %v–%v within %v–%v; want the execution to start where the wait ends, inside the request",
			q.StartTime, q.EndTime, x.StartTime, x.EndTime, root.StartTime, root.EndTime)
	}
}
