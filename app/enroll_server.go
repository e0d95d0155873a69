package app

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/nats-io/nats.go"

	"modelplane/bus"
	"modelplane/controlplane"
)

// enrollmentConfig turns node enrollment on in cp: the authority of
// MP_NATS_AUTHORITY mints node credentials, and a system-user connection
// to the same servers pushes revocations. It returns what closes that
// connection.
func enrollmentConfig(cp *controlplane.Config, cfg ServerConfig, log *slog.Logger) (func(), error) {
	a, err := bus.LoadOrCreateAuthority(cfg.NATSAuthority)
	if err != nil {
		return nil, fmt.Errorf("MP_NATS_AUTHORITY (--nats-authority): %w", err)
	}
	sys, err := a.SystemUser()
	if err != nil {
		return nil, err
	}
	tls := cfg.NATS
	tls.Creds = "" // the system user's, not the control plane's
	opts, err := tls.Options(log)
	if err != nil {
		return nil, err
	}
	reconnected := make(chan struct{}, 1)
	snc, err := nats.Connect(cfg.NATS.URL, append(append(sys.Options(), opts...), nats.Name("modelplane-server-system"), nats.MaxReconnects(-1),
		nats.ReconnectHandler(signalOn(reconnected)))...)
	if err != nil {
		return nil, fmt.Errorf("connect nats as the system user (for node revocations): %w", err)
	}
	cp.Authority = a
	cp.Push = func(ctx context.Context) error { return a.Push(ctx, snc) }
	cp.Reconnected = reconnected
	cp.NodeNATSURLs = cfg.NodeNATSURLs
	if cfg.NATS.CA != "" {
		pem, err := os.ReadFile(cfg.NATS.CA)
		if err != nil {
			snc.Close()
			return nil, fmt.Errorf("MP_NATS_CA (--nats-ca): %w", err)
		}
		cp.NodeNATSCA = string(pem)
	}
	return snc.Close, nil
}

// signalOn is a connection handler that sends on ch without waiting: one
// pending wake is enough.
func signalOn(ch chan<- struct{}) nats.ConnHandler {
	return func(*nats.Conn) {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}
