package app

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"modelplane/bus"
	"modelplane/internal/tlstest"
	"modelplane/internal/wait"
	"modelplane/tlscert"
)

// serial is the serial number of the certificate addr serves to a client
// of tc, or "" when the handshake fails.
func serial(addr string, tc *tls.Config) string {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, tc)
	if err != nil {
		return ""
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// plainRefused reports whether a plain HTTP GET to addr was refused by the
// TLS layer (400, "HTTPS"), never reaching a handler.
func plainRefused(t *testing.T, addr string) bool {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		return true
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == http.StatusBadRequest && strings.Contains(string(b), "HTTPS")
}

// httpsGet gets url trusting ca, and returns the body.
func httpsGet(t *testing.T, ca *tlstest.CA, url string) string {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: tlstest.ClientConfig(ca)}}
	defer c.CloseIdleConnections()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// serveBoth serves a handler answering name on ln and adm until the test
// ends, as RunServer and RunGateway do: the public one with public's
// server.
func serveBoth(t *testing.T, ln, adm net.Listener, public func(http.Handler) server) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	say := func(s string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, s) })
	}
	log := slog.New(slog.DiscardHandler)
	go func() { done <- serveWithAdmin(ctx, log, ln, public(say("public")), time.Second, adm, say("admin")) }()
	t.Cleanup(func() { cancel(); <-done })
}

// apiServer is the API's server of h.
func apiServer(h http.Handler) server { return httpServer(h) }

