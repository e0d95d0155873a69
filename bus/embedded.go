package bus

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// StartEmbedded starts an in-process NATS server with JetStream, storing
// under dir, on a free loopback port, trusting auth, and waits until it
// takes connections. `modelplane dev` and the benchmarks run their NATS
// this way, so that one machine needs no NATS installed; the caller shuts it
// down. Every client needs a credential auth minted: an anonymous one is
// refused, and the refusal is logged to log (when not nil) with what to
// configure. Call Ensure on it before use, as with any other server.
func StartEmbedded(dir string, auth *Authority, log *slog.Logger) (*server.Server, error) {
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoSigs: true, NoLog: log == nil}
	if err := auth.Configure(opts); err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	if log != nil {
		ns.SetLoggerV2(ServerLogger(log), false, false, false)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("embedded nats did not start")
	}
	return ns, nil
}

// ServerLogger adapts log to the NATS server's logger: errors and warnings
// go through (a refused client with the hint of what it must configure),
// notices only at debug level, traces never.
func ServerLogger(log *slog.Logger) server.Logger { return serverLog{log} }

type serverLog struct{ log *slog.Logger }

func (l serverLog) Noticef(format string, v ...any) {
	l.log.Debug("nats server: " + fmt.Sprintf(format, v...))
}
func (l serverLog) Debugf(format string, v ...any) {
	l.log.Debug("nats server: " + fmt.Sprintf(format, v...))
}
func (l serverLog) Tracef(string, ...any) {}
func (l serverLog) Warnf(format string, v ...any) {
	l.log.Warn("nats server: " + fmt.Sprintf(format, v...))
}
func (l serverLog) Fatalf(format string, v ...any) {
	l.log.Error("nats server: " + fmt.Sprintf(format, v...))
}

func (l serverLog) Errorf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	if strings.Contains(msg, server.ErrAuthentication.Error()) {
		l.log.Error("nats server: "+msg, slog.String("hint", "a client connected without a valid credential (a previous release connects anonymously, which is refused): "+
			"give it MP_NATS_CREDS (--nats-creds); "+credsHint))
		return
	}
	l.log.Error("nats server: " + msg)
}
