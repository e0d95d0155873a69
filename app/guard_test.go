package app

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"modelplane/busapi"
	"modelplane/internal/tlstest"
	"modelplane/internal/wait"
	"modelplane/tlscert"
)

// TestGuardCommandChecksTheReplicaToken runs `modelplane guard` in front
// of a real HTTP server standing for vLLM, as the Kubernetes driver's
// sidecar does in a pod: a request without the replica's token or with a
// wrong one is 401 and never reaches the runtime; with the right one the
// runtime answers, without the token header; the probe paths pass
// without it, and the metrics of a runtime that keeps them on a port of
// their own (Triton's 8002) are served on the guard's path. Ending the
// context ends the command.
func TestGuardCommandChecksTheReplicaToken(t *testing.T) {
	t.Parallel()
	var reached atomic.Int64
	var leaked atomic.Bool
	runtime := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		if r.Header.Get(busapi.ReplicaTokenHeader) != "" {
			leaked.Store(true)
		}
		_, _ = io.WriteString(w, "runtime "+r.URL.Path)
	}))
	t.Cleanup(runtime.Close)
	metrics := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "nv_inference_request_success 3\n")
	}))
	t.Cleanup(metrics.Close)

	const token = "replica-token-guard"
	cfg := GuardConfig{Listen: "127.0.0.1:0", Upstream: strings.TrimPrefix(runtime.URL, "http://"), Token: token,
		Open: "/health, /v1/models", MetricsPath: "/metrics", MetricsUpstream: strings.TrimPrefix(metrics.URL, "http://"),
		DrainTimeout: time.Minute, LogLevel: "error"}
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- runGuard(ctx, cfg, func(a string) { addrc <- a }) }()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-done:
		t.Fatalf("guard ended before listening: %v", err)
	}

	send := func(method, path, tok string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(`{"prompt":"hi"}`))
		if tok != "" {
			req.Header.Set(busapi.ReplicaTokenHeader, tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		name, path, token string
		code              int
		body              string
	}{
		{"no token is refused", "/v1/chat/completions", "", http.StatusUnauthorized, ""},
		{"a wrong token is refused", "/v1/chat/completions", "another-replica", http.StatusUnauthorized, ""},
		{"the right token reaches the runtime", "/v1/chat/completions", token, http.StatusOK, "runtime /v1/chat/completions"},
		{"a probe path passes without a token", "/health", "", http.StatusOK, "runtime /health"},
		{"the metrics come from their own port", "/metrics", "", http.StatusOK, "nv_inference_request_success 3\n"},
	} {
		before := reached.Load()
		code, body := send(http.MethodPost, tc.path, tc.token)
		if code != tc.code {
			t.Errorf("%s: status %d, want %d (%s)", tc.name, code, tc.code, body)
		}
		if tc.code == http.StatusUnauthorized {
			if reached.Load() != before {
				t.Errorf("%s: the runtime saw the request", tc.name)
			}
			if !strings.Contains(body, busapi.ReplicaTokenHeader) {
				t.Errorf("%s: body %q, want the header named", tc.name, body)
			}
			continue
		}
		if body != tc.body {
			t.Errorf("%s: body %q, want %q", tc.name, body, tc.body)
		}
	}
	if leaked.Load() {
		t.Error("the runtime received the replica token header; want it stripped")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("guard after its context ended: %v", err)
	}
	if _, err := http.Get("http://" + addr + "/health"); err == nil {
		t.Error("the guard still answers after it ended")
	}
}

// TestGuardConfigNamesEveryBadSetting: a guard without a token, or
// forwarding off loopback, does not start.
func TestGuardConfigNamesEveryBadSetting(t *testing.T) {
	t.Parallel()
	err := GuardConfig{Listen: "8000", Upstream: "10.0.0.5:8001", Open: "health", MetricsPath: "/metrics", LogLevel: "loud",
		TLS: tlscert.Files{Cert: "/nonexistent/tls.crt"}}.Validate()
	for _, want := range []string{"MP_GUARD_LISTEN", "MP_GUARD_UPSTREAM", "loopback", "MP_REPLICA_TOKEN", "MP_GUARD_OPEN",
		"--metrics-upstream", "MP_GUARD_DRAIN_TIMEOUT", "MP_LOG_LEVEL", "MP_TLS_KEY (--tls-key)"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want one naming %s", err, want)
		}
	}
	ok := GuardConfig{Listen: ":8000", Upstream: "127.0.0.1:8001", Token: "t", Open: "/health", MetricsPath: "/metrics",
		MetricsUpstream: "127.0.0.1:8002", DrainTimeout: time.Second, LogLevel: "info"}
	if err := ok.Validate(); err != nil {
		t.Errorf("valid settings: %v", err)
	}
}

// TestGuardServesTheMountedCertificate runs `modelplane guard` with
// --tls-cert and --tls-key as a pool's pod does with its mounted Secret:
// it serves HTTPS with a certificate naming only the pool's server name,
// which a client trusting the CA verifies by that name while dialling the
// IP; a client verifying the IP, or plain HTTP, is not served; and a new
// certificate renamed over the files (the kubelet updating the Secret) is
// served at the next handshake without a restart.
func TestGuardServesTheMountedCertificate(t *testing.T) {
	t.Parallel()
	const name = "gpu-pool.replicas.modelplane.internal"
	runtime := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "runtime "+r.URL.Path)
	}))
	t.Cleanup(runtime.Close)
	ca := tlstest.NewCA(t, "pools")
	first := ca.Named(t, name)
	certFile, keyFile := first.Write(t)
	cfg := GuardConfig{Listen: "127.0.0.1:0", Upstream: strings.TrimPrefix(runtime.URL, "http://"), Token: "tok",
		Open: "/health", DrainTimeout: time.Minute, LogLevel: "error", TLS: tlscert.Files{Cert: certFile, Key: keyFile}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- runGuard(ctx, cfg, func(a string) { addrc <- a }) }()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-done:
		t.Fatalf("guard ended before listening: %v", err)
	}
	t.Cleanup(func() { cancel(); <-done })

	// get calls /health over a fresh connection verifying serverName
	// ("" verifies the IP dialled) and returns the served leaf's serial.
	get := func(scheme, serverName string) (string, error) {
		tc := &tls.Config{RootCAs: ca.Pool(), ServerName: serverName, MinVersion: tls.VersionTLS12}
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: tc, DisableKeepAlives: true}}
		resp, err := c.Get(scheme + "://" + addr + "/health")
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || string(b) != "runtime /health" {
			return "", &statusError{resp.StatusCode, string(b)}
		}
		return resp.TLS.PeerCertificates[0].SerialNumber.String(), nil
	}
	got, err := get("https", name)
	if err != nil {
		t.Fatalf("https verified by the server name: %v", err)
	}
	if want := first.Cert.SerialNumber.String(); got != want {
		t.Fatalf("served serial %s, want the mounted one %s", got, want)
	}
	if _, err := get("https", ""); err == nil {
		t.Error("a client verifying the IP was served; the certificate names only the server name")
	}
	if _, err := get("http", ""); err == nil {
		t.Error("plain HTTP was served by a TLS guard")
	}

	second := ca.Named(t, name)
	second.WriteTo(t, certFile, keyFile)
	want := second.Cert.SerialNumber.String()
	wait.Eventually(t, 10*time.Second, func() bool {
		got, err = get("https", name)
		return err == nil && got == want
	}, "the renewed certificate is not served")
}

type statusError struct {
	code int
	body string
}

func (e *statusError) Error() string { return http.StatusText(e.code) + ": " + e.body }
