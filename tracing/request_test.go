package tracing

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/quartz"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"modelplane/internal/otlptest"
	"modelplane/internal/wait"
)

// sampleRequests are request spans as the gateway ends them: a root, a
// child of a remote caller with a trace state (and attributes of every
// kind, one longer than a one-byte length), an error, and one with more
// attributes than it holds.
func sampleRequests(t *testing.T) []RequestSpan {
	t.Helper()
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	ts, err := trace.ParseTraceState("vendor=abc")
	if err != nil {
		t.Fatal(err)
	}
	sc := func(sid string, remote bool, state trace.TraceState, flags trace.TraceFlags) trace.SpanContext {
		id, _ := trace.SpanIDFromHex(sid)
		return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: id, TraceFlags: flags, TraceState: state, Remote: remote})
	}
	start := time.Date(2026, 12, 5, 7, 0, 0, 123, time.UTC)
	spans := make([]RequestSpan, 4)
	spans[0] = RequestSpan{Context: sc("00f067aa0ba902b7", false, trace.TraceState{}, trace.FlagsSampled), Name: "ml_serving.request", Start: start, End: start.Add(time.Millisecond)}
	// The first two set theirs as the gateway does, one at a time by
	// type; the others through SetAttributes.
	spans[0].SetString("endpoint", "fraud-scoring")
	spans[0].SetInt("http.response.status_code", 200)
	spans[0].SetInt("ml_serving.authn_us", 12)
	spans[1] = RequestSpan{Context: sc("1111111111111111", false, ts, trace.FlagsSampled), Parent: sc("2222222222222222", true, ts, trace.FlagsSampled),
		Name: "ml_serving.request", Start: start, End: start.Add(2 * time.Millisecond)}
	spans[1].SetBool("pinned", true)
	spans[1].SetString("version", "v23")
	spans[1].SetString("replica", strings.Repeat("r", 200))
	spans[1].SetAttributes(attribute.Float64("score", 0.87))
	spans[1].SetInt("negative", -3)
	spans[2] = RequestSpan{Context: sc("3333333333333333", false, trace.TraceState{}, trace.FlagsSampled), Name: "ml_serving.request", Start: start, End: start, Error: "Bad Gateway"}
	spans[2].SetAttributes(attribute.Int("http.response.status_code", 502))
	spans[3] = RequestSpan{Context: sc("4444444444444444", false, trace.TraceState{}, trace.FlagsSampled), Name: "ml_serving.request", Start: start, End: start}
	for i := range MaxRequestAttrs + 2 {
		spans[3].SetAttributes(attribute.Int("a"+string(rune('a'+i)), i))
	}
	return spans
}

// TestRequestSpansMatchTheStockExporter: request spans written straight
// from their values decode, with the OpenTelemetry project's protocol
// types, to exactly what the project's own OTLP/HTTP exporter sends for
// the same spans as the SDK's read-only spans; past MaxRequestAttrs an
// attribute is counted as dropped.
func TestRequestSpansMatchTheStockExporter(t *testing.T) {
	t.Parallel()
	spans := sampleRequests(t)
	if got := spans[3].dropped; got != 2 {
		t.Fatalf("span with %d attributes dropped %d, want 2", MaxRequestAttrs+2, got)
	}
	// A batch of 600, whose outer messages need lengths of three bytes.
	many := make([]RequestSpan, 0, 600)
	for len(many) < cap(many) {
		many = append(many, spans...)
	}
	res := resource.NewSchemaless(attribute.String("service.name", "modelplane-gateway"))
	scope := instrumentation.Scope{Name: GatewayScope}
	var e encoder
	for _, batch := range [][]RequestSpan{spans, many, spans} { // the encoder's buffers used again
		var ours coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(e.encodeRequests(res, scope, batch), &ours); err != nil {
			t.Fatal(err)
		}
		ro := make([]sdktrace.ReadOnlySpan, len(batch))
		for i := range batch {
			ro[i] = batch[i].snapshot(res, scope)
		}
		stock := bodyOf(t, ro, func(u string) sdktrace.SpanExporter {
			x, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(u))
			if err != nil {
				t.Fatal(err)
			}
			return x
		})
		if n := len(ours.GetResourceSpans()[0].GetScopeSpans()[0].GetSpans()); n != len(batch) {
			t.Fatalf("%d spans written, want %d", n, len(batch))
		}
		if !proto.Equal(stock, &ours) {
			t.Errorf("%d request spans differ from the stock exporter's:\nstock: %s\nours:  %s", len(batch), prototext.Format(stock), prototext.Format(&ours))
		}
	}
}

