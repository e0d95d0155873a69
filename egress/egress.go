package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"time"
)

// ErrRefused means the destination is not allowed: not https, a host not
// on the allow-list, or an address no outbound call may reach.
var ErrRefused = errors.New("egress refused")

// Policy is the operator's egress allow-list.
type Policy struct {
	// Hosts are the host names (or IP literals) outbound calls may reach,
	// compared case-insensitively and without the port; empty allows none.
	Hosts []string
	// AllowLoopback lets calls reach loopback addresses, for `modelplane
	// dev` whose IdP listens on 127.0.0.1; never set in production.
	AllowLoopback bool
	// RootCAs are the CAs the servers' certificates must chain to (an
	// agent's MP_TLS_CA: the control plane's internal CA); nil: the
	// system's roots.
	RootCAs *x509.CertPool
}

// allowedHost reports whether host is on the list.
func (p *Policy) allowedHost(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	return p != nil && slices.ContainsFunc(p.Hosts, func(h string) bool { return strings.EqualFold(strings.TrimSuffix(h, "."), host) })
}

// CheckURL refuses a URL an outbound call may not fetch: anything but
// https, userinfo in the URL, or a host not on the list. The address it
// resolves to is checked again when it is dialled (Transport).
func (p *Policy) CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%w: %s is not a URL", ErrRefused, raw)
	}
	if u.Scheme != "https" && !(p != nil && p.AllowLoopback && u.Scheme == "http") {
		return fmt.Errorf("%w: only https URLs are fetched", ErrRefused)
	}
	if u.User != nil {
		return fmt.Errorf("%w: URLs with credentials are not fetched", ErrRefused)
	}
	if !p.allowedHost(u.Hostname()) {
		return fmt.Errorf("%w: host %q is not on the egress allow-list", ErrRefused, u.Hostname())
	}
	if a, err := netip.ParseAddr(u.Hostname()); err == nil {
		return p.CheckAddr(a)
	}
	return nil
}

// metadata are cloud metadata addresses outside the link-local range.
var metadata = []netip.Addr{
	netip.MustParseAddr("fd00:ec2::254"),   // AWS IMDS over IPv6
	netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud metadata
}

// CheckAddr refuses an address no outbound call may reach: loopback
// (unless AllowLoopback), link-local (169.254.0.0/16 with the usual
// metadata address, fe80::/10), unspecified, multicast, and known metadata
// addresses.
func (p *Policy) CheckAddr(a netip.Addr) error {
	a = a.Unmap()
	switch {
	case a.IsLoopback() && !(p != nil && p.AllowLoopback):
		return fmt.Errorf("%w: %s is a loopback address", ErrRefused, a)
	case a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast():
		return fmt.Errorf("%w: %s is a link-local address", ErrRefused, a)
	case a.IsUnspecified() || a.IsMulticast() || a.IsInterfaceLocalMulticast():
		return fmt.Errorf("%w: %s is not a unicast address", ErrRefused, a)
	case slices.Contains(metadata, a):
		return fmt.Errorf("%w: %s is a metadata address", ErrRefused, a)
	}
	return nil
}

// Transport returns an http.Transport that dials only hosts on the list,
// and only to addresses CheckAddr accepts: the check runs on the IP being
// connected to, after resolution, so DNS rebinding gains nothing. It uses
// no proxy from the environment (a proxy would dial for us).
func (p *Policy) Transport() *http.Transport {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second,
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("%w: cannot parse %s", ErrRefused, address)
			}
			return p.CheckAddr(ap.Addr())
		}}
	return &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			if err != nil || !p.allowedHost(host) {
				return nil, fmt.Errorf("%w: host %q is not on the egress allow-list", ErrRefused, host)
			}
			return d.DialContext(ctx, network, addr)
		},
		ForceAttemptHTTP2:   true,
		TLSClientConfig:     p.tlsConfig(),
		TLSHandshakeTimeout: 10 * time.Second,
		IdleConnTimeout:     90 * time.Second,
	}
}

// tlsConfig is the transport's TLS: RootCAs when set, else the defaults.
func (p *Policy) tlsConfig() *tls.Config {
	if p == nil || p.RootCAs == nil {
		return nil
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: p.RootCAs}
}

// Client is an http.Client over Transport with a timeout for the whole
// call; redirects are followed only to URLs CheckURL accepts.
func (p *Policy) Client(timeout time.Duration) *http.Client {
	return &http.Client{Transport: p.Transport(), Timeout: timeout,
		CheckRedirect: func(r *http.Request, via []*http.Request) error {
			if len(via) >= 5 {
				return errors.New("too many redirects")
			}
			return p.CheckURL(r.URL.String())
		}}
}
