package runtime

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"modelplane/busapi"
	"modelplane/runtime/batch"
	"modelplane/serveapi"
	"modelplane/tracing"
)

// statusClientGone marks a request whose caller went away, as nginx does.
const statusClientGone = 499

// Handler serves the runtime's routes (a GGUF model's are
// llmserve.Server's: OpenAI chat and completions, vLLM's metrics):
//
//	GET  /v2/health/live, /v2/health/ready      KServe V2 health
//	GET  /v2, /v2/models/{m}, /v2/models/{m}/ready
//	POST /v2/models/{m}/infer                   V2 inference (v2.go)
//	POST /predict                               the platform's shape (predict.go)
//	GET  /v2/stats                              what the agent observes
//	GET  /metrics                               Triton's nv_inference_* metrics
//
// With Options.Token set, only the probes the agent makes (health,
// readiness, /v2/stats, /metrics: counts, no model or tenant data) answer
// without the token; everything else wants it in busapi.ReplicaTokenHeader
// and answers 401 without it, so that nobody who reaches the port skips
// the gateway's authentication, limits and billing.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v2/health/live", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /v2/health/ready", s.serveReady)
	mux.HandleFunc("GET /v2", s.serverMetadata)
	mux.HandleFunc("GET /v2/models/{model}", s.withModel(s.modelMetadata))
	mux.HandleFunc("GET /v2/models/{model}/ready", s.withModel(func(w http.ResponseWriter, r *http.Request, _ *loaded) { s.serveReady(w, r) }))
	mux.HandleFunc("POST /v2/models/{model}/infer", s.inference(s.withModel(s.infer)))
	mux.HandleFunc("POST /predict", s.inference(s.predict))
	mux.HandleFunc("GET /v2/stats", s.serveStats)
	mux.HandleFunc("GET /metrics", s.serveMetrics)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, http.StatusNotFound, "no such route on this runtime")
	})
	want := []byte(s.opt.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g := s.gen.Load(); g != nil {
			// A GGUF LLM: its server has the OpenAI routes and its own token check.
			if r.Method != http.MethodPost {
				g.handler.ServeHTTP(w, r) // probes, models, metrics: not traced
				return
			}
			s.traced(w, r, s.clock.Now("runtime", "request"), g.model, g.version, g.handler.ServeHTTP)
			return
		}
		if len(want) > 0 && !probe(r) && subtle.ConstantTimeCompare([]byte(r.Header.Get(busapi.ReplicaTokenHeader)), want) != 1 {
			writeProblem(w, http.StatusUnauthorized, "this replica answers only its gateways")
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// probe reports whether r is one of the agent's probes, which need no
// token: the agent does not hold the gateways' view of the replica, and
// nothing they answer is a model's or a tenant's.
func probe(r *http.Request) bool {
	if r.Method != http.MethodGet {
		return false
	}
	switch p := r.URL.Path; p {
	case "/v2/health/live", "/v2/health/ready", "/v2/stats", "/metrics":
		return true
	default:
		return strings.HasPrefix(p, "/v2/models/") && strings.HasSuffix(p, "/ready") && strings.Count(p, "/") == 4
	}
}

func (s *Server) serveReady(w http.ResponseWriter, r *http.Request) {
	switch {
	case s.draining.Load():
		writeProblem(w, http.StatusServiceUnavailable, "runtime is draining")
	case !s.ready.Load():
		writeProblem(w, http.StatusServiceUnavailable, "model is loading or warming up")
	default:
		w.WriteHeader(http.StatusOK)
	}
}

// withModel answers 404 for a model name this runtime does not serve (or
// before it has loaded one) and passes the loaded model on.
func (s *Server) withModel(h func(http.ResponseWriter, *http.Request, *loaded)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		l := s.m.Load()
		if l == nil || r.PathValue("model") != l.cfg.Model {
			v2Error(w, http.StatusNotFound, "unknown model "+strconv.Quote(r.PathValue("model")))
			return
		}
		h(w, r, l)
	}
}

// inference wraps /predict and V2 infer: it answers 503 with Retry-After
// until the server is ready, counts in-flight requests and records the
// request in /v2/stats.
func (s *Server) inference(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := s.clock.Now("runtime", "request")
		l := s.m.Load()
		if l == nil || !s.ready.Load() {
			s.retryLater(w, "model is loading or warming up")
			return
		}
		l.metrics.inFlight.Set(float64(l.inFlight.Add(1)))
		defer func() { l.metrics.inFlight.Set(float64(l.inFlight.Add(-1))) }()
		if l.cfg.Version != "" {
			w.Header().Set("X-Model-Version", l.cfg.Version)
		}
		status := s.traced(w, r, start, l.cfg.Model, l.cfg.Version, h)
		s.stats.request(status, s.clock.Since(start, "runtime", "request"))
		s.log.LogAttrs(r.Context(), slog.LevelDebug, "request", slog.String("request_id", r.Header.Get("X-Request-Id")),
			slog.String("route", r.Pattern), slog.Int("status", status))
	}
}

// traced serves r with h under the runtime's span (ml_serving.runtime,
// from start), a child of the caller's traceparent, and returns the status answered
// (statusClientGone when none was). What h adds to the trace (the
// batcher's wait and execution; an LLM's queue wait, prefill and decode)
// goes under the span, which h finds in r's context.
func (s *Server) traced(w http.ResponseWriter, r *http.Request, start time.Time, model, version string, h http.HandlerFunc) int {
	ctx, span := tracing.StartReplica(s.tracer, r, start)
	sw := &statusWriter{ResponseWriter: w}
	h(sw, r.WithContext(ctx))
	if sw.status == 0 {
		sw.status = statusClientGone
	}
	tracing.EndReplica(span, time.Now(), model, version, sw.status)
	return sw.status
}

