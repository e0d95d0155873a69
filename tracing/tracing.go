// Package tracing sets up OpenTelemetry tracing for a modelplane process
// from the standard OTEL_* environment variables, and holds the W3C trace
// context helpers the gateway, the runtime and the control plane share.
//
// Tracing is off (a no-op provider, nothing exported, no cost but a branch)
// unless OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
// OTEL_TRACES_EXPORTER=otlp is set, and OTEL_SDK_DISABLED is not true.
// The exporter speaks OTLP over HTTP (http/protobuf, the default) or gRPC
// (OTEL_EXPORTER_OTLP_PROTOCOL=grpc), each reading the
// OTEL_EXPORTER_OTLP_* settings (endpoint, headers, TLS, timeout,
// compression). Over HTTP it is this package's own (exporter.go), which
// writes the protocol's protobuf straight from the spans; over gRPC
// the OpenTelemetry project's. The
// sampler is parent-based with a trace-id ratio (OTEL_TRACES_SAMPLER_ARG,
// default 1) unless OTEL_TRACES_SAMPLER names another.
//
// The gateway's request spans do not go through the SDK's span: a
// Recorder (request.go) keeps them as fixed values, their attributes
// already in OTLP's bytes, in a preallocated buffer and the exporter
// writes them as they are, with the SDK's sampler (whose decision it
// takes without the call for the samplers OTEL_TRACES_SAMPLER names) and
// batch settings, so that tracing every request costs the gateway little
// (docs/decisions.md). Everything else, the gateway's child spans
// included, is the SDK's.
//
// It must not hold global state: the provider is passed to what traces.
package tracing

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/coder/quartz"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Provider is a process's tracer provider and what stops it.
type Provider struct {
	trace.TracerProvider
	// Requests records the gateway's request spans without the SDK's
	// span (request.go); nil when tracing is off.
	Requests *Recorder
	// Shutdown flushes and stops the exporter; a no-op when tracing is off.
	Shutdown func(context.Context) error
	// On reports whether spans are exported.
	On bool
}

// Off is the provider of a process that does not trace.
func Off() Provider {
	return Provider{TracerProvider: noop.NewTracerProvider(), Shutdown: func(context.Context) error { return nil }}
}

// ForceFlush exports every span ended so far: the request spans and the
// SDK's.
func (p Provider) ForceFlush(ctx context.Context) error {
	if p.Requests == nil {
		return nil
	}
	if err := p.Requests.ForceFlush(ctx); err != nil {
		return err
	}
	if tp, ok := p.TracerProvider.(*sdktrace.TracerProvider); ok {
		return tp.ForceFlush(ctx)
	}
	return nil
}

// Options are what New builds a provider from; the zero value of each is
// its default.
type Options struct {
	// Service names the process (service.name), unless OTEL_SERVICE_NAME
	// (read by the SDK's resource) names it.
	Service string
	// Sampler decides which traces are recorded: parent-based, sampling
	// every root, when nil.
	Sampler sdktrace.Sampler
	// Clock times the request spans' batches; the real one when nil.
	Clock quartz.Clock
	// batch is the OTEL_BSP_* settings of the request spans' batches.
	batch batchConfig
}

// New returns a provider exporting through exp: the SDK's spans through
// its batch processor, and the gateway's request spans through a
// Recorder with the same sampler, resource and batch settings.
func New(ctx context.Context, exp sdktrace.SpanExporter, o Options) (Provider, error) {
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName(o.Service)))
	if err != nil {
		return Provider{}, err
	}
	if envRes, err := resource.New(ctx, resource.WithFromEnv()); err == nil {
		res, _ = resource.Merge(res, envRes)
	}
	if o.Sampler == nil {
		o.Sampler = ratioSampler{sdktrace.ParentBased(sdktrace.AlwaysSample()), true, ratioBound(1)}
	}
	if o.Clock == nil {
		o.Clock = quartz.NewReal()
	}
	def := defaultBatch()
	if o.batch == (batchConfig{}) {
		o.batch = def
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithSampler(o.Sampler),
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(o.batch.delay), sdktrace.WithMaxQueueSize(o.batch.queue),
			sdktrace.WithMaxExportBatchSize(o.batch.batch), sdktrace.WithExportTimeout(o.batch.timeout)))
	rec := newRecorder(exp, o.Sampler, res, o.batch, o.Clock)
	shutdown := func(ctx context.Context) error {
		return errors.Join(rec.Shutdown(ctx), tp.Shutdown(ctx))
	}
	return Provider{TracerProvider: tp, Requests: rec, Shutdown: shutdown, On: true}, nil
}

