package gateway_test

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"modelplane/busapi"
	"modelplane/gateway"
	"modelplane/internal/tlstest"
	"modelplane/internal/wait"
	"modelplane/sim/replica"
	"modelplane/tlscert"
)

// tlsGateway serves g's handler over TLS with a certificate of ca,
// verifying client certificates against clientCA, as `modelplane gateway`
// does with MP_TLS_CERT and MP_GATEWAY_CLIENT_CA. It returns the address.
func tlsGateway(t *testing.T, g *gateway.Gateway, ca, clientCA *tlstest.CA) string {
	t.Helper()
	certFile, keyFile := ca.Server(t, "gateway").Write(t)
	kp, err := tlscert.LoadKeypair(certFile, keyFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := tlscert.LoadBundle(clientCA.File, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: g.Handler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(slog.DiscardHandler, slog.LevelError)}
	go func() { _ = srv.Serve((&tlscert.Server{Keypair: kp, ClientCAs: b}).Listener(ln)) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// tlsCall posts a prediction to base over a client with tc, with key
// (none when empty); err is the transport's error (a refused handshake).
func tlsCall(t *testing.T, tc *tls.Config, base, endpoint, key string) (int, string, error) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	defer c.CloseIdleConnections()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+predictPath(endpoint), strings.NewReader(predictBody))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// putServiceKey publishes a key of team named name, as tenant does, and
// returns its prefix.
func (e *env) putServiceKey(t *testing.T, team, name, role string) string {
	t.Helper()
	_, prefix := makeKey(t)
	b, err := json.Marshal(busapi.KeyEntry{Prefix: prefix, SHA256: strings.Repeat("ab", 32), Team: team, Role: role, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.keys.Put(t.Context(), prefix, b); err != nil {
		t.Fatal(err)
	}
	return prefix
}

// TestSecurityClientCertificateMapsToATeamsKey: a client certificate of
// the client CA whose SPIFFE URI SAN is spiffe://<domain>/team/risk/sa/scorer
// acts as team risk's active key named scorer, and only while that key is
// active; a certificate of another CA fails the handshake; one whose
// identity is unmapped (another service, a team without such a key, another
// trust domain, no SPIFFE URI) is 401 naming it, even with a valid API key
// beside it. API keys over TLS, without a certificate, keep working.
func TestSecurityClientCertificateMapsToATeamsKey(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "platform")
	clientCA := tlstest.NewCA(t, "services")
	otherCA := tlstest.NewCA(t, "attacker")
	e := newEnv(t)
	addr := startReplica(t, "v1", replica.TaskClassification)
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 1, ver("v1", 100, addr)))
	e.putRoute(t, route("support-chat", "search", "classification", 1, ver("v1", 100, addr)))
	prefix := e.putServiceKey(t, "risk", "scorer", "engineer")
	riskKey := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{ClientTrustDomain: "example.org"})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")
	base := "https://" + tlsGateway(t, g.Gateway, ca, clientCA)

	scorer := clientCA.Client(t, "spiffe://example.org/team/risk/sa/scorer")
	var status int
	var body string
	wait.Eventually(t, 10*time.Second, func() bool {
		status, body, _ = tlsCall(t, tlstest.ClientConfig(ca, scorer), base, "fraud-scoring", "")
		return status == http.StatusOK
	}, "the service's certificate on its team's endpoint is not served")
	// It is team risk's, not search's.
	if status, body, _ = tlsCall(t, tlstest.ClientConfig(ca, scorer), base, "support-chat", ""); status != http.StatusNotFound {
		t.Fatalf("risk's service on search's endpoint = %d %s, want 404", status, body)
	}
	// The same identity from another CA never completes the handshake.
	forged := otherCA.Client(t, "spiffe://example.org/team/risk/sa/scorer")
	if status, _, err := tlsCall(t, tlstest.ClientConfig(ca, forged), base, "fraud-scoring", riskKey); err == nil {
		t.Fatalf("a certificate of another CA was answered %d", status)
	}
	for _, tc := range []struct {
		name, uri, want string
	}{
		{"another service of the team", "spiffe://example.org/team/risk/sa/exporter", "no active API key named exporter"},
		{"a team that has no such key", "spiffe://example.org/team/ghost/sa/scorer", "no service of team ghost"},
		{"another trust domain", "spiffe://evil.example/team/risk/sa/scorer", "not of this gateway's trust domain example.org"},
		{"a path of another shape", "spiffe://example.org/ns/risk/sa/scorer", "not valid"},
		{"no SPIFFE URI", "", "names no service identity"},
	} {
		var uris []string
		if tc.uri != "" {
			uris = append(uris, tc.uri)
		}
		cert := clientCA.Client(t, uris...)
		// A valid API key beside it does not help: the certificate is the
		// request's credential.
		status, body, err := tlsCall(t, tlstest.ClientConfig(ca, cert), base, "fraud-scoring", riskKey)
		if err != nil || status != http.StatusUnauthorized || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s %v, want 401 saying %q", tc.name, status, body, err, tc.want)
		}
	}
	// Keys keep working over TLS without a certificate.
	if status, body, _ = tlsCall(t, tlstest.ClientConfig(ca), base, "fraud-scoring", riskKey); status != http.StatusOK {
		t.Fatalf("API key over TLS = %d %s, want 200", status, body)
	}
	// Two active keys of the name: ambiguous, refused.
	second := e.putServiceKey(t, "risk", "scorer", "viewer")
	wait.Eventually(t, 10*time.Second, func() bool {
		status, body, _ = tlsCall(t, tlstest.ClientConfig(ca, scorer), base, "fraud-scoring", "")
		return status == http.StatusUnauthorized && strings.Contains(body, "ambiguous")
	}, "two keys named scorer were not refused as ambiguous")
	if err := e.keys.Delete(t.Context(), second); err != nil {
		t.Fatal(err)
	}
	// The key revoked (the control plane deletes its entry): the
	// certificate, still valid, no longer gets in.
	if err := e.keys.Delete(t.Context(), prefix); err != nil {
		t.Fatal(err)
	}
	wait.Eventually(t, 10*time.Second, func() bool {
		status, body, _ = tlsCall(t, tlstest.ClientConfig(ca, scorer), base, "fraud-scoring", "")
		return status == http.StatusUnauthorized && strings.Contains(body, "no active API key named scorer")
	}, "the revoked key's certificate still gets in")
	// Plain HTTP to the TLS listener never reaches the gateway.
	resp, err := http.Post("http://"+strings.TrimPrefix(base, "https://")+predictPath("fraud-scoring"), "application/json", strings.NewReader(predictBody))
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "HTTPS") {
			t.Fatalf("plain HTTP = %d %s, want 400 from the TLS layer", resp.StatusCode, b)
		}
	}
}

