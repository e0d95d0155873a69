// Package tlstest makes the certificates TLS tests need, in the test, with
// crypto/x509: a CA, server certificates for loopback and client
// certificates with a URI SAN, written to PEM files the code under test
// reads. No certificate is kept in the repository.
//
// It must not be imported by non-test code.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority made for one test.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// File is the CA's certificate as a PEM file: the bundle clients trust.
	File string
}

// NewCA makes a CA named name, its certificate written under t.TempDir().
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{Cert: cert, key: key, File: filepath.Join(t.TempDir(), "ca.pem")}
	writePEM(t, ca.File, "CERTIFICATE", der)
	return ca
}

// Pool is a pool holding only the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Leaf is a certificate the CA issued, and its key.
type Leaf struct {
	Cert    *x509.Certificate
	TLSCert tls.Certificate
	certPEM []byte
	keyPEM  []byte
}

// Server issues a server certificate for localhost and 127.0.0.1 (and
// ::1), named cn.
func (ca *CA) Server(t testing.TB, cn string) *Leaf {
	t.Helper()
	return ca.issue(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
}

// Named issues a server certificate naming only the DNS names names, no
// address: what a pod of a Kubernetes pool serves, dialled at its IP.
func (ca *CA) Named(t testing.TB, names ...string) *Leaf {
	t.Helper()
	return ca.issue(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: names[0]},
		DNSNames:    names,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
}

// Client issues a client certificate whose URI SANs are uris (a SPIFFE ID
// such as spiffe://example.org/team/risk/sa/scorer).
func (ca *CA) Client(t testing.TB, uris ...string) *Leaf {
	t.Helper()
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "client"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	for _, s := range uris {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	return ca.issue(t, tmpl)
}

func (ca *CA) issue(t testing.TB, tmpl *x509.Certificate) *Leaf {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = serial(t)
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	l := &Leaf{Cert: cert,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})}
	if l.TLSCert, err = tls.X509KeyPair(l.certPEM, l.keyPEM); err != nil {
		t.Fatal(err)
	}
	return l
}

// Write writes the leaf to new files in a fresh directory and returns
// their paths.
func (l *Leaf) Write(t testing.TB) (certFile, keyFile string) {
	t.Helper()
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	l.WriteTo(t, certFile, keyFile)
	return certFile, keyFile
}

// WriteTo replaces certFile and keyFile with the leaf, each by a rename
// over it (as a rotation does), the key first.
func (l *Leaf) WriteTo(t testing.TB, certFile, keyFile string) {
	t.Helper()
	replace(t, keyFile, l.keyPEM)
	replace(t, certFile, l.certPEM)
}

func replace(t testing.TB, path string, b []byte) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// ClientConfig trusts ca and presents cert (none: no client certificate)
// whatever CAs the server says it accepts, as an attacker would.
func ClientConfig(ca *CA, cert ...*Leaf) *tls.Config {
	c := &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
	if len(cert) > 0 {
		l := cert[0]
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &l.TLSCert, nil }
	}
	return c
}