// recorderWith is a recorder exporting to exp with a mock clock and
// small batches: at most 4 queued, 2 an export, every second.
func recorderWith(t *testing.T, exp sdktrace.SpanExporter, sampler sdktrace.Sampler) (*Recorder, *quartz.Mock) {
	t.Helper()
	clock := quartz.NewMock(t)
	trap := clock.Trap().NewTicker("tracing", "requests")
	defer trap.Close()
	r := newRecorder(exp, sampler, resource.Empty(), batchConfig{delay: time.Second, queue: 4, batch: 2, timeout: time.Second}, clock)
	trap.MustWait(t.Context()).MustRelease(t.Context())
	t.Cleanup(func() { _ = r.Shutdown(context.Background()) })
	return r, clock
}

// TestRecorderSamples: the recorder asks the provider's sampler: a root
// at ratio 0 records nothing yet has a trace id of its own, unsampled; a
// sampled caller's child records in the caller's trace with its trace
// state; an unsampled caller's child does not record.
func TestRecorderSamples(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	r, _ := recorderWith(t, exp, sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0)))
	start := time.Date(2026, 12, 5, 7, 0, 0, 0, time.UTC)

	var root RequestSpan
	if r.Start(&root, trace.SpanContext{}, "ml_serving.request", start) {
		t.Error("a root at ratio 0 records")
	}
	if !root.Context.TraceID().IsValid() || !root.Context.SpanID().IsValid() || root.Context.IsSampled() || root.Parent.IsValid() {
		t.Errorf("unsampled root %+v, want its own valid ids, unsampled, no parent", root.Context)
	}

	ts, _ := trace.ParseTraceState("vendor=x")
	h := map[string][]string{"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, "Tracestate": {"vendor=x"}}
	caller := Parent(h)
	if !caller.IsRemote() || caller.TraceState().String() != ts.String() {
		t.Fatalf("Parent(%v) = %+v, want the remote caller with its trace state", h, caller)
	}
	var child RequestSpan
	if !r.Start(&child, caller, "ml_serving.request", start) {
		t.Error("a sampled caller's child does not record")
	}
	if child.Context.TraceID() != caller.TraceID() || child.Context.SpanID() == caller.SpanID() || !child.Context.IsSampled() ||
		child.Context.TraceState().String() != "vendor=x" || !child.Parent.Equal(caller) {
		t.Errorf("child %+v under %+v, want the caller's trace and state, a span id of its own, sampled", child.Context, caller)
	}
	child.End = start.Add(time.Millisecond)
	r.End(&child)

	h["Traceparent"] = []string{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"}
	var unsampled RequestSpan
	if r.Start(&unsampled, Parent(h), "ml_serving.request", start) {
		t.Error("an unsampled caller's child records")
	}
	if err := r.ForceFlush(t.Context()); err != nil {
		t.Fatal(err)
	}
	got := exp.GetSpans()
	if len(got) != 1 || !got[0].SpanContext.Equal(child.Context) || !got[0].Parent.Equal(caller) || got[0].SpanKind != trace.SpanKindServer {
		t.Errorf("exported %+v, want the sampled child alone, a server span", got)
	}
}

// TestRecorderBatches: spans wait for the schedule delay (the mock
// clock's tick) or a full batch, never for more; a span that finds the
// queue full is dropped and counted, and End does not wait for the
// export.
func TestRecorderBatches(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	r, clock := recorderWith(t, exp, sdktrace.AlwaysSample())
	end := func(n int) {
		for range n {
			var s RequestSpan
			r.Start(&s, trace.SpanContext{}, "ml_serving.request", clock.Now())
			s.End = clock.Now()
			r.End(&s)
		}
	}
	end(1)
	if n := len(exp.GetSpans()); n != 0 {
		t.Fatalf("%d spans exported before the delay or a full batch, want 0", n)
	}
	clock.Advance(time.Second).MustWait(t.Context())
	wait.Eventually(t, 10*time.Second, func() bool { return len(exp.GetSpans()) == 1 }, "the delay's tick never exported the span, have %v",
		wait.Show(func() any { return len(exp.GetSpans()) }))

	end(2) // a full batch: exported without a tick
	wait.Eventually(t, 10*time.Second, func() bool { return len(exp.GetSpans()) == 3 }, "a full batch was not exported, have %v",
		wait.Show(func() any { return len(exp.GetSpans()) }))

	// An export that hangs: the next batch and the queue fill, and what
	// comes after is dropped without End waiting.
	blocked := &blockingExporter{release: make(chan struct{})}
	r2, _ := recorderWith(t, blocked, sdktrace.AlwaysSample())
	end2 := func(n int) {
		for range n {
			var s RequestSpan
			r2.Start(&s, trace.SpanContext{}, "ml_serving.request", clock.Now())
			r2.End(&s)
		}
	}
	end2(2)
	wait.Eventually(t, 10*time.Second, func() bool { return blocked.calls.Load() == 1 }, "the full batch's export never began")
	end2(4 + 3)
	if got := r2.Dropped(); got != 3 {
		t.Errorf("%d spans dropped with the queue of 4 full, want 3", got)
	}
	close(blocked.release)
	if err := r2.ForceFlush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := blocked.spans.Load(); got != 2+4 {
		t.Errorf("%d spans exported, want the 6 that were queued", got)
	}
}

// blockingExporter holds every export until release closes, counting
// exports and spans.
type blockingExporter struct {
	release chan struct{}
	calls   atomic.Int32
	spans   atomic.Int32
}

func (b *blockingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	b.calls.Add(1)
	select {
	case <-b.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	b.spans.Add(int32(len(spans)))
	return nil
}

func (b *blockingExporter) Shutdown(context.Context) error { return nil }

// TestRequestSpansReachTheReceiver: a provider built from the environment
// exports its request spans, through this package's exporter, to the
// OTLP receiver tests use, in the gateway's service and scope.
func TestRequestSpansReachTheReceiver(t *testing.T) {
	t.Parallel()
	rcv := otlptest.Start(t)
	env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": rcv.URL}
	p, err := fromEnv(context.Background(), "modelplane-gateway", func(k string) string { return env[k] })
	if err != nil || p.Requests == nil {
		t.Fatalf("fromEnv = %+v, %v; want a request recorder", p, err)
	}
	var s RequestSpan
	if !p.Requests.Start(&s, trace.SpanContext{}, "ml_serving.request", time.Now()) {
		t.Fatal("a root at the default ratio 1 does not record")
	}
	s.End = time.Now()
	p.Requests.End(&s)
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	id := s.Context.TraceID().String()
	want := []otlptest.Span{{Service: "modelplane-gateway", Name: "ml_serving.request", TraceID: id, SpanID: s.Context.SpanID().String()}}
	if got := rcv.Trace(id); !slices.Equal(got, want) {
		t.Errorf("received %+v, want %+v", got, want)
	}
}

// queued is how many spans wait in r's queue.
func (r *Recorder) queued() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.cur)
}

