package replica

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/quartz"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"modelplane/busapi"
	"modelplane/sim"
	"modelplane/tracing"
)

// Task is what a version does; the values are the registry's task names.
type Task string

// The tasks a replica can play.
const (
	TaskClassification Task = "classification"
	TaskRegression     Task = "regression"
	TaskLLM            Task = "llm"
)

// Config describes one replica. ReplicaID, Version and Task are required,
// and Engine for an llm replica; zero values of the rest take the defaults
// documented on each field.
type Config struct {
	ReplicaID string
	// Token, when set, is the replica's token: every request but the
	// agent's probes (/v2/health/live, /v2/health/ready, /v2/stats) must
	// carry it in busapi.ReplicaTokenHeader, or is answered 401.
	Token string
	// TLS, when set, makes the replica's listener speak TLS with it (the
	// node's certificate, tlscert.Server.Config); nil serves plain HTTP.
	TLS      *tls.Config
	Endpoint string
	Version  string
	Task     Task
	// Profile is the version's sim profile JSON, read by profile.Parse:
	// unknown keys are refused. Its kind must fit Task; see profile.go.
	Profile json.RawMessage
	// Seed makes every draw reproducible: the same seed and input give the
	// same prediction, latency, failure and generated text.
	Seed uint64
	// Engine generates tokens for TaskLLM (unused otherwise). Nil means
	// the real scheduler: engine.Scheduler with the paged KV cache, built from
	// Profile and Seed.
	Engine Engine

	// LoadDelay is how long the model takes to "load" after Start: until it
	// has passed, /v2/health/ready answers 503 and inference 503.
	LoadDelay time.Duration
	// DrainDelay is how long Stop keeps serving with readiness at 503
	// before it closes the listener, so routers notice first. Default 0.
	DrainDelay time.Duration
	// DrainTimeout bounds how long Stop waits for in-flight requests before
	// it cuts them. Default 30s.
	DrainTimeout time.Duration

	// MaxBodyBytes limits request bodies (413 beyond). Default 1 MiB.
	MaxBodyBytes int64
	// MaxInstances limits instances per predict request. Default 1024.
	MaxInstances int
	// MaxQueue limits chat requests waiting for admission (429 beyond).
	// Default 1024.
	MaxQueue int
	// DefaultMaxTokens is the output length when a chat request sets no
	// max_tokens. Default 128, or MaxTokens when that is smaller.
	DefaultMaxTokens int
	// MaxTokens is the largest max_tokens a chat request may ask for.
	// Default 4096.
	MaxTokens int
	// StreamBuffer is how many generated tokens may wait for a slow client
	// before its generation is cut and cancelled. Default 64.
	StreamBuffer int
	// WriteTimeout bounds each write to a client. Default 10s.
	WriteTimeout time.Duration
	// StatsWindow is the recent window of the percentiles and rates in
	// Stats. Default 60s.
	StatsWindow time.Duration

	// Clock is the replica's time: it schedules steps, waits latencies,
	// load and drain delays, and windows its statistics by it, so that
	// tests run it in model time. Default quartz.NewReal().
	Clock quartz.Clock
	// Log defaults to discarding. Requests are logged at debug level, one
	// line each, without payloads: the gateway in front already logs every
	// request at info.
	Log *slog.Logger
	// Tracer, when set, continues the caller's trace (the gateway's
	// traceparent) as the built-in runtime does: a server span a request
	// and, under it, the simulated work (trace.go). Nil traces nothing.
	Tracer trace.TracerProvider
}

func (c *Config) defaults() {
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 30 * time.Second
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 1 << 20
	}
	if c.MaxInstances == 0 {
		c.MaxInstances = 1024
	}
	if c.MaxQueue == 0 {
		c.MaxQueue = 1024
	}
	if c.MaxTokens == 0 {
		c.MaxTokens = 4096
	}
	if c.DefaultMaxTokens == 0 {
		c.DefaultMaxTokens = min(128, c.MaxTokens)
	}
	if c.StreamBuffer == 0 {
		c.StreamBuffer = 64
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.StatsWindow == 0 {
		c.StatsWindow = time.Minute
	}
	if c.Clock == nil {
		c.Clock = quartz.NewReal()
	}
	if c.Tracer == nil {
		c.Tracer = tracing.Off()
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
}

// Validate names the first bad setting.
func (c *Config) Validate() error {
	switch {
	case c.ReplicaID == "":
		return errors.New("replica id is required")
	case c.Version == "":
		return errors.New("version is required")
	}
	switch c.Task {
	case TaskClassification, TaskRegression:
	case TaskLLM:
		if c.Engine == nil {
			return errors.New("engine is required for an llm replica")
		}
	default:
		return fmt.Errorf("task %q: want classification, regression or llm", c.Task)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"load delay", c.LoadDelay}, {"drain delay", c.DrainDelay}, {"drain timeout", c.DrainTimeout}, {"write timeout", c.WriteTimeout}, {"stats window", c.StatsWindow}} {
		if d.v < 0 {
			return fmt.Errorf("%s must not be negative", d.name)
		}
	}
	for _, n := range []struct {
		name string
		v    int64
	}{{"max body bytes", c.MaxBodyBytes}, {"max instances", int64(c.MaxInstances)}, {"max queue", int64(c.MaxQueue)},
		{"default max tokens", int64(c.DefaultMaxTokens)}, {"max tokens", int64(c.MaxTokens)}, {"stream buffer", int64(c.StreamBuffer)}} {
		if n.v < 0 {
			return fmt.Errorf("%s must not be negative", n.name)
		}
	}
	if c.DefaultMaxTokens > c.MaxTokens && c.MaxTokens > 0 {
		return errors.New("default max tokens must not exceed max tokens")
	}
	return nil
}