// enabled reports whether the environment asks for traces.
func enabled(getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	if exp := getenv("OTEL_TRACES_EXPORTER"); exp != "" {
		return exp == "otlp"
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// FromEnv returns the provider the environment asks for, named service
// (unless OTEL_SERVICE_NAME names it), or Off.
func FromEnv(ctx context.Context, service string) (Provider, error) {
	return fromEnv(ctx, service, os.Getenv)
}

func fromEnv(ctx context.Context, service string, getenv func(string) string) (Provider, error) {
	if !enabled(getenv) {
		return Off(), nil
	}
	sampler, err := samplerFrom(getenv)
	if err != nil {
		return Provider{}, err
	}
	batch, err := batchFrom(getenv)
	if err != nil {
		return Provider{}, err
	}
	protocol := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var exp sdktrace.SpanExporter
	switch protocol {
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	case "", "http/protobuf":
		exp, err = newHTTPExporter(getenv)
	default:
		return Provider{}, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: modelplane exports traces over grpc or http/protobuf", protocol)
	}
	if err != nil {
		return Provider{}, fmt.Errorf("otlp trace exporter: %w", err)
	}
	return New(ctx, exp, Options{Service: service, Sampler: sampler, batch: batch})
}

// samplerFrom is the sampler OTEL_TRACES_SAMPLER names, with its
// OTEL_TRACES_SAMPLER_ARG: parent-based with a trace-id ratio (default 1)
// when unset. The SDK and the request spans share it.
func samplerFrom(getenv func(string) string) (sdktrace.Sampler, error) {
	ratio := func() (float64, error) {
		arg := getenv("OTEL_TRACES_SAMPLER_ARG")
		if arg == "" {
			return 1, nil
		}
		v, err := strconv.ParseFloat(arg, 64)
		if err != nil || v < 0 || v > 1 {
			return 0, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG %q: want a ratio from 0 to 1", arg)
		}
		return v, nil
	}
	switch name := getenv("OTEL_TRACES_SAMPLER"); name {
	case "", "parentbased_traceidratio", "traceidratio":
		r, err := ratio()
		if err != nil {
			return nil, err
		}
		if name == "traceidratio" {
			return ratioSampler{sdktrace.TraceIDRatioBased(r), false, ratioBound(r)}, nil
		}
		return ratioSampler{sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r)), true, ratioBound(r)}, nil
	case "always_on":
		return ratioSampler{sdktrace.AlwaysSample(), false, ratioBound(1)}, nil
	case "always_off":
		return ratioSampler{sdktrace.NeverSample(), false, ratioBound(0)}, nil
	case "parentbased_always_on":
		return ratioSampler{sdktrace.ParentBased(sdktrace.AlwaysSample()), true, ratioBound(1)}, nil
	case "parentbased_always_off":
		return ratioSampler{sdktrace.ParentBased(sdktrace.NeverSample()), true, ratioBound(0)}, nil
	default:
		return nil, fmt.Errorf("OTEL_TRACES_SAMPLER %q: want always_on, always_off, traceidratio or parentbased_ with one of them", name)
	}
}

