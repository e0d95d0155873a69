package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	applycorev1 "k8s.io/client-go/applyconfigurations/core/v1"
)

// TLSPath is where a pod's serving container (the guard, or the built-in
// runtime) finds the pool's certificate: tls.crt and tls.key of the
// Secret the driver copies into each team namespace.
const TLSPath = "/etc/modelplane/tls"

// ServerNameSuffix ends the conventional server name of a pool's pods,
// <pool>.replicas.modelplane.internal (ServerName).
const ServerNameSuffix = ".replicas.modelplane.internal"

// ServerName is the conventional name a pool's certificate names: no
// issuer can name a pod's IP in advance, so every pod of the pool serves
// one certificate for the pool's name and gateways verify that name while
// dialling the pod's IP (busapi.RouteReplica.ServerName).
func ServerName(pool string) string { return dnsLabel(pool, 63) + ServerNameSuffix }

// PodTLS makes a pool's pods serve HTTPS.
type PodTLS struct {
	// ServerName is the name the certificate names and gateways verify;
	// "" is ServerName(pool).
	ServerName string
	// CertFile and KeyFile are the agent's own mount of the operator's
	// Secret (a cert-manager Certificate for ServerName). The driver reads
	// them at every pass and writes them into each team namespace's
	// Secret (TLSSecret), which the pods mount: pods live in team
	// namespaces and a volume names a Secret of its own namespace. A
	// renewal reaches the pods within one resync and the kubelet's update
	// of their mount; they read it again at the next handshake.
	CertFile, KeyFile string
	// Roots verifies the pods' certificate when the driver reads their
	// metrics (the agent's MP_TLS_CA); nil is the system's roots.
	Roots *x509.CertPool
}

// tlsSecret is the name of the pool's certificate Secret in each team
// namespace.
func (d *Driver) tlsSecret() string { return dnsLabel("modelplane-tls-"+d.cfg.Pool, 253) }

// scheme is how the pods are called: https with PodTLS.
func (d *Driver) scheme() string {
	if d.cfg.PodTLS != nil {
		return "https"
	}
	return "http"
}

// check reads the certificate and key once, so that a pool given a
// bad pair does not start.
func (t *PodTLS) check() error {
	if t.CertFile == "" || t.KeyFile == "" {
		return errors.New("cluster driver: pod TLS needs a certificate and its key")
	}
	if _, _, err := t.read(); err != nil {
		return fmt.Errorf("cluster driver: pod TLS: %w", err)
	}
	return nil
}

// read returns the certificate and key as they are on disk, if they are a
// pair.
func (t *PodTLS) read() (cert, key []byte, err error) {
	if cert, err = os.ReadFile(t.CertFile); err != nil {
		return nil, nil, err
	}
	if key, err = os.ReadFile(t.KeyFile); err != nil {
		return nil, nil, err
	}
	if _, err := tls.X509KeyPair(cert, key); err != nil {
		return nil, nil, fmt.Errorf("%s and %s are not a certificate and its key: %w", t.CertFile, t.KeyFile, err)
	}
	return cert, key, nil
}

// tlsSecretIn is the pool's certificate Secret in namespace ns.
func (d *Driver) tlsSecretIn(ns string, lbl map[string]string) (*applycorev1.SecretApplyConfiguration, error) {
	cert, key, err := d.cfg.PodTLS.read()
	if err != nil {
		return nil, fmt.Errorf("pod tls: %w", err)
	}
	return applycorev1.Secret(d.tlsSecret(), ns).WithLabels(lbl).WithType(corev1.SecretTypeTLS).
		WithData(map[string][]byte{corev1.TLSCertKey: cert, corev1.TLSPrivateKeyKey: key}), nil
}

// metricsClient reads the pods' metrics over https, verifying the pool's
// server name at the pod's IP.
func metricsClient(t *PodTLS) *http.Client {
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: t.Roots, ServerName: t.ServerName, MinVersion: tls.VersionTLS12}}}
}