func (s *Server) retryLater(w http.ResponseWriter, detail string) {
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int(s.opt.RetryAfter.Seconds()+0.5))))
	writeProblem(w, http.StatusServiceUnavailable, detail)
}

// readBody reads at most MaxBodyBytes; false when it answered already.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, errf func(http.ResponseWriter, int, string)) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opt.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			errf(w, http.StatusRequestEntityTooLarge, "the body is over "+strconv.FormatInt(s.opt.MaxBodyBytes, 10)+" bytes")
			return nil, false
		}
		errf(w, http.StatusBadRequest, "cannot read the request body")
		return nil, false
	}
	return body, true
}

// failure is an inference that did not produce outputs: the status, the
// message for the caller and the metrics' reason.
type failure struct {
	status int
	msg    string
	reason string
}

// run executes rows through the batcher and counts the request in the
// Triton metrics; a failure says how to answer.
func (s *Server) run(ctx context.Context, l *loaded, rows [][]float32) (batch.Result, *failure) {
	start := s.clock.Now("runtime", "infer")
	res, err := l.batcher.Do(ctx, rows)
	if f := s.account(ctx, l, start, len(rows), res.Queue, res.Compute, res.BatchRows, err); f != nil {
		return res, f
	}
	if w := int64(len(res.Outputs[0])); l.outWidth.Load() == 0 {
		l.outWidth.Store(w)
	}
	return res, nil
}

// account records one request of rows through the batcher, begun at
// start: its spans, its Triton metrics, and how to answer a failure (nil
// on success).
func (s *Server) account(ctx context.Context, l *loaded, start time.Time, rows int, queue, compute time.Duration, batchRows int, err error) *failure {
	if span := trace.SpanFromContext(ctx); err == nil && span.IsRecording() {
		// The batcher measured the wait and the batch's execution; they
		// become the seed's batch_queue_wait and gpu_inference spans.
		tr := span.TracerProvider().Tracer(tracing.RuntimeScope)
		_, q := tr.Start(ctx, "ml_serving.batch_queue_wait", trace.WithTimestamp(start))
		q.End(trace.WithTimestamp(start.Add(queue)))
		_, x := tr.Start(ctx, "ml_serving.gpu_inference", trace.WithTimestamp(start.Add(queue)),
			trace.WithAttributes(attribute.Int("batch_size", batchRows), attribute.Int("rows", rows)))
		x.End(trace.WithTimestamp(start.Add(queue + compute)))
	}
	switch {
	case err == nil:
		m := l.metrics
		m.success.Inc()
		m.count.Add(float64(rows))
		m.requestUS.Add(micros(s.clock.Since(start, "runtime", "infer")))
		m.queueUS.Add(micros(queue))
		m.computeUS.Add(micros(compute))
		return nil
	case errors.Is(err, batch.ErrQueueTimeout):
		l.metrics.failed(reasonRejected)
		return &failure{http.StatusServiceUnavailable, "the request waited past the queue timeout and was not executed; retry", reasonRejected}
	case errors.Is(err, batch.ErrStopped):
		l.metrics.failed(reasonRejected)
		return &failure{http.StatusServiceUnavailable, "runtime is draining; retry", reasonRejected}
	case ctx.Err() != nil:
		l.metrics.failed(reasonCanceled)
		return &failure{statusClientGone, "", reasonCanceled}
	default:
		l.metrics.failed(reasonBackend)
		// The model's message names rows, never their values.
		s.log.Error("inference failed", slog.String("model", l.cfg.Model), slog.String("version", l.cfg.Version), slog.String("error", err.Error()))
		return &failure{http.StatusInternalServerError, "inference failed", reasonBackend}
	}
}

// answerFailure writes a failure with errf, adding Retry-After to a 503;
// a caller that went away gets nothing.
func (s *Server) answerFailure(w http.ResponseWriter, f *failure, errf func(http.ResponseWriter, int, string)) {
	switch f.status {
	case statusClientGone:
		return
	case http.StatusServiceUnavailable:
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(s.opt.RetryAfter.Seconds()+0.5))))
	}
	errf(w, f.status, f.msg)
}

func (s *Server) serveStats(w http.ResponseWriter, r *http.Request) {
	st := replicaStats{ReplicaID: s.opt.ReplicaID, Ready: s.Ready()}
	if l := s.m.Load(); l != nil {
		bs := l.queueStats()
		st.Endpoint, st.Version = l.cfg.Model, l.cfg.Version
		st.Task = "classification"
		if l.tensors != nil || l.model.OutputKind() == serveapi.OutputValue {
			st.Task = "regression"
		}
		st.QueueDepth = bs.QueuedRequests
		st.BatchSize = bs.ExecutingRows
		if st.BatchSize == 0 {
			st.BatchSize = bs.LastBatchRows
		}
		st.InFlight = int(l.inFlight.Load())
	}
	st.Requests, st.Errors, st.Cancelled, st.LatencyP50Ms, st.LatencyP99Ms = s.stats.snapshot()
	writeJSON(w, http.StatusOK, st)
}

func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	l := s.m.Load()
	if l == nil {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		return
	}
	promhttp.HandlerFor(l.metrics.reg, promhttp.HandlerOpts{}).ServeHTTP(w, r)
}

// statusWriter remembers the status for the request's record.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// problem is an RFC 9457 problem body, the shape the rest of modelplane
// (and the simulated replicas) answer errors with.
type problem struct {
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

func writeProblem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(problem{Title: http.StatusText(status), Status: status, Detail: detail})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeProblem(w, http.StatusInternalServerError, "encoding the response failed")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