// Server is one replica's HTTP server. Build it with New, run it with Start
// and end it with Stop (or by cancelling Start's context).
type Server struct {
	cfg   Config
	model behaviour
	log   *slog.Logger
	clock quartz.Clock
	stats *recorder
	// tracer makes the request spans (trace.go).
	tracer trace.Tracer

	loaded   atomic.Bool
	draining atomic.Bool
	inFlight atomic.Int64
	nextID   atomic.Uint64

	// inbox carries submits and cancels from handlers to the step loop.
	inbox inbox

	mu       sync.Mutex // guards srv and started
	srv      *http.Server
	started  bool
	stopOnce sync.Once
	quit     chan struct{} // closed when the step loop and loader must end
	wg       sync.WaitGroup
}

// New checks cfg and parses the profile. It starts nothing.
func New(cfg Config) (*Server, error) {
	cfg.defaults()
	p, model, err := parseProfile(cfg.Profile, cfg.Task)
	if err != nil {
		return nil, fmt.Errorf("replica config: %w", err)
	}
	if cfg.Task == TaskLLM && cfg.Engine == nil {
		s, err := sim.NewScheduler(sim.Config{Profile: p, Seed: cfg.Seed})
		if err != nil {
			return nil, fmt.Errorf("replica config: %w", err)
		}
		cfg.Engine = NewSchedulerEngine(s)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("replica config: %w", err)
	}
	s := &Server{
		cfg:    cfg,
		model:  model,
		log:    cfg.Log.With(slog.String("replica", cfg.ReplicaID), slog.String("version", cfg.Version)),
		clock:  cfg.Clock,
		tracer: cfg.Tracer.Tracer(tracing.RuntimeScope),
		quit:   make(chan struct{}),
		inbox:  inbox{wake: make(chan struct{}, 1)},
	}
	s.stats = newRecorder(cfg.Clock, cfg.StatsWindow)
	return s, nil
}

// Start listens on addr (for example "127.0.0.1:0") and serves until Stop is
// called or ctx is cancelled. It returns the address it listens on. The
// replica is live at once and ready after Config.LoadDelay.
func (s *Server) Start(ctx context.Context, addr string) (net.Addr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return nil, errors.New("replica already started")
	}
	if s.draining.Load() {
		return nil, errors.New("replica already stopped")
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	if s.cfg.TLS != nil {
		ln = tls.NewListener(ln, s.cfg.TLS)
	}
	s.started = true
	s.stats.start()
	s.srv = &http.Server{
		Handler:           s.routes(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("serve failed", slog.String("error", err.Error()))
		}
	}()
	go func() {
		defer s.wg.Done()
		load := s.clock.NewTimer(s.cfg.LoadDelay, "replica", "load")
		defer load.Stop()
		select {
		case <-load.C:
			s.loaded.Store(true)
			s.log.Info("replica ready", slog.String("addr", ln.Addr().String()))
		case <-s.quit:
		}
	}()
	if s.cfg.Task == TaskLLM {
		s.wg.Add(1)
		go s.run()
	}
	go func() {
		select {
		case <-ctx.Done():
			s.Stop()
		case <-s.quit:
		}
	}()
	return ln.Addr(), nil
}

// Stop drains and ends the replica: readiness turns 503 at once, requests are
// still served for Config.DrainDelay, then the listener closes and in-flight
// requests get up to Config.DrainTimeout to finish before they are cut (and
// their generations cancelled). Stop returns when everything has ended; it
// may be called more than once and before Start.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		s.draining.Store(true)
		s.mu.Lock()
		srv := s.srv
		s.mu.Unlock()
		if srv != nil {
			if s.cfg.DrainDelay > 0 {
				<-s.clock.NewTimer(s.cfg.DrainDelay, "replica", "drain").C
			}
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.DrainTimeout)
			if err := srv.Shutdown(ctx); err != nil {
				s.log.Warn("drain timed out, cutting requests", slog.String("error", err.Error()))
				_ = srv.Close()
			}
			cancel()
		}
		close(s.quit)
		s.wg.Wait()
	})
}

