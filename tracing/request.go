package tracing

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/quartz"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// GatewayScope is the instrumentation scope of the gateway's spans: the
// request spans a Recorder writes and the SDK spans under them.
const GatewayScope = "modelplane/gateway"

// RuntimeScope is the instrumentation scope of a replica's spans: the
// built-in runtime's and the simulated replicas'.
const RuntimeScope = "modelplane/runtime"

// MaxRequestAttrs is the most attributes a RequestSpan holds; more are
// counted as dropped, as the SDK counts what passes its limit.
const MaxRequestAttrs = 12

// maxAttrBytes is how many bytes of attributes a RequestSpan holds, as
// OTLP writes them: twelve of the gateway's with names of 63 characters
// (about 650 bytes). An attribute past it is counted as dropped.
const maxAttrBytes = 768

// RequestSpan is one server span of the gateway's hot path, a fixed value
// of modelplane's own: ids, times, status and at most MaxRequestAttrs
// attributes, no map, no lock and nothing allocated. Its attributes are
// kept as the OTLP protobuf the exporter sends, written as they are set
// into an array that holds no pointer: what a Recorder copies at the
// span's end is the bytes set, which the garbage collector never scans,
// and the export copies them as they are (docs/decisions.md: why the
// gateway does not use the SDK's span here).
type RequestSpan struct {
	// Context is the span's own: the trace id, its span id, the sampled
	// flag and the caller's trace state. Parent is the caller's, invalid
	// for a root.
	Context, Parent trace.SpanContext
	Name            string
	Start, End      time.Time
	// Error, when not empty, makes the span's status an error with it as
	// the description.
	Error string
	// attrs[:used] is n attributes, each a Span.attributes field.
	attrs   [maxAttrBytes]byte
	used    int
	n       int
	dropped int
}

// SetAttributes adds kvs: a string, integer, float or bool each (the
// gateway sets nothing else; a list or map is counted as dropped), past
// MaxRequestAttrs or maxAttrBytes counting them as dropped. Keys are not
// deduplicated: the caller sets each once.
func (s *RequestSpan) SetAttributes(kvs ...attribute.KeyValue) {
	for i := range kvs {
		if s.n == MaxRequestAttrs {
			s.dropped += len(kvs) - i
			return
		}
		if k, ok := putShort(s.free(), fSpanAttributes, &kvs[i]); ok {
			s.took(k)
			continue
		}
		size, ok := keyValueSize(kvs[i])
		if !ok || s.used+1+protowire.SizeVarint(uint64(size))+size > len(s.attrs) {
			s.dropped++
			continue
		}
		// Within the array's capacity: append writes in place.
		s.used = len(appendKeyValue(s.attrs[:s.used], fSpanAttributes, kvs[i], size))
		s.n++
	}
}

// SetString, SetInt and SetBool set one attribute of their type, as
// SetAttributes does, without an attribute.KeyValue made and switched on,
// which is what they save a traced gateway request (docs/operations.md,
// "Tracing": 1–2 % of its CPU).
func (s *RequestSpan) SetString(key, v string) {
	if k, ok := putShortString(s.free(), fSpanAttributes, key, v); ok {
		s.took(k)
		return
	}
	s.SetAttributes(attribute.String(key, v))
}

func (s *RequestSpan) SetInt(key string, v int64) {
	if k, ok := putShortInt(s.free(), fSpanAttributes, key, v); ok {
		s.took(k)
		return
	}
	s.SetAttributes(attribute.Int64(key, v))
}

func (s *RequestSpan) SetBool(key string, v bool) {
	if k, ok := putShortBool(s.free(), fSpanAttributes, key, v); ok {
		s.took(k)
		return
	}
	s.SetAttributes(attribute.Bool(key, v))
}

// free is where the next attribute's bytes go, nil when s holds
// MaxRequestAttrs (putShort then writes nothing); took counts an
// attribute of k bytes written there.
func (s *RequestSpan) free() []byte {
	if s.n == MaxRequestAttrs {
		return nil
	}
	return s.attrs[s.used:]
}

func (s *RequestSpan) took(k int) { s.used, s.n = s.used+k, s.n+1 }

