package process

import (
	"crypto/tls"
	"net"
	"net/http"
	"strconv"
)

// transportWith is the default transport trusting tc's roots (nil: the
// default transport itself).
func transportWith(tc *tls.Config) http.RoundTripper {
	if tc == nil {
		return http.DefaultTransport
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = tc
	return t
}

// loopback is the runtime's address behind its guard.
func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
