package guard

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"slices"
	"time"

	"modelplane/busapi"
)

// Guard is a running token check in front of one runtime. The probe
// paths (health, readiness, metrics) pass without the token, as the
// built-in runtime lets them: probes go through the guard, so a replica is
// ready only when its guard forwards too.
type Guard struct {
	srv  *http.Server
	tr   *http.Transport
	addr string
}

// Limits bound how long a client may hold a guard's connection without
// finishing what it sends: anyone who reaches the replica's address may
// connect, token or not.
type Limits struct {
	// Header bounds reading a request's headers.
	Header time.Duration
	// Read bounds reading a whole request, headers and body, from its
	// start. It is lifted once the body is in: on HTTP/1 the server then
	// reads the connection to notice the caller leave, and a deadline
	// passing there would cut a long or streamed answer. A request the
	// guard refuses keeps it, so the unread rest of its body is not waited
	// for beyond it.
	Read time.Duration
	// Idle bounds how long a kept-alive connection waits for its next
	// request. It is above the gateway's transport's IdleConnTimeout (90
	// s), so the gateway drops an idle connection before the guard does and
	// never sends on one the guard is closing.
	Idle time.Duration
}

// DefaultLimits are the limits of a guard whose Options leave them zero.
var DefaultLimits = Limits{Header: 10 * time.Second, Read: 30 * time.Second, Idle: 2 * time.Minute}

// Options are what a guard checks, serves and forwards.
type Options struct {
	// Token is the replica's token; "" lets every request through (a
	// replica without one). Open are the paths that pass without it (the
	// catalogue entry's probes).
	Token string
	Open  []string
	// MetricsPath and MetricsAddr, when both are set, serve the runtime's
	// metrics kept on a port of their own (Triton's, on loopback) at
	// MetricsPath on the guard's address, without the token: the agent
	// reads them there.
	MetricsPath string
	MetricsAddr string
	// TLS, when set, is what the guard's listener serves.
	TLS *tls.Config
	// ForwardToken passes the token header on, to a runtime that checks
	// it too (the built-in one behind a TLS guard).
	ForwardToken bool
	// Limits are the connection limits; zero is DefaultLimits.
	Limits Limits
	Log    *slog.Logger
}

// Listen listens on addr and forwards what carries the token to the
// runtime at upstream (host:port, on loopback).
func Listen(addr, upstream string, o Options) (*Guard, error) {
	if upstream == "" {
		return nil, errors.New("guard: no runtime address to forward to")
	}
	if o.Limits == (Limits{}) {
		o.Limits = DefaultLimits
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	lim := o.Limits
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	served := ln
	if o.TLS != nil {
		served = tls.NewListener(ln, o.TLS)
	}
	tr := transport()
	rp := proxy(upstream, tr, o)
	var metrics *httputil.ReverseProxy
	if o.MetricsPath != "" && o.MetricsAddr != "" {
		metrics = proxy(o.MetricsAddr, tr, o)
	}
	want := []byte(o.Token)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The server's ReadTimeout would stay through a streamed answer;
		// this deadline goes once the body is in.
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Now().Add(lim.Read))
		toMetrics := metrics != nil && r.URL.Path == o.MetricsPath
		if o.Token != "" && !toMetrics && !slices.Contains(o.Open, r.URL.Path) &&
			subtle.ConstantTimeCompare([]byte(r.Header.Get(busapi.ReplicaTokenHeader)), want) != 1 {
			http.Error(w, "this replica answers only the gateway: missing or wrong "+busapi.ReplicaTokenHeader, http.StatusUnauthorized)
			return
		}
		if r.Body == nil || r.Body == http.NoBody {
			_ = rc.SetReadDeadline(time.Time{})
		} else {
			r.Body = &liftAtEOF{ReadCloser: r.Body, rc: rc}
		}
		if toMetrics {
			metrics.ServeHTTP(w, r)
			return
		}
		rp.ServeHTTP(w, r)
	})
	g := &Guard{srv: &http.Server{Handler: h, ReadHeaderTimeout: lim.Header, IdleTimeout: lim.Idle}, tr: tr, addr: ln.Addr().String()}
	go func() { _ = g.srv.Serve(served) }()
	return g, nil
}

// maxIdlePerRuntime is how many idle connections a guard keeps to its
// runtime: the gateway's own transport keeps as many to a replica, so
// every connection the gateways hold open to the guard can have its call
// forwarded on a kept one. http.DefaultTransport keeps 2: under 64
// concurrent callers the guard dialled its runtime again for two requests
// in three (8,623 connections for 12,800 requests).
const maxIdlePerRuntime = 512

// transport is a guard's client of its runtime, on loopback: connections
// kept alive as the gateway keeps its own, bodies passed as they are.
func transport() *http.Transport {
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: maxIdlePerRuntime,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
}

// proxy forwards to target over plain HTTP through tr.
func proxy(target string, tr http.RoundTripper, o Options) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Transport: tr,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", target
			if !o.ForwardToken {
				pr.Out.Header.Del(busapi.ReplicaTokenHeader) // the runtime has no use for it
			}
		},
		// Server-sent events (token streaming) pass through at once.
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(o.Log.Handler(), slog.LevelWarn),
	}
}

// liftAtEOF lifts the connection's read deadline once the request body
// has been read to its end, and answers every later read with io.EOF
// without reading the server's body again. The transport forwarding the
// body reads once more past its Content-Length to check nothing follows;
// by then the runtime may have answered, and writing that answer's header
// makes the HTTP/1 server close the request body, so the read would fail,
// the transport would close its connection to the runtime and cut the
// answer in flight (a stream after its first event).
type liftAtEOF struct {
	io.ReadCloser
	rc  *http.ResponseController
	eof bool
}

func (b *liftAtEOF) Read(p []byte) (int, error) {
	if b.eof {
		return 0, io.EOF
	}
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.eof = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// Addr is the address the guard listens on.
func (g *Guard) Addr() string { return g.addr }

// Close stops listening and ends the connections open through the guard;
// a nil Guard is a no-op.
func (g *Guard) Close() {
	if g != nil {
		_ = g.srv.Close()
		g.tr.CloseIdleConnections()
	}
}

// Shutdown stops listening and waits for the requests in flight to end
// until ctx does, then closes what is left.
func (g *Guard) Shutdown(ctx context.Context) error {
	err := g.srv.Shutdown(ctx)
	if err != nil {
		_ = g.srv.Close()
	}
	g.tr.CloseIdleConnections()
	return err
}
