// Package natstest starts an embedded NATS server with JetStream for one
// test, with the permissions production runs with: the server trusts the
// test binary's bus.Authority, refuses anonymous connections, and each
// client connects with the credential of its role (Auth mints them).
package natstest

import (
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
	s, err := server.NewServer(&o)
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("natstest: server not ready")
	}
	t.Cleanup(s.Shutdown)
	return s
}

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
