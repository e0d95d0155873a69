package tlscert

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
)

// stamp is what tells a file changed: a new inode (a rename over it, a
// Kubernetes secret volume swapping its ..data link), size or mtime.
type stamp struct {
	info os.FileInfo
}

func (s stamp) same(o os.FileInfo) bool {
	return s.info != nil && o != nil && os.SameFile(s.info, o) && s.info.Size() == o.Size() && s.info.ModTime().Equal(o.ModTime())
}

// Keypair is a certificate and its key read from two PEM files, read again
// at the next handshake after either file changes. A change that does not
// parse (the key written before the certificate, a half-written file) keeps
// the pair in use and is tried again at the next handshake, so a rotation
// that writes the two files one after the other is never served half-way.
type Keypair struct {
	certFile, keyFile string
	log               *slog.Logger

	mu         sync.Mutex
	cert       *tls.Certificate
	certStamp  stamp
	keyStamp   stamp
	lastFailed string // the error last logged, so a bad file is logged once
}

// LoadKeypair reads certFile and keyFile (PEM); an error names the file and
// why. log may be nil.
func LoadKeypair(certFile, keyFile string, log *slog.Logger) (*Keypair, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("a certificate file and a key file are both required")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	k := &Keypair{certFile: certFile, keyFile: keyFile, log: log}
	if _, err := k.reload(true); err != nil {
		return nil, err
	}
	return k, nil
}

// reload reads the files again when their stamps changed (always when
// force), and reports whether it replaced the pair.
func (k *Keypair) reload(force bool) (bool, error) {
	ci, err := os.Stat(k.certFile)
	if err != nil {
		return false, fmt.Errorf("certificate %s: %w", k.certFile, err)
	}
	ki, err := os.Stat(k.keyFile)
	if err != nil {
		return false, fmt.Errorf("key %s: %w", k.keyFile, err)
	}
	if !force && k.certStamp.same(ci) && k.keyStamp.same(ki) {
		return false, nil
	}
	c, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		return false, fmt.Errorf("certificate %s with key %s: %w", k.certFile, k.keyFile, err)
	}
	if c.Leaf == nil {
		return false, fmt.Errorf("certificate %s: no certificate", k.certFile)
	}
	k.cert, k.certStamp, k.keyStamp = &c, stamp{ci}, stamp{ki}
	return true, nil
}

// Certificate is the pair in use, read again first when a file changed.
// It is tls.Config.GetCertificate's shape.
func (k *Keypair) Certificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	changed, err := k.reload(false)
	switch {
	case err != nil:
		if msg := err.Error(); msg != k.lastFailed {
			k.lastFailed = msg
			k.log.Warn("tls certificate changed on disk but cannot be read; serving the previous one",
				slog.String("error", msg))
		}
	case changed:
		k.lastFailed = ""
		k.log.Info("tls certificate reloaded", slog.String("cert_file", k.certFile),
			slog.String("serial", k.cert.Leaf.SerialNumber.String()), slog.Time("not_after", k.cert.Leaf.NotAfter))
	}
	return k.cert, nil
}

// Leaf is the certificate in use (after reading changed files).
func (k *Keypair) Leaf() *x509.Certificate {
	c, _ := k.Certificate(nil)
	return c.Leaf
}

// Bundle is a PEM file of CA certificates read again when it changes: the
// client CAs a listener verifies client certificates against.
type Bundle struct {
	file string
	log  *slog.Logger

	mu    sync.Mutex
	pool  *x509.CertPool
	stamp stamp
}

// LoadBundle reads file, which must hold at least one PEM certificate.
func LoadBundle(file string, log *slog.Logger) (*Bundle, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := &Bundle{file: file, log: log}
	fi, err := os.Stat(file)
	if err != nil {
		return nil, fmt.Errorf("CA bundle %s: %w", file, err)
	}
	if b.pool, err = LoadPool(file); err != nil {
		return nil, err
	}
	b.stamp = stamp{fi}
	return b, nil
}