// Attributes are the span's attributes, in the order they were set, read
// back from their protobuf: for the SDK's read-only span, off the
// request path.
func (s *RequestSpan) Attributes() []attribute.KeyValue {
	kvs := make([]attribute.KeyValue, 0, s.n)
	for b := s.attrs[:s.used]; len(b) > 0; {
		_, _, k := protowire.ConsumeTag(b)
		m, n := protowire.ConsumeBytes(b[k:])
		kvs = append(kvs, keyValueOf(m))
		b = b[k+n:]
	}
	return kvs
}

// snapshot is s as the SDK's read-only span, for an exporter that is not
// this package's (OTLP over gRPC, a test's in-memory one).
func (s *RequestSpan) snapshot(res *resource.Resource, scope instrumentation.Scope) sdktrace.ReadOnlySpan {
	st := sdktrace.Status{Code: codes.Unset}
	if s.Error != "" {
		st = sdktrace.Status{Code: codes.Error, Description: s.Error}
	}
	return tracetest.SpanStub{Name: s.Name, SpanContext: s.Context, Parent: s.Parent, SpanKind: trace.SpanKindServer,
		StartTime: s.Start, EndTime: s.End, Attributes: s.Attributes(), DroppedAttributes: s.dropped,
		Status: st, Resource: res, InstrumentationScope: scope}.Snapshot()
}

// batchConfig is the OTEL_BSP_* settings: how long a span waits for its
// export at most, how many wait at most (more are dropped), how many one
// export carries at most, and how long one may take.
type batchConfig struct {
	delay   time.Duration
	queue   int
	batch   int
	timeout time.Duration
}

// Recorder records the gateway's request spans and exports them in
// batches through the process's exporter, as the SDK's batch processor
// does its spans: a span waits at most the schedule delay, an export
// starts when a batch is full, and a span that finds the queue full is
// dropped, never waited for. The sampler is the provider's.
type Recorder struct {
	sampler sdktrace.Sampler
	exp     sdktrace.SpanExporter
	res     *resource.Resource
	scope   instrumentation.Scope
	cfg     batchConfig

	mu sync.Mutex
	// cur takes ended spans; spare is the buffer the last export emptied.
	// Both are made at the first span, cfg.queue long, and swapped at
	// each export: a span costs a copy into cur, nothing allocated.
	cur, spare []RequestSpan
	dropped    atomic.Uint64

	// exporting serialises exports: the flush loop's and ForceFlush's.
	exporting sync.Mutex
	kick      chan struct{}
	stop      chan struct{}
	done      chan struct{}
	stopOnce  sync.Once
}

