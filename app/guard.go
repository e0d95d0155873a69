package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"modelplane/agent/guard"
	"modelplane/tlscert"
)

// GuardConfig configures `modelplane guard`: the replica token check the
// Kubernetes driver (agent/cluster) runs as a sidecar container in the pod
// of a runtime that does not check the token itself (vLLM, Triton,
// llama-server). The runtime listens on the pod's loopback; the guard
// holds the pod's service port, as the process driver's guard holds the
// replica's address on a node (package guard, the same code).
type GuardConfig struct {
	// Listen is the guard's address, the port gateways are given.
	Listen string
	// Upstream is the runtime on loopback.
	Upstream string
	// Token is the replica's token (MP_REPLICA_TOKEN, from the pod's
	// Secret; environment only, never a flag).
	Token Secret
	// Open are the probe paths that pass without the token.
	Open string
	// MetricsPath and MetricsUpstream serve a runtime's metrics kept on a
	// port of their own (Triton's 8002, on loopback) at MetricsPath, for
	// the agent.
	MetricsPath     string
	MetricsUpstream string
	// DrainTimeout bounds how long a stopping guard forwards the requests
	// in flight (the runtime drains at the same time).
	DrainTimeout time.Duration
	// TLS is the certificate and key the guard serves (MP_TLS_CERT,
	// MP_TLS_KEY: the pool's Secret mounted in the pod), read again when
	// they change; none is plain HTTP. CA is not read.
	TLS      tlscert.Files
	LogLevel string
}

// Flags registers the settings on fs, with MP_* environment variables as
// defaults.
func (c *GuardConfig) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Listen, "listen", env("MP_GUARD_LISTEN", ":8000"), "the guard's address, where gateways call the replica (MP_GUARD_LISTEN)")
	fs.StringVar(&c.Upstream, "upstream", env("MP_GUARD_UPSTREAM", ""), "the runtime's loopback address, host:port (MP_GUARD_UPSTREAM)")
	c.Token = Secret(env("MP_REPLICA_TOKEN", ""))
	fs.StringVar(&c.Open, "open", env("MP_GUARD_OPEN", ""), "comma-separated paths served without the token: the probes (MP_GUARD_OPEN)")
	fs.StringVar(&c.MetricsPath, "metrics-path", env("MP_GUARD_METRICS_PATH", ""), "path that serves --metrics-upstream's metrics without the token (MP_GUARD_METRICS_PATH)")
	fs.StringVar(&c.MetricsUpstream, "metrics-upstream", env("MP_GUARD_METRICS_UPSTREAM", ""), "the runtime's loopback metrics address, host:port (MP_GUARD_METRICS_UPSTREAM)")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", envDuration("MP_GUARD_DRAIN_TIMEOUT", DefaultRuntimeDrainTimeout), "on SIGTERM, how long requests in flight may take (MP_GUARD_DRAIN_TIMEOUT)")
	fs.StringVar(&c.TLS.Cert, "tls-cert", env("MP_TLS_CERT", ""), "PEM certificate the guard serves; read again when it changes (MP_TLS_CERT)")
	fs.StringVar(&c.TLS.Key, "tls-key", env("MP_TLS_KEY", ""), "PEM private key of --tls-cert (MP_TLS_KEY)")
	fs.StringVar(&c.LogLevel, "log-level", env("MP_LOG_LEVEL", "info"), "debug, info, warn or error (MP_LOG_LEVEL)")
}

// Validate names every bad setting.
func (c GuardConfig) Validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("MP_GUARD_LISTEN (--listen) %q is not host:port", c.Listen))
	}
	if err := loopbackAddr(c.Upstream); err != nil {
		errs = append(errs, fmt.Errorf("MP_GUARD_UPSTREAM (--upstream) %w", err))
	}
	if c.Token == "" {
		errs = append(errs, errors.New("MP_REPLICA_TOKEN is required: a guard without the replica's token keeps nobody out"))
	}
	for _, p := range c.open() {
		if !strings.HasPrefix(p, "/") {
			errs = append(errs, fmt.Errorf("MP_GUARD_OPEN (--open) %q is not a path", p))
		}
	}
	if (c.MetricsPath == "") != (c.MetricsUpstream == "") {
		errs = append(errs, errors.New("--metrics-path and --metrics-upstream go together"))
	} else if c.MetricsPath != "" {
		if !strings.HasPrefix(c.MetricsPath, "/") {
			errs = append(errs, fmt.Errorf("MP_GUARD_METRICS_PATH (--metrics-path) %q is not a path", c.MetricsPath))
		}
		if err := loopbackAddr(c.MetricsUpstream); err != nil {
			errs = append(errs, fmt.Errorf("MP_GUARD_METRICS_UPSTREAM (--metrics-upstream) %w", err))
		}
	}
	if c.DrainTimeout <= 0 {
		errs = append(errs, errors.New("MP_GUARD_DRAIN_TIMEOUT (--drain-timeout) must be a positive duration"))
	}
	for _, p := range c.TLS.Problems("MP_TLS_CERT (--tls-cert)", "MP_TLS_KEY (--tls-key)", "MP_TLS_CA") {
		errs = append(errs, errors.New(p))
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		errs = append(errs, fmt.Errorf("MP_LOG_LEVEL (--log-level) %w", err))
	}
	return errors.Join(errs...)
}

// loopbackAddr checks that addr is host:port on a loopback IP: the guard
// forwards only inside its pod (or machine).
func loopbackAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return fmt.Errorf("%q is not host:port", addr)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%q is not on a loopback IP: the runtime behind a guard listens on loopback only", addr)
	}
	return nil
}

func (c GuardConfig) open() []string {
	var out []string
	for _, p := range strings.Split(c.Open, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// RunGuard runs `modelplane guard` until ctx ends, then forwards the
// requests in flight for at most DrainTimeout.
func RunGuard(ctx context.Context, c GuardConfig) error {
	return runGuard(ctx, c, nil)
}

// runGuard is RunGuard; listening, when set, is told the bound address.
func runGuard(ctx context.Context, c GuardConfig, listening func(addr string)) error {
	if err := c.Validate(); err != nil {
		return err
	}
	log := NewLogger(c.LogLevel)
	srvTLS, err := c.TLS.Server(log)
	if err != nil {
		return fmt.Errorf("MP_TLS_CERT (--tls-cert): %w", err)
	}
	opts := guard.Options{Token: string(c.Token), Open: c.open(),
		MetricsPath: c.MetricsPath, MetricsAddr: c.MetricsUpstream, Log: log}
	if srvTLS != nil {
		opts.TLS = srvTLS.Config()
	}
	g, err := guard.Listen(c.Listen, c.Upstream, opts)
	if err != nil {
		return fmt.Errorf("guard: %w", err)
	}
	log.Info("modelplane guard listening", slog.String("addr", g.Addr()), slog.String("upstream", c.Upstream))
	if listening != nil {
		listening(g.Addr())
	}
	<-ctx.Done()
	dctx, cancel := context.WithTimeout(context.Background(), c.DrainTimeout)
	defer cancel()
	if err := g.Shutdown(dctx); err != nil {
		log.Warn("guard drain cut short", slog.String("error", err.Error()))
	}
	return nil
}
