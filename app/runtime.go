package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"modelplane/busapi"
	"modelplane/runtime"
	"modelplane/runtime/lightgbm"
	"modelplane/runtime/onnx"
	"modelplane/runtime/tokenizer"
	"modelplane/runtime/xgboost"
	"modelplane/serveapi"
	"modelplane/tlscert"
	"modelplane/tracing"
	"modelplane/versioncheck"
)

// runtimeOpeners are the model loaders of the built-in runtime, by the
// registry's format: this map is the one place a loader is registered.
// A format missing here is refused at load with "no loader for format".
func runtimeOpeners() map[string]runtime.Opener {
	return map[string]runtime.Opener{
		"onnx":         onnx.Load,
		"xgboost-json": xgboost.Load,
		"lightgbm":     lightgbm.Load,
	}
}

// runtimeTensors are the loaders of models served with their own tensors
// (a version whose serving configuration names no features), by format.
func runtimeTensors() map[string]runtime.TensorOpener {
	return map[string]runtime.TensorOpener{
		"onnx":      func(path string) (serveapi.TensorModel, error) { return onnx.LoadTensors(path, onnx.Options{}) },
		"tokenizer": tokenizer.Open,
	}
}

// RuntimeConfig configures `modelplane runtime`, the built-in runtime the
// process driver starts per replica.
type RuntimeConfig struct {
	ModelDir string
	Host     string
	Port     int64
	// ReplicaID is reported on /v2/stats, where the agent checks it.
	ReplicaID string
	// Token is the replica's token (MP_REPLICA_TOKEN, from the environment
	// only: a command line is visible to every user of the node); empty
	// serves anyone who reaches the port, as a runtime started by hand.
	Token Secret
	// DrainTimeout bounds how long a stopping runtime waits for requests
	// in flight.
	DrainTimeout time.Duration
	MaxBodyBytes int64
	LogLevel     string
	// TLS is the certificate and key the runtime serves (MP_TLS_CERT,
	// MP_TLS_KEY), for a runtime started by hand or by a launcher that
	// gives it files; a process agent serving TLS terminates it in the
	// replica's guard instead and starts the runtime on loopback.
	TLS tlscert.Files
}

// tokenFromFD reads the replica's token from the descriptor the agent
// names in busapi.ReplicaTokenFDEnv (a pipe it wrote the token to) and
// closes it; false when none is named or it cannot be read.
func tokenFromFD() (string, bool) {
	fd, err := strconv.Atoi(os.Getenv(busapi.ReplicaTokenFDEnv))
	if err != nil || fd < 3 {
		return "", false
	}
	f := os.NewFile(uintptr(fd), "replica-token")
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(b)), true
}

// DefaultRuntimeDrainTimeout is how long a stopping runtime waits for
// in-flight requests: the agent's grace before SIGKILL should be longer.
const DefaultRuntimeDrainTimeout = 30 * time.Second

// Flags registers the runtime settings on fs, with MP_* environment
// variables as defaults.
func (c *RuntimeConfig) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.ModelDir, "model-dir", env("MP_RUNTIME_MODEL_DIR", ""), "model directory holding the model files and modelplane-runtime.json (MP_RUNTIME_MODEL_DIR)")
	fs.StringVar(&c.Host, "host", env("MP_RUNTIME_HOST", "127.0.0.1"), "listen host; 0.0.0.0 when gateways on other machines call it (MP_RUNTIME_HOST)")
	fs.Int64Var(&c.Port, "port", envInt("MP_RUNTIME_PORT", 8000), "listen port; 0 picks a free one (MP_RUNTIME_PORT)")
	fs.StringVar(&c.ReplicaID, "replica-id", env("MP_REPLICA_ID", ""), "replica id reported on /v2/stats (MP_REPLICA_ID)")
	c.Token = Secret(env("MP_REPLICA_TOKEN", ""))
	if t, ok := tokenFromFD(); ok {
		c.Token = Secret(t)
	}
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", envDuration("MP_RUNTIME_DRAIN_TIMEOUT", DefaultRuntimeDrainTimeout), "on SIGTERM, how long in-flight requests may take (MP_RUNTIME_DRAIN_TIMEOUT)")
	fs.Int64Var(&c.MaxBodyBytes, "max-body-bytes", envInt("MP_RUNTIME_MAX_BODY_BYTES", runtime.DefaultMaxBodyBytes), "largest request body (MP_RUNTIME_MAX_BODY_BYTES)")
	fs.StringVar(&c.LogLevel, "log-level", env("MP_LOG_LEVEL", "info"), "debug, info, warn or error (MP_LOG_LEVEL)")
	tlsFlags(fs, &c.TLS, "the runtime's listener")
}