// Ready reports whether the model has loaded and the replica is not draining.
func (s *Server) Ready() bool {
	return s.loaded.Load() && !s.draining.Load()
}

// routes builds the handler tree for the replica's task.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/v2/health/live", only(http.MethodGet, http.HandlerFunc(s.live)))
	mux.Handle("/v2/health/ready", only(http.MethodGet, http.HandlerFunc(s.ready)))
	mux.Handle("/v2/stats", only(http.MethodGet, http.HandlerFunc(s.serveStats)))
	switch s.cfg.Task {
	case TaskLLM:
		mux.Handle("/v1/chat/completions", only(http.MethodPost, s.inference("chat", s.chat)))
		mux.Handle("/v1/completions", only(http.MethodPost, s.inference("completion", s.completion)))
	default:
		mux.Handle("/predict", only(http.MethodPost, s.inference("predict", s.predict)))
		mux.Handle("/v2/models/{model}/infer", only(http.MethodPost, s.inference("infer", s.infer)))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, http.StatusNotFound, "no such route on this replica")
	})
	if s.cfg.Token == "" {
		return mux
	}
	want := []byte(s.cfg.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v2/health/live", "/v2/health/ready", "/v2/stats":
		default:
			if subtle.ConstantTimeCompare([]byte(r.Header.Get(busapi.ReplicaTokenHeader)), want) != 1 {
				writeProblem(w, http.StatusUnauthorized, "this replica answers only its gateways")
				return
			}
		}
		mux.ServeHTTP(w, r)
	})
}

// only answers 405 with a problem body to any other method. The mux's own
// method patterns would answer 405 in plain text.
func only(method string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method {
			w.Header().Set("Allow", method)
			writeProblem(w, http.StatusMethodNotAllowed, "use "+method)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (s *Server) live(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusOK)
}

func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	switch {
	case s.draining.Load():
		writeProblem(w, http.StatusServiceUnavailable, "replica is draining")
	case !s.loaded.Load():
		writeProblem(w, http.StatusServiceUnavailable, "model is loading")
	default:
		w.WriteHeader(http.StatusOK)
	}
}

// inference wraps predict and chat: it counts in-flight requests, answers
// 503 until the model has loaded, sets X-Model-Version, records the request
// count and errors, and logs one line per request.
func (s *Server) inference(route string, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := s.clock.Now()
		s.inFlight.Add(1)
		defer s.inFlight.Add(-1)
		ctx, span := tracing.StartReplica(s.tracer, r, start)
		r = r.WithContext(ctx)
		sw := &statusWriter{ResponseWriter: w}
		sw.Header().Set("X-Model-Version", s.cfg.Version)
		if !s.loaded.Load() {
			sw.Header().Set("Retry-After", "1")
			writeProblem(sw, http.StatusServiceUnavailable, "model is loading")
		} else {
			h(sw, r)
		}
		if sw.status == 0 {
			sw.status = statusClientGone
		}
		tracing.EndReplica(span, s.clock.Now(), s.cfg.Endpoint, s.cfg.Version, sw.status, attribute.Bool("simulated", true))
		s.stats.request(sw.status)
		s.log.LogAttrs(r.Context(), slog.LevelDebug, "request",
			slog.String("request_id", r.Header.Get("X-Request-Id")),
			slog.String("route", route),
			slog.Int("status", sw.status),
			slog.Duration("duration", s.clock.Now().Sub(start)))
	})
}

// statusWriter remembers the status for the request log. A request whose
// client went away before anything was written is logged as 499.
type statusWriter struct {
	http.ResponseWriter
	status int
}

// statusClientGone marks a request abandoned by its client, as nginx does.
const statusClientGone = 499

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

// Unwrap lets http.ResponseController reach the flusher and deadlines.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// problem is an RFC 9457 problem body, the shape the rest of modelplane uses.
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

// readBody reads at most MaxBodyBytes; the error is *http.MaxBytesError when
// the body is larger.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	return s.readBodyAs(w, r, writeProblem)
}

// readBodyAs is readBody answering failures with fail (the LLM routes
// answer in OpenAI's shape).
func (s *Server) readBodyAs(w http.ResponseWriter, r *http.Request, fail func(http.ResponseWriter, int, string)) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			fail(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body exceeds %d bytes", tooBig.Limit))
			return nil, false
		}
		fail(w, http.StatusBadRequest, "reading the request body failed")
		return nil, false
	}
	return body, true
}
