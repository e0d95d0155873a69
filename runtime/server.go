package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/quartz"
	"go.opentelemetry.io/otel/trace"

	"modelplane/runtime/batch"
	"modelplane/serveapi"
	"modelplane/tracing"
)

// Opener loads a model file: each loader package's Load.
type Opener func(path string) (serveapi.Model, error)

// Defaults of Options.
const (
	DefaultMaxBodyBytes = 8 << 20
	DefaultMaxInstances = 4096
	DefaultRetryAfter   = time.Second
)

// Options are the server's settings that are not the model's.
type Options struct {
	// ReplicaID is reported on /v2/stats, where the agent checks it.
	ReplicaID string
	// Token, when set, is the replica's token: every request but the
	// agent's probes must carry it in proto.ReplicaTokenHeader, or is
	// answered 401 (see Handler).
	Token string
	// MaxBodyBytes bounds a request body; MaxInstances the instances (or
	// V2 rows) of one request.
	MaxBodyBytes int64
	MaxInstances int
	// RetryAfter is sent with 503s.
	RetryAfter time.Duration
	// Tensors are the loaders of models served with their own tensors,
	// by format: a version whose configuration names no features is
	// loaded by the one of its format.
	Tensors map[string]TensorOpener
	// Clock defaults to the real one; Log to discarding.
	Clock quartz.Clock
	Log   *slog.Logger
	// Tracer continues the caller's trace (the gateway's traceparent) with
	// the replica's span, its queue wait and its batch's execution (nil:
	// nothing is traced).
	Tracer trace.TracerProvider
}

// extensions are the model file extensions of each format, for a Config
// that names no File.
var extensions = map[string]string{
	"onnx":         ".onnx",
	"xgboost-json": ".json",
	"lightgbm":     ".txt",
	"tokenizer":    ".json",
}

// loaded is what Load builds; it is set once and read without locks.
type loaded struct {
	cfg serveapi.Config
	// tensors is set for a tensor model (no features), and then model,
	// enc, dec and batcher are not.
	tensors *tensors
	model   serveapi.Model
	enc     *encoder
	dec     *decoder
	batcher *batch.Batcher
	metrics *metrics
	// outWidth is the output row width seen at warm-up (0 before it).
	outWidth atomic.Int64
	// inFlight counts inference requests being answered.
	inFlight atomic.Int64
}

// Server is one replica of the built-in runtime. Its handler answers from
// the start: live at once, ready only once the model is loaded and warmed
// up, and not while draining.
type Server struct {
	tracer trace.Tracer
	opt    Options
	log    *slog.Logger
	clock  quartz.Clock

	m        atomic.Pointer[loaded]
	gen      atomic.Pointer[generative] // a GGUF LLM, instead of m
	ready    atomic.Bool
	draining atomic.Bool
	stats    *stats

	closeOnce sync.Once
	closeErr  error
}

