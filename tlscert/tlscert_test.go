package tlscert_test

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"modelplane/internal/tlstest"
	"modelplane/internal/wait"
	"modelplane/tlscert"
)

// serve runs an HTTP server on a loopback listener wrapped by s and
// returns its address.
func serve(t *testing.T, s *tlscert.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "served")
	})}
	go func() { _ = srv.Serve(s.Listener(ln)) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// peerSerial is the serial number of the certificate addr serves.
func peerSerial(t *testing.T, addr string, ca *tlstest.CA) string {
	t.Helper()
	c, err := tls.Dial("tcp", addr, tlstest.ClientConfig(ca))
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// TestSecurityListenerReloadsRotatedCertificate: files rotated on disk (a
// rename over each, as cert-manager's secret volume does) are served at
// the next handshake, without a restart; a half-written rotation keeps
// the previous pair.
func TestSecurityListenerReloadsRotatedCertificate(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "ca")
	first := ca.Server(t, "first")
	certFile, keyFile := first.Write(t)
	kp, err := tlscert.LoadKeypair(certFile, keyFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, &tlscert.Server{Keypair: kp})
	if got, want := peerSerial(t, addr, ca), first.Cert.SerialNumber.String(); got != want {
		t.Fatalf("serial %s, want the first certificate's %s", got, want)
	}

	second := ca.Server(t, "second")
	second.WriteTo(t, certFile, keyFile)
	want := second.Cert.SerialNumber.String()
	var got string
	wait.Eventually(t, 10*time.Second, func() bool { got = peerSerial(t, addr, ca); return got == want },
		"serial after rotation is not the second certificate's %s", want)

	// A certificate file that is not PEM (a rotation caught half-way)
	// keeps the second pair served.
	if err := os.WriteFile(certFile, []byte("-----BEGIN CERT"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := peerSerial(t, addr, ca); got != want {
		t.Fatalf("after a broken write, serial %s, want the second certificate's %s still", got, want)
	}
	third := ca.Server(t, "third")
	third.WriteTo(t, certFile, keyFile)
	want = third.Cert.SerialNumber.String()
	wait.Eventually(t, 10*time.Second, func() bool { got = peerSerial(t, addr, ca); return got == want },
		"serial after the broken write was fixed is not %s", want)
}

// TestSecurityPlainHTTPToATLSListenerFails: a plain HTTP request never
// reaches the handler.
func TestSecurityPlainHTTPToATLSListenerFails(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "ca")
	certFile, keyFile := ca.Server(t, "srv").Write(t)
	kp, err := tlscert.LoadKeypair(certFile, keyFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, &tlscert.Server{Keypair: kp})
	resp, err := http.Get("http://" + addr + "/")
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || strings.Contains(string(b), "served") {
			t.Fatalf("plain HTTP = %d %q, want 400 from the TLS layer", resp.StatusCode, b)
		}
	}
	// Over TLS it serves.
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: tlstest.ClientConfig(ca)}}
	resp, err = c.Get("https://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "served" {
		t.Fatalf("over TLS: %q", b)
	}
	// A client that does not trust the CA refuses the server.
	other := tlstest.NewCA(t, "other")
	if _, err := tls.Dial("tcp", addr, tlstest.ClientConfig(other)); err == nil {
		t.Fatal("a client trusting another CA completed the handshake")
	}
}

// TestSecurityClientCAsVerifyAndReload: a listener with client CAs lets a
// client without a certificate through, refuses one from another CA, and
// takes a CA added to the bundle at the next handshake.
func TestSecurityClientCAsVerifyAndReload(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "ca")
	clients := tlstest.NewCA(t, "clients")
	other := tlstest.NewCA(t, "other")
	certFile, keyFile := ca.Server(t, "srv").Write(t)
	kp, err := tlscert.LoadKeypair(certFile, keyFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	bundleFile := t.TempDir() + "/clients.pem"
	copyFile(t, clients.File, bundleFile)
	b, err := tlscert.LoadBundle(bundleFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, &tlscert.Server{Keypair: kp, ClientCAs: b})
	handshake := func(certs ...*tlstest.Leaf) error {
		c, err := tls.Dial("tcp", addr, tlstest.ClientConfig(ca, certs...))
		if err != nil {
			return err
		}
		defer c.Close()
		// TLS 1.3 reports a refused client certificate at the first read.
		_, _ = c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		_, err = c.Read(make([]byte, 1))
		return err
	}
	if err := handshake(); err != nil {
		t.Fatalf("no client certificate: %v", err)
	}
	if err := handshake(clients.Client(t, "spiffe://example.org/team/risk/sa/scorer")); err != nil {
		t.Fatalf("a client certificate of the client CA: %v", err)
	}
	otherLeaf := other.Client(t, "spiffe://example.org/team/risk/sa/scorer")
	if err := handshake(otherLeaf); err == nil {
		t.Fatal("a client certificate of another CA was accepted")
	}
	// The operator adds the other CA to the bundle: accepted from then on.
	pem := append(readFile(t, clients.File), readFile(t, other.File)...)
	if err := os.WriteFile(bundleFile+".new", pem, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(bundleFile+".new", bundleFile); err != nil {
		t.Fatal(err)
	}
	wait.Eventually(t, 10*time.Second, func() bool { return handshake(otherLeaf) == nil }, "the added CA's client is refused")
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	if err := os.WriteFile(to, readFile(t, from), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestFilesProblems(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "ca")
	certFile, keyFile := ca.Server(t, "srv").Write(t)
	for _, tc := range []struct {
		name  string
		files tlscert.Files
		want  string
	}{
		{"nothing is plain HTTP", tlscert.Files{}, ""},
		{"a whole pair and a bundle", tlscert.Files{Cert: certFile, Key: keyFile, CA: ca.File}, ""},
		{"a certificate without its key", tlscert.Files{Cert: certFile}, "MP_TLS_CERT and MP_TLS_KEY go together"},
		{"a missing file", tlscert.Files{Cert: certFile, Key: keyFile + ".gone"}, "no such file"},
		{"a key that is not the certificate's", tlscert.Files{Cert: certFile, Key: certFile}, "MP_TLS_CERT / MP_TLS_KEY"},
		{"a bundle without a certificate", tlscert.Files{CA: keyFile}, "MP_TLS_CA: CA bundle"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := strings.Join(tc.files.Problems("MP_TLS_CERT", "MP_TLS_KEY", "MP_TLS_CA"), "; ")
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Fatalf("problems %q, want %q", got, tc.want)
			}
		})
	}
}
