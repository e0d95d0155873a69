package gateway

import (
	"net/http"
	"sync"
)

// namedTransports holds one transport per replica server name
// (busapi.RouteReplica.ServerName): http.Transport verifies a certificate
// against one tls.Config.ServerName, so replicas dialled at a pod's IP
// whose certificate names their pool get a transport whose configuration
// names the pool. There are as many as pools with TLS, a handful.
type namedTransports struct {
	m sync.Map // server name -> *http.Transport
}

// replicaTransport is the transport that calls u: the shared one, or, with
// ReplicaTLS on the default transport and a server name on u, the one
// verifying that name while dialling u's address. A Transport given in
// Config is used as it is for every replica.
func (g *Gateway) replicaTransport(u *upstream) http.RoundTripper {
	if u.serverName == "" || g.cfg.ReplicaTLS == nil || g.cfg.Transport != nil {
		return g.transport
	}
	if t, ok := g.named.m.Load(u.serverName); ok {
		return t.(*http.Transport)
	}
	tc := g.cfg.ReplicaTLS.Clone()
	tc.ServerName = u.serverName
	t, _ := g.named.m.LoadOrStore(u.serverName, newTransport(tc))
	return t.(*http.Transport)
}

// closeIdle closes the idle connections of the per-name transports.
func (n *namedTransports) closeIdle() {
	n.m.Range(func(_, t any) bool {
		t.(*http.Transport).CloseIdleConnections()
		return true
	})
}
