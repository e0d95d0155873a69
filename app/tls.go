package app

import (
	"flag"
	"fmt"
	"net"

	"modelplane/tlscert"
)

// The TLS settings every process reads (docs/tls.md): its listeners'
// certificate and key, read again when the files change, and the CA bundle
// its clients trust. Unset, listeners speak plain HTTP and clients trust
// the system's roots, as `modelplane dev` does.
const (
	envTLSCert = "MP_TLS_CERT"
	envTLSKey  = "MP_TLS_KEY"
	envTLSCA   = "MP_TLS_CA"
)

// tlsFlags registers --tls-cert and --tls-key (MP_TLS_CERT, MP_TLS_KEY) on
// fs, for what listens: what, in the help text.
func tlsFlags(fs *flag.FlagSet, f *tlscert.Files, what string) {
	fs.StringVar(&f.Cert, "tls-cert", env(envTLSCert, ""), "PEM certificate (chain) "+what+" serve TLS with, read again when it changes; empty: plain HTTP (MP_TLS_CERT)")
	fs.StringVar(&f.Key, "tls-key", env(envTLSKey, ""), "PEM key of --tls-cert (MP_TLS_KEY)")
}

// tlsCAFlag registers --tls-ca (MP_TLS_CA) on fs: the CAs the process's
// clients trust, what they reach named by what.
func tlsCAFlag(fs *flag.FlagSet, f *tlscert.Files, what string) {
	fs.StringVar(&f.CA, "tls-ca", env(envTLSCA, ""), "PEM bundle of the CAs "+what+" certificates chain to; empty: the system's roots (MP_TLS_CA)")
}

// tlsProblems names what is wrong with f's files.
func tlsProblems(f tlscert.Files) []string {
	return f.Problems("MP_TLS_CERT (--tls-cert)", "MP_TLS_KEY (--tls-key)", "MP_TLS_CA (--tls-ca)")
}

// listenPair listens on addr and adminAddr (their variables named by
// addrVar and adminVar in errors), each serving TLS with its server (nil:
// plain HTTP).
func listenPair(addr, addrVar string, s *tlscert.Server, adminAddr, adminVar string, admin *tlscert.Server) (ln, adm net.Listener, err error) {
	if ln, err = net.Listen("tcp", addr); err != nil {
		return nil, nil, fmt.Errorf("listen %s (%s): %w", addr, addrVar, err)
	}
	if adm, err = net.Listen("tcp", adminAddr); err != nil {
		ln.Close()
		return nil, nil, fmt.Errorf("listen %s (%s): %w", adminAddr, adminVar, err)
	}
	return s.Listener(ln), admin.Listener(adm), nil
}