// New returns a server with no model yet.
func New(opt Options) *Server {
	if opt.MaxBodyBytes <= 0 {
		opt.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opt.MaxInstances <= 0 {
		opt.MaxInstances = DefaultMaxInstances
	}
	if opt.RetryAfter <= 0 {
		opt.RetryAfter = DefaultRetryAfter
	}
	if opt.Clock == nil {
		opt.Clock = quartz.NewReal()
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	if opt.Tracer == nil {
		opt.Tracer = tracing.Off()
	}
	return &Server{opt: opt, log: opt.Log, clock: opt.Clock, stats: newStats(), tracer: opt.Tracer.Tracer(tracing.RuntimeScope)}
}

// Open is New and Load.
func Open(dir string, openers map[string]Opener, opt Options) (*Server, error) {
	s := New(opt)
	if err := s.Load(dir, openers); err != nil {
		return nil, err
	}
	return s, nil
}

// ReadConfig reads and checks the serving configuration of a model
// directory.
func ReadConfig(dir string) (serveapi.Config, error) {
	var cfg serveapi.Config
	b, err := os.ReadFile(filepath.Join(dir, serveapi.ConfigFile))
	if err != nil {
		return cfg, fmt.Errorf("read serving configuration: %w", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return cfg, fmt.Errorf("%s: %w", serveapi.ConfigFile, err)
	}
	var errs []string
	if cfg.Model == "" {
		errs = append(errs, "model is required")
	}
	if cfg.Format == "" {
		errs = append(errs, "format is required")
	}
	if cfg.Batching.MaxBatchSize < 0 || cfg.Batching.MaxQueueDelayUS < 0 || cfg.Batching.QueueTimeoutMS < 0 {
		errs = append(errs, "batching: sizes, delays and timeouts must not be negative")
	}
	if len(errs) > 0 {
		return cfg, fmt.Errorf("%s: %s", serveapi.ConfigFile, strings.Join(errs, "; "))
	}
	return cfg, nil
}

// modelFile is the path of the model file: Config.File, or the only file
// with the format's extension.
func modelFile(dir string, cfg serveapi.Config) (string, error) {
	if cfg.File != "" {
		if !filepath.IsLocal(cfg.File) {
			return "", fmt.Errorf("file %q is not inside the model directory", cfg.File)
		}
		return filepath.Join(dir, cfg.File), nil
	}
	ext, ok := extensions[cfg.Format]
	if !ok {
		return "", fmt.Errorf("format %q has no default extension: name the file", cfg.Format)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	var found []string
	for _, e := range entries {
		if e.Type().IsRegular() && strings.EqualFold(filepath.Ext(e.Name()), ext) && e.Name() != serveapi.ConfigFile {
			found = append(found, e.Name())
		}
	}
	if len(found) != 1 {
		return "", fmt.Errorf("want exactly one %s file in the model directory, found %d: name the file", ext, len(found))
	}
	return filepath.Join(dir, found[0]), nil
}

// Load reads the model directory's configuration, loads the model through
// the opener of its format and starts the batcher. The server is not ready
// until Warm succeeds.
func (s *Server) Load(dir string, openers map[string]Opener) error {
	if s.m.Load() != nil || s.gen.Load() != nil {
		return errors.New("runtime: a model is already loaded")
	}
	if name, version, path, ok, err := ggufModel(dir); err != nil {
		return err
	} else if ok {
		set, err := GGUFSettings(dir)
		if err != nil {
			return err
		}
		return s.loadGGUF(name, version, path, set)
	}
	start := s.clock.Now()
	cfg, err := ReadConfig(dir)
	if err != nil {
		return err
	}
	open, ok := openers[cfg.Format]
	if _, tensor := s.opt.Tensors[cfg.Format]; !ok && !tensor {
		return fmt.Errorf("no loader for format %q", cfg.Format)
	}
	path, err := modelFile(dir, cfg)
	if err != nil {
		return err
	}
	if topen, ok := s.opt.Tensors[cfg.Format]; ok && len(cfg.Features) == 0 {
		return s.loadTensors(cfg, path, topen, func() float64 { return s.clock.Since(start).Seconds() })
	}
	enc, err := newEncoder(cfg.Features)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("format %q is served with its own tensors: a version of it names no features", cfg.Format)
	}
	m, err := open(path)
	if err != nil {
		return fmt.Errorf("load %s: %w", filepath.Base(path), err)
	}
	fail := func(err error) error {
		_ = m.Close()
		return err
	}
	if m.NumFeatures() != enc.width {
		return fail(fmt.Errorf("the model reads %d columns but the features make %d", m.NumFeatures(), enc.width))
	}
	dec, err := newDecoder(m.OutputKind(), cfg.Output)
	if err != nil {
		return fail(err)
	}
	l := &loaded{cfg: cfg, model: m, enc: enc, dec: dec}
	l.metrics = newMetrics(cfg.Model, cfg.Version, func() float64 { return float64(l.queueStats().QueuedRequests) })
	l.metrics.loadSec.Set(s.clock.Since(start).Seconds())
	l.batcher, err = batch.New(m, batch.Config{
		MaxBatchSize:        cfg.Batching.MaxBatchSize,
		MaxQueueDelay:       time.Duration(cfg.Batching.MaxQueueDelayUS) * time.Microsecond,
		PreferredBatchSizes: cfg.Batching.PreferredBatchSizes,
		QueueTimeout:        time.Duration(cfg.Batching.QueueTimeoutMS) * time.Millisecond,
		Clock:               s.clock,
		OnBatch:             func(e batch.Executed) { s.executed(l, e) },
	})
	if err != nil {
		return fail(fmt.Errorf("batching: %w", err))
	}
	l.batcher.Start()
	s.m.Store(l)
	return nil
}

// executed counts one batch; warm-up batches are not counted, as Triton
// does not count its warm-up.
func (s *Server) executed(l *loaded, e batch.Executed) {
	if !s.ready.Load() {
		return
	}
	l.metrics.execCount.Inc()
	l.metrics.batchRows.Set(float64(e.Rows))
}

// Warm runs the configuration's sample inputs through the model, checks
// its outputs fit the output mapping, and then reports ready. A failure
// names the sample and leaves the server not ready: the command exits on
// it.
func (s *Server) Warm(ctx context.Context) error {
	if g := s.gen.Load(); g != nil {
		if err := g.warm(ctx); err != nil {
			return err
		}
		s.ready.Store(true)
		return nil
	}
	l := s.m.Load()
	if l == nil {
		return errors.New("runtime: no model loaded")
	}
	start := s.clock.Now()
	if l.tensors != nil {
		if len(l.cfg.SampleInputs) > 0 {
			if _, err := s.Answer(ctx, l.cfg.SampleInputs); err != nil {
				return fmt.Errorf("warm-up: %w", err)
			}
		}
		l.metrics.warmupSec.Set(s.clock.Since(start).Seconds())
		s.ready.Store(true)
		return nil
	}
	var rows [][]float32
	for i, raw := range l.cfg.SampleInputs {
		row, err := l.enc.instance(raw, fmt.Sprintf("sample_inputs[%d]", i))
		if err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
		rows = append(rows, row)
	}
	if len(rows) > 0 {
		res, err := l.batcher.Do(ctx, rows)
		if err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
		for i, out := range res.Outputs {
			if _, err := l.dec.answer(out); err != nil {
				return fmt.Errorf("warm-up: sample_inputs[%d]: %w", i, err)
			}
		}
		l.outWidth.Store(int64(len(res.Outputs[0])))
	}
	l.metrics.warmupSec.Set(s.clock.Since(start).Seconds())
	s.ready.Store(true)
	return nil
}

// Ready reports whether the server takes inference requests.
func (s *Server) Ready() bool { return s.ready.Load() && !s.draining.Load() }

// Drain makes readiness fail, so that the agent and the gateway stop
// sending, while requests still in flight are answered.
func (s *Server) Drain() {
	s.draining.Store(true)
	if g := s.gen.Load(); g != nil {
		g.srv.Drain()
	}
}

// Close drains, executes what is queued (or gives up when ctx ends) and
// releases the model. Call it after the HTTP server has stopped.
func (s *Server) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.Drain()
		if g := s.gen.Load(); g != nil {
			g.eng.Stop()
		}
		l := s.m.Load()
		if l == nil {
			return
		}
		if l.tensors != nil {
			if err := l.tensors.queue.Stop(ctx); err != nil {
				s.closeErr = fmt.Errorf("stop batcher: %w", err)
				return
			}
			if err := l.tensors.model.Close(); err != nil {
				s.closeErr = fmt.Errorf("close model: %w", err)
			}
			return
		}
		if err := l.batcher.Stop(ctx); err != nil {
			s.closeErr = fmt.Errorf("stop batcher: %w", err)
			return // the executor may still be in Predict: keep the model
		}
		if err := l.model.Close(); err != nil {
			s.closeErr = fmt.Errorf("close model: %w", err)
		}
	})
	return s.closeErr
}

// queueStats is the batcher's state, of either kind of model.
func (l *loaded) queueStats() batch.Stats {
	if l.tensors != nil {
		return l.tensors.queue.Stats()
	}
	return l.batcher.Stats()
}

func pathBase(p string) string { return filepath.Base(p) }

func durationUS(us int) time.Duration { return time.Duration(us) * time.Microsecond }

func durationMS(ms int) time.Duration { return time.Duration(ms) * time.Millisecond }
