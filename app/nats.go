package app

import (
	"flag"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"

	"modelplane/bus"
)

// natsFlags registers the NATS connection settings on fs: the URL (under
// urlFlag, default def), this process's creds file and TLS files.
func natsFlags(fs *flag.FlagSet, c *bus.ClientConfig, urlFlag, def string) {
	fs.StringVar(&c.URL, urlFlag, env("MP_NATS_URL", def), "NATS URL, nats:// or tls:// (MP_NATS_URL)")
	fs.StringVar(&c.Creds, "nats-creds", env("MP_NATS_CREDS", ""), "this process's NATS credential, a creds file (user JWT and seed); NATS refuses anonymous connections (MP_NATS_CREDS)")
	fs.StringVar(&c.CA, "nats-ca", env("MP_NATS_CA", ""), "PEM file of the CAs the NATS server's certificate chains to (MP_NATS_CA)")
	fs.StringVar(&c.Cert, "nats-cert", env("MP_NATS_CERT", ""), "client certificate for a NATS server that verifies clients (MP_NATS_CERT)")
	fs.StringVar(&c.Key, "nats-key", env("MP_NATS_KEY", ""), "key of --nats-cert (MP_NATS_KEY)")
}

// connectNATS connects as c's credential; a refusal says what to configure.
func connectNATS(c bus.ClientConfig, log *slog.Logger, name string, extra ...nats.Option) (*nats.Conn, error) {
	opts, err := c.Options(log)
	if err != nil {
		return nil, err
	}
	opts = append(append(opts, nats.Name(name)), extra...)
	nc, err := nats.Connect(c.URL, opts...)
	if err != nil {
		if hint := bus.Hint(err); hint != "" {
			return nil, fmt.Errorf("connect nats %s: %w (%s)", c.URL, err, hint)
		}
		return nil, fmt.Errorf("connect nats %s: %w", c.URL, err)
	}
	return nc, nil
}