// TestSecurityGatewayCallsReplicasOverTLS: with ReplicaTLS the gateway
// reaches a replica serving TLS and verifies it: a replica whose
// certificate is of another CA is never sent the request.
func TestSecurityGatewayCallsReplicasOverTLS(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "nodes")
	impostorCA := tlstest.NewCA(t, "impostor")
	serve := func(ca *tlstest.CA, id string) string {
		certFile, keyFile := ca.Server(t, "node").Write(t)
		kp, err := tlscert.LoadKeypair(certFile, keyFile, nil)
		if err != nil {
			t.Fatal(err)
		}
		s, err := replica.New(replica.Config{ReplicaID: id, Token: "tok-" + id, Endpoint: "e", Version: "v1", Task: replica.TaskClassification,
			Profile: json.RawMessage(classifierProfile), Seed: 1, TLS: (&tlscert.Server{Keypair: kp}).Config()})
		if err != nil {
			t.Fatal(err)
		}
		a, err := s.Start(t.Context(), "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Stop)
		wait.Eventually(t, 10*time.Second, s.Ready, "waiting for replica ready")
		return a.String()
	}
	good, bad := serve(ca, "r-good"), serve(impostorCA, "r-bad")
	e := newEnv(t)
	e.putRoute(t, route("fraud-scoring", "risk", "classification", 1, busapi.RouteVersion{Name: "v1", Weight: 100,
		Replicas: []busapi.RouteReplica{{ID: "r-good", Addr: good, Token: "tok-r-good"}}}))
	e.putRoute(t, route("impostor", "risk", "classification", 1, busapi.RouteVersion{Name: "v1", Weight: 100,
		Replicas: []busapi.RouteReplica{{ID: "r-bad", Addr: bad, Token: "tok-r-bad"}}}))
	key := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{ReplicaTLS: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}, EjectFailures: -1})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")
	if r := call(t, g.url, predictPath("fraud-scoring"), key, predictBody); r.status != http.StatusOK {
		t.Fatalf("through the gateway to a TLS replica = %d (%s), want 200", r.status, r.body)
	}
	if r := call(t, g.url, predictPath("impostor"), key, predictBody); r.status < 500 {
		t.Fatalf("a replica of another CA = %d (%s), want a 5xx", r.status, r.body)
	}
	// Without ReplicaTLS, plain HTTP to the TLS replica gets nothing served.
	plain := startGateway(t, e.nc, gateway.Config{})
	wait.Eventually(t, 10*time.Second, plain.Ready, "waiting for gateway ready")
	if r := call(t, plain.url, predictPath("fraud-scoring"), key, predictBody); r.status == http.StatusOK {
		t.Fatalf("plain HTTP to a TLS replica = %d, want a failure", r.status)
	}
}

