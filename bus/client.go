package bus

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
)

// ClientConfig is how a modelplane process reaches NATS: the URL, its own
// credential (a creds file: user JWT and seed) and, for a server with TLS,
// the CA that signed the server's certificate and this client's certificate.
// The file paths are not secrets; their contents never print.
type ClientConfig struct {
	URL string
	// Creds is the path of the creds file (--nats-creds, MP_NATS_CREDS).
	Creds string
	// CA is a PEM file of the CAs the server's certificate must chain to
	// (--nats-ca, MP_NATS_CA); Cert and Key are this client's certificate
	// and key, for servers that verify clients (--nats-cert, --nats-key).
	CA   string
	Cert string
	Key  string
}

// Validate names every bad setting, with the flag and variable to set.
func (c ClientConfig) Validate() []string {
	var errs []string
	if c.URL == "" {
		errs = append(errs, "MP_NATS_URL is required")
	} else if !strings.HasPrefix(c.URL, "nats://") && !strings.HasPrefix(c.URL, "tls://") {
		scheme, _, _ := strings.Cut(c.URL, "://")
		errs = append(errs, fmt.Sprintf("MP_NATS_URL must be a nats:// or tls:// URL, got one starting %q", scheme))
	}
	if strings.Contains(c.URL, "@") {
		errs = append(errs, "MP_NATS_URL must not carry a user or password: give this process its credential with MP_NATS_CREDS (--nats-creds)")
	}
	if c.Creds == "" {
		errs = append(errs, "MP_NATS_CREDS (--nats-creds) is required: NATS refuses anonymous connections; "+credsHint)
	} else if _, err := os.Stat(c.Creds); err != nil {
		errs = append(errs, fmt.Sprintf("MP_NATS_CREDS (--nats-creds): %v", err))
	}
	if (c.Cert == "") != (c.Key == "") {
		errs = append(errs, "MP_NATS_CERT and MP_NATS_KEY (--nats-cert, --nats-key) go together")
	}
	for _, f := range []struct{ name, path string }{{"MP_NATS_CA (--nats-ca)", c.CA}, {"MP_NATS_CERT (--nats-cert)", c.Cert}, {"MP_NATS_KEY (--nats-key)", c.Key}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", f.name, err))
		}
	}
	return errs
}

// credsHint says where a process's credential comes from.
const credsHint = "the operator mints each process's creds file (`modelplane nats creds --agent NODE | --gateway NAME | --control-plane`; docs/security.md)"

// Options are the connection options of c: the credential (with the inbox
// prefix its permissions allow), TLS when configured, and an error handler
// that says what to configure when the server refuses the credential or a
// subject. log may be nil.
func (c ClientConfig) Options(log *slog.Logger) ([]nats.Option, error) {
	var opts []nats.Option
	if c.Creds != "" {
		b, err := os.ReadFile(c.Creds)
		if err != nil {
			return nil, fmt.Errorf("MP_NATS_CREDS (--nats-creds): %w", err)
		}
		cred, err := ParseCredential(b)
		if err != nil {
			return nil, fmt.Errorf("MP_NATS_CREDS (--nats-creds) %s: %w", c.Creds, err)
		}
		opts = append(opts, cred.Options()...)
	}
	if c.CA != "" {
		opts = append(opts, nats.RootCAs(c.CA))
	}
	if c.Cert != "" {
		opts = append(opts, nats.ClientCert(c.Cert, c.Key))
	}
	if log != nil {
		opts = append(opts, ErrorLogger(log))
	}
	return opts, nil
}

// ErrorLogger logs the asynchronous errors of a connection; a refused
// credential or subject is logged with what to configure.
func ErrorLogger(log *slog.Logger) nats.Option {
	return nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
		attrs := []any{slog.String("error", err.Error())}
		if sub != nil {
			attrs = append(attrs, slog.String("subject", sub.Subject))
		}
		if hint := Hint(err); hint != "" {
			attrs = append(attrs, slog.String("hint", hint))
		}
		log.Error("nats", attrs...)
	})
}

// Hint says what to configure for an error NATS answered, or "" when it is
// not about credentials or permissions.
func Hint(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked),
		strings.Contains(strings.ToLower(err.Error()), "authorization violation"):
		return "NATS refused this process's credential: anonymous connections are refused; set MP_NATS_CREDS (--nats-creds) to this process's creds file; " + credsHint
	case errors.Is(err, nats.ErrPermissionViolation), strings.Contains(strings.ToLower(err.Error()), "permissions violation"):
		return "NATS refused a subject this credential does not allow: check that the creds file (MP_NATS_CREDS) is this process's own (a node's credential names its node)"
	}
	return ""
}
