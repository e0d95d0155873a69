package tracing

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// httpExporter sends spans over OTLP/HTTP with protobuf bodies, encoded by
// encoder straight from the SDK's spans into a buffer it keeps. It reads
// the OTEL_EXPORTER_OTLP_* settings the specification lists for
// OTLP/HTTP: endpoint, headers, timeout, compression and TLS files.
type httpExporter struct {
	cfg    httpConfig
	client *http.Client

	mu      sync.Mutex // one export at a time: enc and zbuf are reused
	enc     encoder
	zbuf    bytes.Buffer
	zw      *gzip.Writer
	stopped bool
}

// httpConfig is an httpExporter's settings.
type httpConfig struct {
	url     string
	headers http.Header
	timeout time.Duration
	gzip    bool
	tls     *tls.Config
}

// Retry settings for an export the receiver asks to have again later (429,
// 502, 503, 504) or that did not reach it: the waits double from
// firstBackoff up to maxBackoff, or are what Retry-After says, within the
// export's timeout.
const (
	firstBackoff = 500 * time.Millisecond
	maxBackoff   = 8 * time.Second
)

var errExporterStopped = errors.New("otlp exporter shut down")

// newHTTPExporter builds the exporter the environment describes.
func newHTTPExporter(getenv func(string) string) (*httpExporter, error) {
	cfg, err := httpConfigFrom(getenv)
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg.tls
	x := &httpExporter{cfg: cfg, client: &http.Client{Transport: tr}}
	if cfg.gzip {
		x.zw = gzip.NewWriter(io.Discard)
	}
	return x, nil
}

// setting returns the traces-specific variable OTEL_EXPORTER_OTLP_TRACES_<name>
// when set, else OTEL_EXPORTER_OTLP_<name>.
func setting(getenv func(string) string, name string) (string, string) {
	if v := getenv("OTEL_EXPORTER_OTLP_TRACES_" + name); v != "" {
		return "OTEL_EXPORTER_OTLP_TRACES_" + name, v
	}
	return "OTEL_EXPORTER_OTLP_" + name, getenv("OTEL_EXPORTER_OTLP_" + name)
}

func httpConfigFrom(getenv func(string) string) (httpConfig, error) {
	cfg := httpConfig{url: "http://localhost:4318/v1/traces", headers: http.Header{}, timeout: 10 * time.Second}
	if v := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); v != "" {
		cfg.url = v // used as given
	} else if v := getenv("OTEL_EXPORTER_OTLP_ENDPOINT"); v != "" {
		cfg.url = strings.TrimSuffix(v, "/") + "/v1/traces"
	}
	u, err := url.Parse(cfg.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return cfg, fmt.Errorf("OTLP traces endpoint %q: want an http:// or https:// URL", cfg.url)
	}
	if name, v := setting(getenv, "HEADERS"); v != "" {
		for pair := range strings.SplitSeq(v, ",") {
			k, val, ok := strings.Cut(pair, "=")
			k = strings.TrimSpace(k)
			val, err := url.PathUnescape(strings.TrimSpace(val))
			if !ok || k == "" || err != nil {
				return cfg, fmt.Errorf("%s: want key=value pairs separated by commas, values URL-encoded", name)
			}
			cfg.headers.Add(k, val)
		}
	}
	if name, v := setting(getenv, "TIMEOUT"); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms <= 0 {
			return cfg, fmt.Errorf("%s %q: want a positive number of milliseconds", name, v)
		}
		cfg.timeout = time.Duration(ms) * time.Millisecond
	}
	switch name, v := setting(getenv, "COMPRESSION"); v {
	case "gzip":
		cfg.gzip = true
	case "", "none":
	default:
		return cfg, fmt.Errorf("%s %q: want gzip or none", name, v)
	}
	if cfg.tls, err = tlsConfigFrom(getenv); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// tlsConfigFrom reads the certificate authority and client certificate
