package process

import (
	"crypto/subtle"
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

// startGuard listens on addr and forwards what carries token to the
// runtime at 127.0.0.1:inner.
func startGuard(addr string, inner int, token string, open []string, log *slog.Logger) (*guard, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	target := net.JoinHostPort("127.0.0.1", strconv.Itoa(inner))
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", target
			pr.Out.Header.Del(busapi.ReplicaTokenHeader) // the runtime has no use for it
		},
		// Server-sent events (token streaming) pass through at once.
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	want := []byte(token)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !slices.Contains(open, r.URL.Path) && subtle.ConstantTimeCompare([]byte(r.Header.Get(busapi.ReplicaTokenHeader)), want) != 1 {
			http.Error(w, "this replica answers only the gateway: missing or wrong "+busapi.ReplicaTokenHeader, http.StatusUnauthorized)
			return
		}
		rp.ServeHTTP(w, r)
	})
	g := &guard{srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}, addr: ln.Addr().String()}
	go func() { _ = g.srv.Serve(ln) }()
	return g, nil
}

// close stops listening and ends the connections open through the guard.
func (g *guard) close() {
	if g != nil {
		_ = g.srv.Close()
	}
}