// TestRecorderDecidesAsTheSDK: for every sampler OTEL_TRACES_SAMPLER
// names, at ratios across the range, a Recorder's shortcut (ratioSampler)
// decides each span as the SDK's sampler does through its parameters,
// and keeps the same trace state and flags: roots, and children of
// sampled and unsampled, remote and local callers, with and without a
// trace state.
func TestRecorderDecidesAsTheSDK(t *testing.T) {
	t.Parallel()
	ts, err := trace.ParseTraceState("vendor=x,other=y")
	if err != nil {
		t.Fatal(err)
	}
	parent := func(sampled, remote bool, state trace.TraceState) trace.SpanContext {
		var flags trace.TraceFlags
		if sampled {
			flags = trace.FlagsSampled
		}
		return trace.NewSpanContext(trace.SpanContextConfig{TraceID: newTraceID(), SpanID: newSpanID(), TraceFlags: flags, TraceState: state, Remote: remote})
	}
	parents := map[string]trace.SpanContext{
		"root":                           {},
		"remote sampled":                 parent(true, true, trace.TraceState{}),
		"remote sampled with a state":    parent(true, true, ts),
		"remote unsampled with a state":  parent(false, true, ts),
		"local sampled":                  parent(true, false, trace.TraceState{}),
		"local unsampled":                parent(false, false, ts),
		"invalid with a state and flags": trace.NewSpanContext(trace.SpanContextConfig{TraceState: ts, TraceFlags: trace.FlagsSampled}),
	}
	start := time.Date(2026, 12, 5, 7, 0, 0, 0, time.UTC)
	for _, name := range []string{"", "parentbased_traceidratio", "traceidratio", "always_on", "always_off", "parentbased_always_on", "parentbased_always_off"} {
		for _, arg := range []string{"0", "0.001", "0.25", "0.5", "0.999", "1"} {
			env := map[string]string{"OTEL_TRACES_SAMPLER": name, "OTEL_TRACES_SAMPLER_ARG": arg}
			s, err := samplerFrom(func(k string) string { return env[k] })
			if err != nil {
				t.Fatal(err)
			}
			rs, ok := s.(ratioSampler)
			if !ok {
				t.Fatalf("%q %s: sampler %T, want a ratioSampler", name, arg, s)
			}
			fast, _ := recorderWith(t, tracetest.NewInMemoryExporter(), rs)
			sdk, _ := recorderWith(t, tracetest.NewInMemoryExporter(), rs.Sampler)
			for pname, p := range parents {
				sampled := 0
				for range 400 {
					tid := p.TraceID()
					if !p.IsValid() {
						tid = newTraceID()
					}
					var a, b RequestSpan // the same trace id for both
					got, want := fast.start(&a, p, tid, "ml_serving.request", start), sdk.start(&b, p, tid, "ml_serving.request", start)
					if got != want || a.Context.TraceFlags() != b.Context.TraceFlags() || a.Context.TraceState().String() != b.Context.TraceState().String() {
						t.Fatalf("%q %s, %s, trace %s: shortcut sampled %v flags %v state %q; SDK %v %v %q", name, arg, pname, a.Context.TraceID(),
							got, a.Context.TraceFlags(), a.Context.TraceState(), want, b.Context.TraceFlags(), b.Context.TraceState())
					}
					if got {
						sampled++
					}
				}
				if pname == "root" && arg == "0.5" && (name == "" || name == "traceidratio") && (sampled < 120 || sampled > 280) {
					t.Errorf("%q at 0.5: %d roots of 400 sampled, want about half", name, sampled)
				}
			}
		}
	}
}

