package process

import (
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"slices"
	"strconv"
	"time"

	"modelplane/busapi"
)

// guard is the replica token check in front of a runtime that does not
// check the token itself (vLLM, Triton, llama.cpp's server: catalogue
// entries without ChecksToken). It listens on the replica's address, the
// one gateways are given, and forwards to the runtime on a loopback port
// of its own; a request without the replica's token is 401 and never
// reaches the runtime. The probe paths (health, readiness, metrics) pass
// without it, as the built-in runtime lets them: the agent probes through
// the guard, so a replica is ready only when its guard forwards too. The
// guard lives in the agent's process and with each runtime process: an
// agent restart starts it again for the runtime it adopts.
type guard struct {
	srv  *http.Server
	addr string
}

// guardLimits bound how long a client may hold a guard's connection
// without finishing what it sends: anyone who reaches the replica's
// address may connect, token or not.
type guardLimits struct {
	// header bounds reading a request's headers.
	header time.Duration
	// read bounds reading a whole request, headers and body, from its
	// start. It is lifted once the body is in: on HTTP/1 the server then
	// reads the connection to notice the caller leave, and a deadline
	// passing there would cut a long or streamed answer. A request the
	// guard refuses keeps it, so the unread rest of its body is not waited
	// for beyond it.
	read time.Duration
	// idle bounds how long a kept-alive connection waits for its next
	// request. It is above the gateway's transport's IdleConnTimeout (90
	// s), so the gateway drops an idle connection before the guard does and
	// never sends on one the guard is closing.
	idle time.Duration
}

// defaultGuardLimits are the guard's limits.
var defaultGuardLimits = guardLimits{header: 10 * time.Second, read: 30 * time.Second, idle: 2 * time.Minute}

// guardOptions are what a guard checks and serves.
type guardOptions struct {
	// token is the replica's token; open the paths that pass without it
	// (the probes).
	token string
	open  []string
	log   *slog.Logger
	// tls, when set, is what the guard's listener serves (Config.TLS).
	tls *tls.Config
	// forwardToken passes the token header on, to a runtime that checks
	// it too (the built-in one behind a TLS guard).
	forwardToken bool
}

// startGuard listens on addr and forwards what carries the token to the
// runtime at 127.0.0.1:inner.
func startGuard(addr string, inner int, o guardOptions) (*guard, error) {
	return listenGuard(addr, inner, o, defaultGuardLimits)
}

// listenGuard is startGuard with the limits given.
func listenGuard(addr string, inner int, o guardOptions, lim guardLimits) (*guard, error) {
	token, open, log := o.token, o.open, o.log
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	served := ln
	if o.tls != nil {
		served = tls.NewListener(ln, o.tls)
	}
	target := net.JoinHostPort("127.0.0.1", strconv.Itoa(inner))
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", target
			if !o.forwardToken {
				pr.Out.Header.Del(busapi.ReplicaTokenHeader) // the runtime has no use for it
			}
		},
		// Server-sent events (token streaming) pass through at once.
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	want := []byte(token)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The server's ReadTimeout would stay through a streamed answer;
		// this deadline goes once the body is in.
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Now().Add(lim.read))
		if token != "" && !slices.Contains(open, r.URL.Path) && subtle.ConstantTimeCompare([]byte(r.Header.Get(busapi.ReplicaTokenHeader)), want) != 1 {
			http.Error(w, "this replica answers only the gateway: missing or wrong "+busapi.ReplicaTokenHeader, http.StatusUnauthorized)
			return
		}
		if r.Body == nil || r.Body == http.NoBody {
			_ = rc.SetReadDeadline(time.Time{})
		} else {
			r.Body = &liftAtEOF{ReadCloser: r.Body, rc: rc}
		}
		rp.ServeHTTP(w, r)
	})
	g := &guard{srv: &http.Server{Handler: h, ReadHeaderTimeout: lim.header, IdleTimeout: lim.idle}, addr: ln.Addr().String()}
	go func() { _ = g.srv.Serve(served) }()
	return g, nil
}

// liftAtEOF lifts the connection's read deadline once the request body
// has been read to its end.
type liftAtEOF struct {
	io.ReadCloser
	rc     *http.ResponseController
	lifted bool
}

func (b *liftAtEOF) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) && !b.lifted {
		b.lifted = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// close stops listening and ends the connections open through the guard.
func (g *guard) close() {
	if g != nil {
		_ = g.srv.Close()
	}
}

// transportWith is the default transport trusting tc's roots (nil: the
// default transport itself).
func transportWith(tc *tls.Config) http.RoundTripper {
	if tc == nil {
		return http.DefaultTransport
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = tc
	return t
}