// Pool is the bundle's certificates, read again first when the file
// changed; a change that does not parse keeps the previous ones.
func (b *Bundle) Pool() *x509.CertPool {
	b.mu.Lock()
	defer b.mu.Unlock()
	fi, err := os.Stat(b.file)
	if err != nil || b.stamp.same(fi) {
		return b.pool
	}
	p, err := LoadPool(b.file)
	if err != nil {
		b.log.Warn("CA bundle changed on disk but cannot be read; keeping the previous one", slog.String("error", err.Error()))
		return b.pool
	}
	b.pool, b.stamp = p, stamp{fi}
	b.log.Info("CA bundle reloaded", slog.String("file", b.file))
	return b.pool
}

// LoadPool reads a PEM file of CA certificates, which must hold at least
// one: what clients trust (MP_TLS_CA).
func LoadPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("CA bundle %s: %w", file, err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA bundle %s: no PEM certificate in it", file)
	}
	return p, nil
}

// Server is a listener's TLS: its keypair and, when ClientCAs is set, the
// client certificates it asks for and verifies. A client that sends no
// certificate is let through (it authenticates another way); one whose
// certificate does not chain to ClientCAs fails the handshake.
type Server struct {
	Keypair   *Keypair
	ClientCAs *Bundle
}

// Config is the tls.Config of the listener: TLS 1.2 or later, HTTP/1.1
// (the servers' read deadlines and streams are written for it), the
// keypair and client CAs read again when their files change.
func (s *Server) Config() *tls.Config {
	base := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     []string{"http/1.1"},
		GetCertificate: s.Keypair.Certificate,
	}
	if s.ClientCAs == nil {
		return base
	}
	base.ClientAuth = tls.VerifyClientCertIfGiven
	base.ClientCAs = s.ClientCAs.Pool()
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c := base.Clone()
		c.GetConfigForClient = nil
		c.ClientCAs = s.ClientCAs.Pool()
		return c, nil
	}
	return base
}

// Listener wraps ln so that every connection speaks TLS; nil s leaves it
// plain. A plain HTTP request to it is answered 400 by net/http ("Client
// sent an HTTP request to an HTTPS server") and never reaches a handler.
func (s *Server) Listener(ln net.Listener) net.Listener {
	if s == nil {
		return ln
	}
	return tls.NewListener(ln, s.Config())
}

// Scheme is "https" when s serves TLS, else "http".
func (s *Server) Scheme() string {
	if s == nil {
		return "http"
	}
	return "https"
}

// Files are the settings of a process's TLS: its own certificate and key
// (for its listeners) and the CA bundle its clients trust. Empty fields are
// off: plain HTTP, the system's roots.
type Files struct {
	Cert string
	Key  string
	CA   string
}

// Problems names what is wrong with f, each with the variables named by
// certVar, keyVar and caVar.
func (f Files) Problems(certVar, keyVar, caVar string) []string {
	var errs []string
	if (f.Cert == "") != (f.Key == "") {
		errs = append(errs, certVar+" and "+keyVar+" go together: a listener serves TLS with both")
	}
	if f.Cert != "" && f.Key != "" {
		if _, err := LoadKeypair(f.Cert, f.Key, nil); err != nil {
			errs = append(errs, certVar+" / "+keyVar+": "+err.Error())
		}
	}
	if f.CA != "" {
		if _, err := LoadPool(f.CA); err != nil {
			errs = append(errs, caVar+": "+err.Error())
		}
	}
	return errs
}

// Server is the listeners' TLS of f, nil when f names no certificate.
func (f Files) Server(log *slog.Logger) (*Server, error) {
	if f.Cert == "" && f.Key == "" {
		return nil, nil
	}
	k, err := LoadKeypair(f.Cert, f.Key, log)
	if err != nil {
		return nil, err
	}
	return &Server{Keypair: k}, nil
}

// Client is the tls.Config of f's clients: the CA bundle as roots, nil
// when f names none (the system's roots).
func (f Files) Client() (*tls.Config, error) {
	if f.CA == "" {
		return nil, nil
	}
	p, err := LoadPool(f.CA)
	if err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: p}, nil
}
