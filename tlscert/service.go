package tlscert

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// ServiceID is the identity a client certificate names in its URI SAN, a
// SPIFFE ID of the shape
//
//	spiffe://<trust-domain>/team/<team>/sa/<name>
//
// a service <name> of team <team> in the operator's trust domain. Who the
// identity may act as is the gateway's decision (a team's key of that
// name), not this package's.
type ServiceID struct {
	TrustDomain string
	Team        string
	Name        string
}

// String is the SPIFFE ID.
func (s ServiceID) String() string {
	return "spiffe://" + s.TrustDomain + "/team/" + s.Team + "/sa/" + s.Name
}

// ErrNoServiceID is returned for a certificate without a SPIFFE URI SAN.
var ErrNoServiceID = errors.New("the certificate names no spiffe:// URI SAN")

// ServiceOf reads the service identity of a verified client certificate:
// its one spiffe:// URI SAN (SPIFFE allows exactly one), parsed as
// ParseServiceID does.
func ServiceOf(c *x509.Certificate) (ServiceID, error) {
	var found []*url.URL
	for _, u := range c.URIs {
		if strings.EqualFold(u.Scheme, "spiffe") {
			found = append(found, u)
		}
	}
	switch len(found) {
	case 0:
		return ServiceID{}, ErrNoServiceID
	case 1:
		return ParseServiceID(found[0].String())
	default:
		return ServiceID{}, fmt.Errorf("the certificate names %d spiffe:// URI SANs; a SPIFFE identity has exactly one", len(found))
	}
}

// ParseServiceID reads spiffe://<trust-domain>/team/<team>/sa/<name>. The
// trust domain is lower-case letters, digits, '.', '-' and '_' (SPIFFE's);
// team and name are non-empty path segments without '.' or '..' alone; no
// port, user, query or fragment.
func ParseServiceID(raw string) (ServiceID, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return ServiceID{}, fmt.Errorf("spiffe id %q: %w", raw, err)
	}
	bad := func(why string) (ServiceID, error) {
		return ServiceID{}, fmt.Errorf("spiffe id %q: %s; want spiffe://<trust-domain>/team/<team>/sa/<name>", raw, why)
	}
	if u.Scheme != "spiffe" {
		return bad("the scheme is not spiffe")
	}
	if u.User != nil || u.Port() != "" || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
		return bad("it carries a user, port, query or fragment")
	}
	td := u.Host
	if td == "" || strings.Trim(td, "abcdefghijklmnopqrstuvwxyz0123456789.-_") != "" {
		return bad("the trust domain must be lower-case letters, digits, '.', '-' or '_'")
	}
	if u.RawPath != "" {
		return bad("the path must not be escaped")
	}
	parts := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
	if !strings.HasPrefix(u.Path, "/") || len(parts) != 4 || parts[0] != "team" || parts[2] != "sa" {
		return bad("the path is not /team/<team>/sa/<name>")
	}
	for _, p := range []string{parts[1], parts[3]} {
		if p == "" || p == "." || p == ".." {
			return bad("the team and the name must be non-empty")
		}
	}
	return ServiceID{TrustDomain: td, Team: parts[1], Name: parts[3]}, nil
}