// Validate names every bad setting.
func (c *RuntimeConfig) Validate() error {
	var errs []string
	if c.ModelDir == "" {
		errs = append(errs, "MP_RUNTIME_MODEL_DIR (--model-dir) is required")
	}
	if c.Port < 0 || c.Port > 65535 {
		errs = append(errs, "MP_RUNTIME_PORT (--port) must be a port number, 0 to 65535")
	}
	if c.DrainTimeout <= 0 {
		errs = append(errs, "MP_RUNTIME_DRAIN_TIMEOUT (--drain-timeout) must be a positive duration")
	}
	if c.MaxBodyBytes <= 0 {
		errs = append(errs, "MP_RUNTIME_MAX_BODY_BYTES (--max-body-bytes) must be a positive number")
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		errs = append(errs, fmt.Sprintf("MP_LOG_LEVEL (--log-level) %v", err))
	}
	if c.TLS.CA != "" {
		errs = append(errs, "MP_TLS_CA (--tls-ca) means nothing to the runtime: it calls nobody")
	}
	errs = append(errs, tlsProblems(c.TLS)...)
	if len(errs) > 0 {
		return errors.New("invalid configuration:\n  " + strings.Join(errs, "\n  "))
	}
	return nil
}

// RunRuntime runs `modelplane runtime` until ctx ends: it listens at once
// (live, not ready), loads and warms up the model, then reports ready. A
// load or warm-up failure is returned, so the process exits non-zero with
// the reason. When ctx ends it stops accepting, answers what is in flight
// and returns nil.
func RunRuntime(ctx context.Context, c RuntimeConfig) error {
	return runRuntime(ctx, c, runtimeOpeners(), nil)
}

// runRuntime is RunRuntime with its loaders given; listening, when set, is
// told the bound address.
func runRuntime(ctx context.Context, c RuntimeConfig, openers map[string]runtime.Opener, listening func(addr string)) error {
	if err := c.Validate(); err != nil {
		return err
	}
	log := NewLogger(c.LogLevel)
	addr := net.JoinHostPort(c.Host, strconv.FormatInt(c.Port, 10))
	srvTLS, err := c.TLS.Server(log)
	if err != nil {
		return fmt.Errorf("MP_TLS_CERT (--tls-cert): %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s (MP_RUNTIME_PORT): %w", addr, err)
	}
	ln = srvTLS.Listener(ln)
	tp, err := tracing.FromEnv(ctx, "modelplane-runtime")
	if err != nil {
		ln.Close()
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tp.Shutdown(sctx)
	}()
	s := runtime.New(runtime.Options{ReplicaID: c.ReplicaID, Token: string(c.Token), MaxBodyBytes: c.MaxBodyBytes, Log: log, Tracer: tp,
		Tensors: runtimeTensors()})
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if listening != nil {
		listening(ln.Addr().String())
	}
	stop := func() error {
		s.Drain()
		drain, cancel := context.WithTimeout(context.Background(), c.DrainTimeout)
		defer cancel()
		err := srv.Shutdown(drain)
		if err != nil {
			log.Warn("drain timed out, cutting requests", slog.String("error", err.Error()))
			_ = srv.Close()
		}
		if serr := <-served; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
			err = serr
		}
		if cerr := s.Close(drain); cerr != nil && err == nil {
			err = cerr
		}
		return err
	}
	start := time.Now()
	if err := s.Load(c.ModelDir, openers); err != nil {
		_ = stop()
		return fmt.Errorf("load model: %w", err)
	}
	loaded := time.Now()
	if err := s.Warm(ctx); err != nil {
		_ = stop()
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	log.Info("modelplane runtime ready", slog.String("addr", ln.Addr().String()), slog.String("model_dir", c.ModelDir),
		slog.Float64("load_s", loaded.Sub(start).Seconds()), slog.Float64("warmup_s", time.Since(loaded).Seconds()))
	select {
	case err := <-served:
		_ = s.Close(context.Background())
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("modelplane runtime draining")
	if err := stop(); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	return nil
}

// RuntimeValidateConfig configures `modelplane runtime validate`, the
// child process the control plane validates a version in.
type RuntimeValidateConfig struct {
	ModelDir string
	// MemoryMB is the address space the process allows itself;
	// CPUSeconds and MaxProcesses its CPU time and processes (0: none).
	MemoryMB     int64
	CPUSeconds   int64
	MaxProcesses int64
}

// Flags registers the settings on fs.
func (c *RuntimeValidateConfig) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.ModelDir, "model-dir", "", "model directory holding the model files and modelplane-runtime.json, whose sample_inputs are answered")
	fs.Int64Var(&c.MemoryMB, "memory-mb", versioncheck.DefaultMemoryMB, "address-space limit of this process in MiB (0: none)")
	fs.Int64Var(&c.CPUSeconds, "cpu-seconds", 0, "CPU time limit of this process in seconds (0: none)")
	fs.Int64Var(&c.MaxProcesses, "max-processes", 0, "limit on the processes and threads of this process's user (0: none)")
}

// RunRuntimeValidate loads the model directory as a replica would, answers
// its sample inputs and prints a versioncheck.Report as JSON; it returns the
// exit status (3 when the version is invalid).
func RunRuntimeValidate(ctx context.Context, c RuntimeValidateConfig) int {
	if c.ModelDir == "" {
		fmt.Fprintln(os.Stderr, "modelplane runtime validate: --model-dir is required")
		return 2
	}
	return versioncheck.RunChild(ctx, c.ModelDir, versioncheck.ChildLimits{MemoryMB: c.MemoryMB,
		CPUSeconds: c.CPUSeconds, MaxProcesses: c.MaxProcesses}, runtimeOpeners(), runtimeTensors())
}
