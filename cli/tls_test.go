package cli_test

import (
	"net"
	"net/http"
	"testing"
	"time"

	"modelplane/internal/tlstest"
	"modelplane/tlscert"
)

// TestClientTrustsTheConfiguredCA: against the real API served over TLS
// with a certificate of an internal CA, the client refuses the server
// until it is given the CA (--tls-ca, MP_TLS_CA or a context's ca), and
// then works.
func TestClientTrustsTheConfiguredCA(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ca := tlstest.NewCA(t, "internal")
	certFile, keyFile := ca.Server(t, "api").Write(t)
	kp, err := tlscert.LoadKeypair(certFile, keyFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve((&tlscert.Server{Keypair: kp}).Listener(ln)) }()
	t.Cleanup(func() { _ = srv.Close() })
	api := "https://" + ln.Addr().String()
	key := s.keys["risk-admin"]

	s.runEnv(t, map[string]string{"MP_API": api, "MP_API_KEY": key}, "", "me").want(t, "me without the CA", 1, "certificate")
	other := tlstest.NewCA(t, "other")
	s.runEnv(t, map[string]string{"MP_API": api, "MP_API_KEY": key, "MP_TLS_CA": other.File}, "", "me").want(t, "me trusting another CA", 1, "certificate")
	s.runEnv(t, map[string]string{"MP_API": api, "MP_API_KEY": key, "MP_TLS_CA": ca.File}, "", "me").ok(t, "me with MP_TLS_CA")
	s.runEnv(t, map[string]string{"MP_API": api, "MP_API_KEY": key}, "", "--tls-ca", ca.File, "me").ok(t, "me with --tls-ca")
	s.runEnv(t, map[string]string{}, "", "context", "set", "internal", "--api", api, "--key", key, "--tls-ca", ca.File).ok(t, "context set")
	s.runEnv(t, map[string]string{}, "", "me").ok(t, "me with the context's ca")
	s.runEnv(t, map[string]string{"MP_API": api, "MP_API_KEY": key}, "", "--tls-ca", keyFile, "me").want(t, "a bundle without a certificate", 2, "no PEM certificate")
}