func newRecorder(exp sdktrace.SpanExporter, sampler sdktrace.Sampler, res *resource.Resource, cfg batchConfig, clock quartz.Clock) *Recorder {
	r := &Recorder{sampler: sampler, exp: exp, res: res, scope: instrumentation.Scope{Name: GatewayScope}, cfg: cfg,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go r.run(clock)
	return r
}

// Start begins s at start as a child of parent (the caller's span
// context, invalid when it sent none), with new span (and, for a root,
// trace) ids, and asks the sampler whether it is recorded (a
// ratioSampler's decision taken here, without the sampler's call): when not, s
// still carries its trace id, to be quoted. It reports whether s records;
// only then must End be called. s may have been used before: Start clears
// what it recorded, so that spans can be kept in a pool.
func (r *Recorder) Start(s *RequestSpan, parent trace.SpanContext, name string, start time.Time) bool {
	tid := parent.TraceID()
	if !parent.IsValid() {
		tid = newTraceID()
	}
	return r.start(s, parent, tid, name, start)
}

// start is Start in trace tid: the parent's, or a new root's.
func (r *Recorder) start(s *RequestSpan, parent trace.SpanContext, tid trace.TraceID, name string, start time.Time) bool {
	cfg := trace.SpanContextConfig{TraceID: tid, SpanID: newSpanID()}
	var sampled bool
	if rs, ok := r.sampler.(ratioSampler); ok {
		// The SDK's decision without its parameters (ratioSampler).
		sampled = rs.samples(parent, cfg.TraceID)
		if parent.IsValid() {
			cfg.TraceState = parent.TraceState()
		}
	} else {
		ctx := context.Background()
		if parent.IsValid() {
			ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
		}
		res := r.sampler.ShouldSample(sdktrace.SamplingParameters{ParentContext: ctx, TraceID: cfg.TraceID, Name: name, Kind: trace.SpanKindServer})
		sampled, cfg.TraceState = res.Decision == sdktrace.RecordAndSample, res.Tracestate
	}
	if sampled {
		cfg.TraceFlags = parent.TraceFlags() | trace.FlagsSampled
	} else {
		cfg.TraceFlags = parent.TraceFlags() &^ trace.FlagsSampled
	}
	// A span used before starts over: its attributes, end and error too.
	s.Context, s.Parent, s.Name, s.Start = trace.NewSpanContext(cfg), parent, name, start
	s.End, s.Error, s.used, s.n, s.dropped = time.Time{}, "", 0, 0, 0
	return sampled
}

// newTraceID and newSpanID are random ids, never all zeros (invalid in
// W3C trace context), from the runtime's per-thread generator: no lock.
func newTraceID() trace.TraceID {
	var id trace.TraceID
	for !id.IsValid() {
		binary.BigEndian.PutUint64(id[:8], rand.Uint64())
		binary.BigEndian.PutUint64(id[8:], rand.Uint64())
	}
	return id
}

func newSpanID() trace.SpanID {
	var id trace.SpanID
	for !id.IsValid() {
		binary.BigEndian.PutUint64(id[:], rand.Uint64())
	}
	return id
}

// End queues s (which Start said records) for export, or drops it when
// the queue is full.
func (r *Recorder) End(s *RequestSpan) {
	r.mu.Lock()
	if r.cur == nil && r.spare == nil {
		r.cur, r.spare = make([]RequestSpan, 0, r.cfg.queue), make([]RequestSpan, 0, r.cfg.queue)
	}
	if len(r.cur) == cap(r.cur) {
		r.mu.Unlock()
		r.dropped.Add(1)
		return
	}
	// Field by field, the attributes' bytes set and no more: the array's
	// rest is most of a span and unused.
	r.cur = r.cur[:len(r.cur)+1]
	d := &r.cur[len(r.cur)-1]
	d.Context, d.Parent, d.Name, d.Start, d.End, d.Error = s.Context, s.Parent, s.Name, s.Start, s.End, s.Error
	d.used, d.n, d.dropped = copy(d.attrs[:], s.attrs[:s.used]), s.n, s.dropped
	full := len(r.cur) >= r.cfg.batch
	r.mu.Unlock()
	if full {
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
}

// Dropped is how many spans found the queue full.
func (r *Recorder) Dropped() uint64 { return r.dropped.Load() }

// run exports what is queued every schedule delay, when a batch is full,
// and at the end.
func (r *Recorder) run(clock quartz.Clock) {
	defer close(r.done)
	t := clock.NewTicker(r.cfg.delay, "tracing", "requests")
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		case <-r.kick:
		}
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.timeout)
		_ = r.ForceFlush(ctx) // a failed export is the exporter's to report; the spans are gone
		cancel()
	}
}

// ForceFlush exports every span queued so far, in batches.
func (r *Recorder) ForceFlush(ctx context.Context) error {
	r.exporting.Lock()
	defer r.exporting.Unlock()
	r.mu.Lock()
	spans := r.cur
	r.cur, r.spare = r.spare, nil
	r.mu.Unlock()
	var err error
	for rest := spans; len(rest) > 0 && err == nil; {
		n := min(len(rest), r.cfg.batch)
		err = r.export(ctx, rest[:n])
		rest = rest[n:]
	}
	// The emptied buffer is the next swap's; its spans' strings are
	// released as the next ones overwrite them.
	r.mu.Lock()
	r.spare = spans[:0]
	r.mu.Unlock()
	return err
}

// export writes spans with this package's exporter straight from their
// values, or hands them to another as the SDK's read-only spans.
func (r *Recorder) export(ctx context.Context, spans []RequestSpan) error {
	if x, ok := r.exp.(*httpExporter); ok {
		return x.exportRequests(ctx, r.res, r.scope, spans)
	}
	ro := make([]sdktrace.ReadOnlySpan, len(spans))
	for i := range spans {
		ro[i] = spans[i].snapshot(r.res, r.scope)
	}
	return r.exp.ExportSpans(ctx, ro)
}

// Shutdown stops the flush loop and exports what is left; the exporter is
// the provider's to shut down.
func (r *Recorder) Shutdown(ctx context.Context) error {
	r.stopOnce.Do(func() { close(r.stop) })
	select {
	case <-r.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return r.ForceFlush(ctx)
}