// files, nil when none is set.
func tlsConfigFrom(getenv func(string) string) (*tls.Config, error) {
	caName, ca := setting(getenv, "CERTIFICATE")
	certName, cert := setting(getenv, "CLIENT_CERTIFICATE")
	keyName, key := setting(getenv, "CLIENT_KEY")
	if ca == "" && cert == "" && key == "" {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", caName, err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s %s: no PEM certificate in it", caName, ca)
		}
	}
	if (cert == "") != (key == "") {
		return nil, fmt.Errorf("%s and %s go together", certName, keyName)
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("%s, %s: %w", certName, keyName, err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

// ExportSpans sends spans in one request, retrying what the receiver asks
// to have again until the export's timeout.
func (x *httpExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if len(spans) == 0 {
		return nil
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.stopped {
		return errExporterStopped
	}
	return x.send(ctx, x.enc.encode(spans))
}

// exportRequests sends a Recorder's spans in one request, written from
// their values, as ExportSpans sends the SDK's.
func (x *httpExporter) exportRequests(ctx context.Context, res *resource.Resource, scope instrumentation.Scope, spans []RequestSpan) error {
	if len(spans) == 0 {
		return nil
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.stopped {
		return errExporterStopped
	}
	return x.send(ctx, x.enc.encodeRequests(res, scope, spans))
}

// send posts body (the encoder's, x.mu held), compressed when configured.
func (x *httpExporter) send(ctx context.Context, body []byte) error {
	if x.zw != nil {
		x.zbuf.Reset()
		x.zw.Reset(&x.zbuf)
		_, _ = x.zw.Write(body)
		if err := x.zw.Close(); err != nil {
			return fmt.Errorf("otlp export: gzip: %w", err)
		}
		body = x.zbuf.Bytes()
	}
	ctx, cancel := context.WithTimeout(ctx, x.cfg.timeout)
	defer cancel()
	backoff := firstBackoff
	for {
		wait, err := x.post(ctx, body)
		if err == nil || wait < 0 {
			return err
		}
		if wait == 0 {
			wait = backoff
			backoff = min(2*backoff, maxBackoff)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (gave up: %w)", err, ctx.Err())
		case <-t.C:
		}
	}
}

// post makes one export request. A failure worth trying again comes with
// how long to wait first (0: the caller's backoff); one that is not with
// a negative wait.
func (x *httpExporter) post(ctx context.Context, body []byte) (time.Duration, error) {
	// body is the encoder's buffer, the next batch's: net/http may read a
	// request's body after Do has returned the answer, but it closes
	// every body it was given, on errors too (http.RoundTripper), so the
	// buffer is free once each reader made of it is closed. Waiting for
	// that costs nothing a batch; a copy of the body cost a batch's bytes
	// again, allocated.
	var reading sync.WaitGroup
	defer reading.Wait()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, x.cfg.url, http.NoBody)
	if err != nil {
		return -1, fmt.Errorf("otlp export: %w", err)
	}
	req.ContentLength = int64(len(body))
	req.GetBody = func() (io.ReadCloser, error) { return newBodyReader(body, &reading), nil }
	req.Body, _ = req.GetBody()
	for k, v := range x.cfg.headers {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("User-Agent", "modelplane-otlp-exporter")
	if x.zw != nil {
		req.Header.Set("Content-Encoding", "gzip")
	}
	resp, err := x.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("otlp export: %w", err)
	}
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if err != nil {
		return 0, fmt.Errorf("otlp export: read answer: %w", err)
	}
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		return -1, partialSuccess(answer)
	case code == http.StatusTooManyRequests || code == http.StatusBadGateway || code == http.StatusServiceUnavailable || code == http.StatusGatewayTimeout:
		wait := time.Duration(0)
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
			wait = max(time.Duration(s)*time.Second, time.Millisecond)
		}
		return wait, fmt.Errorf("otlp export: receiver answered %s", resp.Status)
	default:
		return -1, fmt.Errorf("otlp export: receiver answered %s: %.200s", resp.Status, answer)
	}
}

// bodyReader reads an export's body and tells reading when net/http has
// closed it.
type bodyReader struct {
	bytes.Reader
	reading *sync.WaitGroup
	once    sync.Once
}

func newBodyReader(body []byte, reading *sync.WaitGroup) *bodyReader {
	reading.Add(1)
	b := &bodyReader{reading: reading}
	b.Reset(body)
	return b
}

// Close marks the body read; net/http may call it more than once.
func (b *bodyReader) Close() error {
	b.once.Do(b.reading.Done)
	return nil
}

// partialSuccess reads an ExportTraceServiceResponse: nil unless the
// receiver says it rejected spans.
func partialSuccess(b []byte) error {
	ps := field(b, fPartialSuccess)
	if ps == nil {
		return nil
	}
	var rejected uint64
	if v := field(ps, fPartialRejected); v != nil {
		rejected, _ = protowire.ConsumeVarint(v)
	}
	msg := string(field(ps, fPartialErrorMessage))
	if rejected == 0 && msg == "" {
		return nil
	}
	return fmt.Errorf("otlp export: receiver rejected %d spans: %s", rejected, msg)
}

// field returns the last value of field num in the protobuf message b:
// the bytes of a length-delimited field, the varint's bytes otherwise; nil
// when absent or b does not parse.
func field(b []byte, num protowire.Number) []byte {
	var out []byte
	for len(b) > 0 {
		n, typ, k := protowire.ConsumeTag(b)
		if k < 0 {
			return nil
		}
		b = b[k:]
		m := protowire.ConsumeFieldValue(n, typ, b)
		if m < 0 {
			return nil
		}
		if n == num {
			out = b[:m]
			if typ == protowire.BytesType {
				out, _ = protowire.ConsumeBytes(b[:m])
			}
		}
		b = b[m:]
	}
	return out
}

// Shutdown stops exports; the batch processor has flushed before.
func (x *httpExporter) Shutdown(context.Context) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.stopped = true
	x.client.CloseIdleConnections()
	return nil
}