// TestSecurityServerListenersServeTLS: with MP_TLS_CERT and MP_TLS_KEY the
// control plane's portal/API listener and its admin listener both serve
// TLS, a plain HTTP request to either never reaches a handler, and a
// certificate rotated on disk is served by both at the next handshake.
func TestSecurityServerListenersServeTLS(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "ca")
	first := ca.Server(t, "cp-1")
	certFile, keyFile := first.Write(t)
	cfg := ServerConfig{HTTPAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", TLS: tlscert.Files{Cert: certFile, Key: keyFile}}
	if errs := tlsProblems(cfg.TLS); len(errs) > 0 {
		t.Fatal(errs)
	}
	ln, adm, s, err := cfg.listeners(slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if s.Scheme() != "https" {
		t.Fatalf("scheme %s, want https", s.Scheme())
	}
	serveBoth(t, ln, adm, apiServer)
	for name, a := range map[string]string{"public": ln.Addr().String(), "admin": adm.Addr().String()} {
		if got := httpsGet(t, ca, "https://"+a+"/"); got != name {
			t.Fatalf("https to the %s listener answered %q", name, got)
		}
		if !plainRefused(t, a) {
			t.Fatalf("plain HTTP to the %s listener reached a handler", name)
		}
	}
	second := ca.Server(t, "cp-2")
	second.WriteTo(t, certFile, keyFile)
	want := second.Cert.SerialNumber.String()
	for _, a := range []string{ln.Addr().String(), adm.Addr().String()} {
		wait.Eventually(t, 10*time.Second, func() bool { return serial(a, tlstest.ClientConfig(ca)) == want },
			"%s still serves the first certificate after the rotation", a)
	}
	// Without the settings the listeners stay plain HTTP (dev's default).
	plain := ServerConfig{HTTPAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0"}
	pln, padm, ps, err := plain.listeners(slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	serveBoth(t, pln, padm, apiServer)
	if ps.Scheme() != "http" || statusOf("http://"+pln.Addr().String()+"/") != http.StatusOK {
		t.Fatal("a server without MP_TLS_CERT does not serve plain HTTP")
	}
}

// TestSecurityGatewayListenersServeTLS: the gateway's public listener
// serves TLS and verifies client certificates against MP_GATEWAY_CLIENT_CA
// (another CA's fails the handshake); its admin listener serves the same
// certificate and asks for none.
func TestSecurityGatewayListenersServeTLS(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "ca")
	clients := tlstest.NewCA(t, "clients")
	other := tlstest.NewCA(t, "other")
	certFile, keyFile := ca.Server(t, "gw").Write(t)
	c := GatewayConfig{Addr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", TLS: tlscert.Files{Cert: certFile, Key: keyFile},
		ClientCA: clients.File, ClientTrustDomain: "example.org"}
	ln, adm, pub, err := c.listeners(slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if pub.ClientCAs == nil {
		t.Fatal("the public listener verifies no client certificate")
	}
	serveBoth(t, ln, adm, func(h http.Handler) server { return GatewayServer(h, slog.New(slog.DiscardHandler)) })
	request := func(addr string, cert *tlstest.Leaf) error {
		tc := tlstest.ClientConfig(ca)
		if cert != nil {
			tc = tlstest.ClientConfig(ca, cert)
		}
		cl := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
		defer cl.CloseIdleConnections()
		resp, err := cl.Get("https://" + addr + "/")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	good := clients.Client(t, "spiffe://example.org/team/risk/sa/scorer")
	bad := other.Client(t, "spiffe://example.org/team/risk/sa/scorer")
	if err := request(ln.Addr().String(), good); err != nil {
		t.Fatalf("the client CA's certificate: %v", err)
	}
	if err := request(ln.Addr().String(), nil); err != nil {
		t.Fatalf("no certificate (an API key caller): %v", err)
	}
	if err := request(ln.Addr().String(), bad); err == nil {
		t.Fatal("another CA's certificate completed the handshake")
	}
	if got := httpsGet(t, ca, "https://"+adm.Addr().String()+"/"); got != "admin" {
		t.Fatalf("admin listener over TLS: %q", got)
	}
	for _, a := range []string{ln.Addr().String(), adm.Addr().String()} {
		if !plainRefused(t, a) {
			t.Fatalf("plain HTTP to %s reached a handler", a)
		}
	}
}

func TestTLSSettingsAreValidated(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "ca")
	certFile, keyFile := ca.Server(t, "x").Write(t)
	base := func() GatewayConfig {
		return GatewayConfig{Addr: ":1", AdminAddr: "127.0.0.1:2", NATS: bus.ClientConfig{URL: "nats://x", Creds: certFile}, StateDir: "s",
			MaxBodyBytes: 1, Timeout: 1, StallTimeout: 1, ReadTimeout: 1, StatsInterval: 1, ShadowWorkers: 1, EjectCooldown: 1, QuotaGateways: 1, LogLevel: "info"}
	}
	for _, tc := range []struct {
		name string
		set  func(*GatewayConfig)
		want string
	}{
		{"plain", func(*GatewayConfig) {}, ""},
		{"whole", func(c *GatewayConfig) {
			c.TLS = tlscert.Files{Cert: certFile, Key: keyFile, CA: ca.File}
			c.ClientCA, c.ClientTrustDomain = ca.File, "example.org"
		}, ""},
		{"a key without its certificate", func(c *GatewayConfig) { c.TLS.Key = keyFile }, "MP_TLS_CERT (--tls-cert) and MP_TLS_KEY (--tls-key) go together"},
		{"a bundle that is no PEM", func(c *GatewayConfig) { c.TLS.CA = c.StateDir }, "MP_TLS_CA (--tls-ca)"},
		{"client CA without TLS", func(c *GatewayConfig) { c.ClientCA, c.ClientTrustDomain = ca.File, "example.org" }, "needs MP_TLS_CERT"},
		{"client CA without a trust domain", func(c *GatewayConfig) {
			c.TLS = tlscert.Files{Cert: certFile, Key: keyFile}
			c.ClientCA = ca.File
		}, "needs MP_GATEWAY_CLIENT_TRUST_DOMAIN"},
		{"a trust domain without a client CA", func(c *GatewayConfig) { c.ClientTrustDomain = "example.org" }, "needs MP_GATEWAY_CLIENT_CA"},
		{"a trust domain of another shape", func(c *GatewayConfig) {
			c.TLS = tlscert.Files{Cert: certFile, Key: keyFile}
			c.ClientCA, c.ClientTrustDomain = ca.File, "Example.org/x"
		}, "MP_GATEWAY_CLIENT_TRUST_DOMAIN (--client-trust-domain)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			tc.set(&c)
			err := c.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
	gc, err := func() (GatewayConfig, error) {
		c := base()
		c.TLS.CA = ca.File
		return c, c.Validate()
	}()
	if err != nil {
		t.Fatal(err)
	}
	if cfg, _ := gc.gatewayConfig(); cfg.ReplicaTLS == nil || cfg.ReplicaTLS.RootCAs == nil {
		t.Fatal("MP_TLS_CA does not make the gateway call replicas over TLS")
	}
}

// TestSecurityRuntimeServesTLS: `modelplane runtime` with MP_TLS_CERT and
// MP_TLS_KEY serves its V2 protocol over TLS only.
func TestSecurityRuntimeServesTLS(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "ca")
	certFile, keyFile := ca.Server(t, "runtime").Write(t)
	gate := make(chan struct{}, 8)
	gate <- struct{}{}
	ctx, stop := context.WithCancel(context.Background())
	addrs := make(chan string, 1)
	done := make(chan error, 1)
	cfg := RuntimeConfig{ModelDir: runtimeDir(t, `{"x": 1}`), Host: "127.0.0.1", Port: 0, ReplicaID: "r-tls",
		DrainTimeout: 10 * time.Second, MaxBodyBytes: 1 << 20, LogLevel: "error", TLS: tlscert.Files{Cert: certFile, Key: keyFile}}
	go func() { done <- runRuntime(ctx, cfg, logisticOpeners(gate), func(a string) { addrs <- a }) }()
	t.Cleanup(func() { stop(); <-done })
	addr := <-addrs
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: tlstest.ClientConfig(ca)}}
	defer cl.CloseIdleConnections()
	wait.Eventually(t, 10*time.Second, func() bool {
		resp, err := cl.Get("https://" + addr + "/v2/health/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "the runtime is not ready over TLS")
	if statusOf("http://"+addr+"/v2/health/ready") == http.StatusOK {
		t.Fatal("plain HTTP to the TLS runtime was answered 200")
	}
	bad := RuntimeConfig{ModelDir: "m", DrainTimeout: 1, MaxBodyBytes: 1, LogLevel: "info", TLS: tlscert.Files{Cert: certFile}}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "MP_TLS_KEY") {
		t.Fatalf("Validate() = %v, want it to name MP_TLS_KEY", err)
	}
}
