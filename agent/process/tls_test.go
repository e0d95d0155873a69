package process

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/coder/quartz"

	"modelplane/busapi"
	"modelplane/internal/tlstest"
	"modelplane/internal/wait"
	"modelplane/tlscert"
)

// TestSecurityReplicaAddressesServeTLS: with the node's certificate
// (Config.TLS) every replica's address serves TLS, whether its runtime
// checks the token itself (the built-in one: the guard passes the token
// on, and the runtime still gets its own on the pipe) or not (the guard
// checks it); the driver's probes reach them over TLS; plain HTTP never
// reaches a runtime; a certificate rotated on disk is served at the next
// handshake.
func TestSecurityReplicaAddressesServeTLS(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "nodes")
	first := ca.Server(t, "node-1")
	certFile, keyFile := first.Write(t)
	kp, err := tlscert.LoadKeypair(certFile, keyFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tlstest.ClientConfig(ca)}}
	t.Cleanup(client.CloseIdleConnections)
	get := func(addr, path, token string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "https://"+addr+path, nil)
		if token != "" {
			req.Header.Set(busapi.ReplicaTokenHeader, token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s over TLS: %v", path, err)
		}
		defer resp.Body.Close()
		var body map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body
	}
	for _, checks := range []bool{true, false} {
		d := newDriver(t, t.TempDir(), quartz.NewMock(t), func(c *Config) {
			e := fake()
			e.ChecksToken = checks
			c.Catalog["fake"] = e
			c.TLS = (&tlscert.Server{Keypair: kp}).Config()
			c.ClientTLS = &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
		})
		s := spec("r-tls")
		s.Token = "replica-token-" + strings.Repeat("z", 20)
		r := start(t, d, s, "")
		waitReady(t, r) // the probes go over TLS
		addr := r.Addr()
		code, env := get(addr, "/env", s.Token)
		if code != http.StatusOK {
			t.Fatalf("checks=%v: /env over TLS = %d", checks, code)
		}
		if checks && (env["token"] != s.Token || env["header_token"] != s.Token) {
			t.Errorf("a runtime that checks the token got %q on its pipe and %q in the header, want its token in both", env["token"], env["header_token"])
		}
		if !checks && (env["token"] != "" || env["header_token"] != "") {
			t.Errorf("a guarded runtime was given the token: pipe %q, header %q", env["token"], env["header_token"])
		}
		if !checks {
			if code, _ := get(addr, "/env", ""); code != http.StatusUnauthorized {
				t.Errorf("the guard let a request without the token through: %d", code)
			}
		}
		resp, err := http.Get("http://" + addr + "/env")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || strings.Contains(string(b), "uid") {
				t.Fatalf("checks=%v: plain HTTP to the replica = %d %s, want 400 from TLS", checks, resp.StatusCode, b)
			}
		}
	}

	// The node's certificate rotated on disk: its replicas serve the new
	// one at the next handshake.
	d := newDriver(t, t.TempDir(), quartz.NewMock(t), func(c *Config) {
		c.TLS = (&tlscert.Server{Keypair: kp}).Config()
		c.ClientTLS = &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
	})
	r := start(t, d, spec("r-rot"), "")
	waitReady(t, r)
	second := ca.Server(t, "node-2")
	second.WriteTo(t, certFile, keyFile)
	want := second.Cert.SerialNumber.String()
	wait.Eventually(t, long, func() bool {
		c, err := tls.Dial("tcp", r.Addr(), tlstest.ClientConfig(ca))
		if err != nil {
			return false
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String() == want
	}, "the replica still serves the first certificate after the rotation")
}