// ratioSampler is one of the samplers samplerFrom builds, the SDK's, with
// what its decision comes to, so that a Recorder decides as it would
// without building its parameters (a context holding the parent, an
// interface call or two; Recorder.Start). Each is a trace-id ratio:
// always_on is a ratio of 1, always_off of 0. A root, or any span when
// the sampler is not parent-based, is sampled when its trace id's last
// eight bytes, as a big-endian number shifted right once, are below
// bound; a child of a parent-based one as its parent was. The answer
// keeps the parent's trace state.
type ratioSampler struct {
	sdktrace.Sampler
	parentBased bool
	bound       uint64
}

// ratioBound is the SDK's TraceIDRatioBased bound for fraction: every
// trace id is below it at 1 and above, none at 0 and below.
func ratioBound(fraction float64) uint64 {
	return uint64(min(max(fraction, 0), 1) * (1 << 63))
}

// samples reports whether a span of trace tid, child of parent (invalid
// for a root), is sampled.
func (s ratioSampler) samples(parent trace.SpanContext, tid trace.TraceID) bool {
	if s.parentBased && parent.IsValid() {
		return parent.IsSampled()
	}
	return binary.BigEndian.Uint64(tid[8:16])>>1 < s.bound
}

// defaultBatch is the batch processor's defaults in the specification.
func defaultBatch() batchConfig {
	return batchConfig{delay: 5 * time.Second, queue: 2048, batch: 512, timeout: 30 * time.Second}
}

// batchFrom reads the OTEL_BSP_* settings, which the SDK's batch
// processor and the request spans' share.
func batchFrom(getenv func(string) string) (batchConfig, error) {
	c := defaultBatch()
	for _, s := range []struct {
		name string
		ms   *time.Duration
		n    *int
	}{
		{name: "OTEL_BSP_SCHEDULE_DELAY", ms: &c.delay},
		{name: "OTEL_BSP_EXPORT_TIMEOUT", ms: &c.timeout},
		{name: "OTEL_BSP_MAX_QUEUE_SIZE", n: &c.queue},
		{name: "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", n: &c.batch},
	} {
		v := getenv(s.name)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return c, fmt.Errorf("%s %q: want a positive whole number", s.name, v)
		}
		if s.ms != nil {
			*s.ms = time.Duration(n) * time.Millisecond
		} else {
			*s.n = n
		}
	}
	c.batch = min(c.batch, c.queue) // as the SDK does
	return c, nil
}

// Propagator reads and writes the W3C traceparent and tracestate headers.
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// Extract returns ctx with the remote span context of h's traceparent. h's
// keys are canonical, as net/http's are: a request without a traceparent
// costs a map lookup, not the propagator's key canonicalisation.
func Extract(ctx context.Context, h http.Header) context.Context {
	if len(h["Traceparent"]) == 0 {
		return ctx
	}
	return Propagator.Extract(ctx, propagation.HeaderCarrier(h))
}

// Parent is the caller's span context h's traceparent (and tracestate)
// carry, invalid when it has none: the parent of the gateway's request
// span.
func Parent(h http.Header) trace.SpanContext {
	if len(h["Traceparent"]) == 0 {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(Propagator.Extract(context.Background(), propagation.HeaderCarrier(h)))
}

// Inject writes ctx's span context into h as traceparent (and
// tracestate), for the next hop.
func Inject(ctx context.Context, h http.Header) {
	Propagator.Inject(ctx, propagation.HeaderCarrier(h))
}

// Traceparent returns the traceparent header value of sc, empty when it
// has no valid trace id. It allocates only the string.
func Traceparent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	var b [55]byte // 00-<32 hex>-<16 hex>-<2 hex>
	tid, sid, flags := sc.TraceID(), sc.SpanID(), [1]byte{byte(sc.TraceFlags())}
	b[0], b[1], b[2], b[35], b[52] = '0', '0', '-', '-', '-'
	hex.Encode(b[3:35], tid[:])
	hex.Encode(b[36:52], sid[:])
	hex.Encode(b[53:55], flags[:])
	return string(b[:])
}