// TestRequestSpanAttributes: a request span gives back the attributes set,
// of every kind it holds and with lengths past one byte's varint, in
// order; a list, an attribute past maxAttrBytes and one past
// MaxRequestAttrs are counted as dropped, not kept.
func TestRequestSpanAttributes(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("r", 200) // a KeyValue of more than 127 bytes
	set := []attribute.KeyValue{attribute.String("endpoint", "fraud-scoring"), attribute.Int("http.response.status_code", 200),
		attribute.Int64("negative", -3), attribute.Bool("pinned", true), attribute.Bool("retried", false), attribute.Float64("score", 0.87),
		attribute.String("replica", long), attribute.String("", "no key"), {Key: "empty"}}
	var s RequestSpan
	s.SetAttributes(set...)
	s.SetAttributes(attribute.StringSlice("list", []string{"a"}))
	if got := s.Attributes(); !slices.Equal(got, set) || s.dropped != 1 {
		t.Fatalf("attributes %v, dropped %d; want %v, 1 dropped (the list)", got, s.dropped, set)
	}
	s.SetAttributes(attribute.String("too_long", strings.Repeat("x", maxAttrBytes-s.used))) // its tag and lengths pass the end
	if s.n != len(set) || s.dropped != 2 {
		t.Fatalf("%d attributes, %d dropped after one past %d bytes; want %d, 2", s.n, s.dropped, maxAttrBytes, len(set))
	}
	s.SetAttributes(attribute.Int("a", 1), attribute.Int("b", 2), attribute.Int("c", 3), attribute.Int("d", 4))
	if s.n != MaxRequestAttrs || s.dropped != 3 {
		t.Errorf("%d attributes, %d dropped after four more; want %d, 3", s.n, s.dropped, MaxRequestAttrs)
	}
	if got := s.Attributes()[len(set):]; !slices.Equal(got, []attribute.KeyValue{attribute.Int("a", 1), attribute.Int("b", 2), attribute.Int("c", 3)}) {
		t.Errorf("the last attributes %v, want a, b and c", got)
	}
}

