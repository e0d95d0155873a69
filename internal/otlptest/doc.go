// Package otlptest runs a real OTLP trace receiver for tests: an HTTP
// server speaking OTLP/HTTP with protobuf bodies (what modelplane's
// exporters send by default) that decodes every export with the
// OpenTelemetry project's own protocol definitions
// (go.opentelemetry.io/proto/otlp) and keeps the spans, so a test can ask
// which processes took part in a trace and how their spans link.
//
// It is a receiver, not a mock of one: it answers as the OTLP
// specification says (200 with an ExportTraceServiceResponse, 415 for a
// body that is not protobuf, 400 for one that does not decode), so an
// exporter that sends something a collector would refuse fails here too.
package otlptest
