// Package tlscert owns TLS from files for every listener and client of
// modelplane: a listener's certificate and key read from PEM files and read
// again when the files change on disk (no restart: cert-manager or any
// rotation that rewrites or swaps the files is seen at the next handshake),
// the CA bundles clients trust and a listener verifies client certificates
// against, and the SPIFFE-style URI a client certificate names its service
// by.
//
// It must not decide who a certificate's identity is allowed to be: the
// gateway maps an identity onto a team's key. It imports only the standard
// library, so that the data plane (gateway, agent, runtime) may use it.
package tlscert