// TestRequestSpanTypedSetters: SetString, SetInt and SetBool write what
// SetAttributes writes for the same attributes, byte for byte, long
// keys and values and the limits included.
func TestRequestSpanTypedSetters(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", 130)
	type kv struct {
		key  string
		v    any
		want attribute.KeyValue
	}
	set := []kv{
		{"endpoint", "fraud-scoring", attribute.String("endpoint", "fraud-scoring")},
		{"http.response.status_code", int64(200), attribute.Int("http.response.status_code", 200)},
		{"negative", int64(-3), attribute.Int64("negative", -3)},
		{"big", int64(1) << 62, attribute.Int64("big", 1<<62)},
		{"pinned", true, attribute.Bool("pinned", true)},
		{"retried", false, attribute.Bool("retried", false)},
		{"replica", strings.Repeat("r", 200), attribute.String("replica", strings.Repeat("r", 200))},
		{"nearly", strings.Repeat("n", 100), attribute.String("nearly", strings.Repeat("n", 100))},
		{long, "v", attribute.String(long, "v")},
		{"", "no key", attribute.String("", "no key")},
		{"empty", "", attribute.String("empty", "")},
		{"a", int64(1), attribute.Int("a", 1)},
		{"past the limit", int64(2), attribute.Int("past the limit", 2)},
	}
	var typed, plain RequestSpan
	for _, a := range set {
		switch v := a.v.(type) {
		case string:
			typed.SetString(a.key, v)
		case int64:
			typed.SetInt(a.key, v)
		case bool:
			typed.SetBool(a.key, v)
		}
		plain.SetAttributes(a.want)
	}
	if !bytes.Equal(typed.attrs[:typed.used], plain.attrs[:plain.used]) || typed.n != plain.n || typed.dropped != plain.dropped {
		t.Fatalf("typed: %d attributes, %d dropped, %x\nwant %d, %d dropped, %x", typed.n, typed.dropped, typed.attrs[:typed.used],
			plain.n, plain.dropped, plain.attrs[:plain.used])
	}
	var want []attribute.KeyValue
	for _, a := range set[:MaxRequestAttrs] {
		want = append(want, a.want)
	}
	if got := typed.Attributes(); !slices.Equal(got, want) { // read back apart from how they were written
		t.Errorf("attributes read back %v, want %v", got, want)
	}
	if typed.n != MaxRequestAttrs || typed.dropped != 1 {
		t.Errorf("%d attributes, %d dropped; want %d, 1", typed.n, typed.dropped, MaxRequestAttrs)
	}
	full := RequestSpan{used: maxAttrBytes - 10}
	full.SetString("endpoint", "fraud-scoring")
	if full.n != 0 || full.dropped != 1 || full.used != maxAttrBytes-10 {
		t.Errorf("a span with 10 bytes left: %d attributes, %d dropped, %d bytes used after one of 27 bytes", full.n, full.dropped, full.used)
	}
}

// TestRecorderSpanUsedAgain: a span started again after its End records
// only what is set after: no attribute, end or error of its first use.
func TestRecorderSpanUsedAgain(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	r, _ := recorderWith(t, exp, sdktrace.AlwaysSample())
	start := time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC)
	var s RequestSpan
	r.Start(&s, trace.SpanContext{}, "ml_serving.request", start)
	s.SetAttributes(attribute.String("endpoint", "fraud-scoring"), attribute.Int("http.response.status_code", 502))
	s.Error, s.End = "Bad Gateway", start.Add(time.Millisecond)
	r.End(&s)
	r.Start(&s, trace.SpanContext{}, "ml_serving.request", start.Add(time.Second))
	s.SetAttributes(attribute.String("endpoint", "chat"))
	s.End = start.Add(2 * time.Second)
	r.End(&s)
	if err := r.ForceFlush(t.Context()); err != nil {
		t.Fatal(err)
	}
	got := exp.GetSpans()
	if len(got) != 2 {
		t.Fatalf("exported %d spans, want 2", len(got))
	}
	second := got[1]
	if len(second.Attributes) != 1 || second.Attributes[0] != attribute.String("endpoint", "chat") ||
		second.Status.Code != codes.Unset || !second.EndTime.Equal(start.Add(2*time.Second)) || second.DroppedAttributes != 0 {
		t.Errorf("second use: attributes %v, status %v, end %v, want its own alone", second.Attributes, second.Status, second.EndTime)
	}
	if len(got[0].Attributes) != 2 || got[0].Status.Code != codes.Error {
		t.Errorf("first use: attributes %v, status %v", got[0].Attributes, got[0].Status)
	}
}