// TestSecurityGatewayVerifiesReplicaServerName: a replica dialled at an IP
// whose certificate names only its pool's server name (a Kubernetes pod)
// is reached when its route entry gives that name, and never sent a request
// without it (the IP is verified and not named) or with another name.
func TestSecurityGatewayVerifiesReplicaServerName(t *testing.T) {
	t.Parallel()
	const name = "gpu-pool.replicas.modelplane.internal"
	ca := tlstest.NewCA(t, "pools")
	certFile, keyFile := ca.Named(t, name).Write(t)
	kp, err := tlscert.LoadKeypair(certFile, keyFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := replica.New(replica.Config{ReplicaID: "r-pod", Token: "tok-pod", Endpoint: "e", Version: "v1", Task: replica.TaskClassification,
		Profile: json.RawMessage(classifierProfile), Seed: 1, TLS: (&tlscert.Server{Keypair: kp}).Config()})
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Start(t.Context(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	wait.Eventually(t, 10*time.Second, s.Ready, "waiting for replica ready")
	addr := a.String()

	e := newEnv(t)
	for _, c := range []struct{ endpoint, serverName string }{
		{"named", name},
		{"unnamed", ""},
		{"misnamed", "other-pool.replicas.modelplane.internal"},
	} {
		e.putRoute(t, route(c.endpoint, "risk", "classification", 1, busapi.RouteVersion{Name: "v1", Weight: 100,
			Replicas: []busapi.RouteReplica{{ID: "r-pod", Addr: addr, Token: "tok-pod", ServerName: c.serverName}}}))
	}
	key := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{ReplicaTLS: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}, EjectFailures: -1})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")
	if r := call(t, g.url, predictPath("named"), key, predictBody); r.status != http.StatusOK {
		t.Fatalf("to the IP verified by the server name = %d (%s), want 200", r.status, r.body)
	}
	for _, ep := range []string{"unnamed", "misnamed"} {
		if r := call(t, g.url, predictPath(ep), key, predictBody); r.status < 500 {
			t.Fatalf("%s: a certificate not naming what is verified = %d (%s), want a 5xx", ep, r.status, r.body)
		}
	}
	if got := s.Stats().Requests; got != 1 {
		t.Fatalf("the replica served %d requests, want 1 (only the named route's)", got)
	}
}
