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
// writes the protocol's protobuf straight from the SDK's spans; over gRPC
// the OpenTelemetry project's. The
// sampler is parent-based with a trace-id ratio (OTEL_TRACES_SAMPLER_ARG,
// default 1) unless OTEL_TRACES_SAMPLER names another.
//
// It must not hold global state: the provider is passed to what traces.
package tracing

import (
	"context"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"

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
	// Shutdown flushes and stops the exporter; a no-op when tracing is off.
	Shutdown func(context.Context) error
	// On reports whether spans are exported.
	On bool
}

// Off is the provider of a process that does not trace.
func Off() Provider {
	return Provider{TracerProvider: noop.NewTracerProvider(), Shutdown: func(context.Context) error { return nil }}
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
	protocol := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var exp sdktrace.SpanExporter
	var err error
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
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName(service)))
	if err != nil {
		return Provider{}, err
	}
	if envRes, err := resource.New(ctx, resource.WithFromEnv()); err == nil {
		res, _ = resource.Merge(res, envRes)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp), sdktrace.WithResource(res)}
	if getenv("OTEL_TRACES_SAMPLER") == "" {
		ratio := 1.0
		if v, err := strconv.ParseFloat(getenv("OTEL_TRACES_SAMPLER_ARG"), 64); err == nil && v >= 0 && v <= 1 {
			ratio = v
		}
		opts = append(opts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	return Provider{TracerProvider: tp, Shutdown: tp.Shutdown, On: true}, nil
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
