// Package natstest starts an embedded NATS server with JetStream for one
// test, with the permissions production runs with: the server trusts the
// test binary's bus.Authority, refuses anonymous connections, and each
// client connects with the credential of its role (Auth mints them).
package natstest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"modelplane/bus"
)

var (
	authOnce sync.Once
	auth     *bus.Authority
	authErr  error
)

// Auth is the authority every server of this test binary trusts: keys are
// made once per binary, so that many tests do not each wait for them.
func Auth(t testing.TB) *bus.Authority {
	t.Helper()
	authOnce.Do(func() { auth, authErr = bus.NewAuthority() })
	if authErr != nil {
		t.Fatalf("natstest: %v", authErr)
	}
	return auth
}

// ControlPlane is the connection options of the control plane: it may use
// every subject. Tests that play the control plane, or need no particular
// role, connect with these.
func ControlPlane(t testing.TB) []nats.Option { return mint(t, Auth(t).ControlPlane) }

// Agent is the connection options of node's agent.
func Agent(t testing.TB, node string) []nats.Option {
	return mint(t, func() (bus.Credential, error) { return Auth(t).Agent(node) })
}

// Gateway is the connection options of the gateway credential name.
func Gateway(t testing.TB, name string) []nats.Option {
	return mint(t, func() (bus.Credential, error) { return Auth(t).Gateway(name) })
}

func mint(t testing.TB, f func() (bus.Credential, error)) []nats.Option {
	t.Helper()
	c, err := f()
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	return c.Options()
}

// options are the server options of every test server.
func options(t testing.TB) server.Options {
	t.Helper()
	o := server.Options{
		Host:      "127.0.0.1",
		Port:      -1,
		JetStream: true,
		StoreDir:  t.TempDir(),
		NoLog:     true,
		NoSigs:    true,
	}
	if err := Auth(t).Configure(&o); err != nil {
		t.Fatalf("natstest: %v", err)
	}
	return o
}

// New starts a server with JetStream on a random loopback port; it is shut
// down when the test ends.
func New(t testing.TB) *server.Server {
	t.Helper()
	o := options(t)
	s, log, err := start(&o, 10*time.Second)
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	t.Cleanup(func() {
		s.Shutdown()
		if t.Failed() {
			t.Logf("natstest: the server's warnings and errors: %s", log)
		}
	})
	return s
}

// start starts a server of o and keeps its warnings and errors, failing
// when it is not ready within wait or runs without the JetStream o asks
// for.
// An embedded server says only in its log why JetStream did not start or
// was disabled (a CI run met "jetstream not enabled" from fresh servers,
// with no reason given), so a failing test is given that log.
func start(o *server.Options, wait time.Duration) (*server.Server, *errLog, error) {
	s, err := server.NewServer(o)
	if err != nil {
		return nil, nil, err
	}
	log := &errLog{}
	s.SetLogger(log, false, false)
	go s.Start()
	switch {
	case !s.ReadyForConnections(wait):
		err = fmt.Errorf("server not ready (log: %s)", log)
	case o.JetStream && !s.JetStreamEnabled():
		err = fmt.Errorf("JetStream did not start (log: %s)", log)
	default:
		return s, log, nil
	}
	s.Shutdown()
	return nil, nil, err
}

// errLog keeps the first warnings and errors a server logs.
type errLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *errLog) add(format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) < 20 {
		l.lines = append(l.lines, fmt.Sprintf(format, v...))
	}
}

func (l *errLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "; ")
}

func (l *errLog) Warnf(format string, v ...any)  { l.add(format, v...) }
func (l *errLog) Errorf(format string, v ...any) { l.add(format, v...) }
func (l *errLog) Fatalf(format string, v ...any) { l.add(format, v...) }
func (*errLog) Noticef(string, ...any)           {}
func (*errLog) Debugf(string, ...any)            {}
func (*errLog) Tracef(string, ...any)            {}

// Connect starts a server and returns a control-plane connection to it.
func Connect(t testing.TB) (*server.Server, *nats.Conn) {
	t.Helper()
	s := New(t)
	nc, err := nats.Connect(s.ClientURL(), ControlPlane(t)...)
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	t.Cleanup(nc.Close)
	return s, nc
}
