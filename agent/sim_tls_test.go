package agent

import (
	"context"
	"crypto/tls"
	"net/http"
	"testing"
	"time"

	"modelplane/internal/tlstest"
	"modelplane/internal/wait"
	"modelplane/tlscert"
)

// TestSecuritySimReplicasServeTLS: the sim driver's replicas serve the
// node's certificate when it has one, refuse plain HTTP, and a driver of
// a restarted agent adopts them over TLS.
func TestSecuritySimReplicasServeTLS(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "nodes")
	certFile, keyFile := ca.Server(t, "node").Write(t)
	kp, err := tlscert.LoadKeypair(certFile, keyFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	roots := &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
	d := NewSimDriver(SimDriverConfig{Log: testLog(t), TLS: (&tlscert.Server{Keypair: kp}).Config(), ClientTLS: roots})
	t.Cleanup(func() { d.Close(context.Background()) })
	spec := classifier("r-tls", 0)
	r, err := d.Start(t.Context(), spec, StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: roots}}
	t.Cleanup(client.CloseIdleConnections)
	wait.Eventually(t, 10*time.Second, func() bool {
		resp, err := client.Get("https://" + r.Addr() + "/v2/health/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "the replica is not ready over TLS")
	if resp, err := http.Get("http://" + r.Addr() + "/v2/health/ready"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("plain HTTP to the replica = %d, want 400 from TLS", resp.StatusCode)
		}
	}
	// Another driver (an agent restarted while the replica runs elsewhere)
	// probes it over TLS.
	other := NewSimDriver(SimDriverConfig{Log: testLog(t), TLS: (&tlscert.Server{Keypair: kp}).Config(), ClientTLS: roots})
	if _, err := other.Adopt(t.Context(), spec, r.Addr()); err != nil {
		t.Fatalf("adopt over TLS: %v", err)
	}
}
