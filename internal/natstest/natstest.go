// Package natstest starts an embedded NATS server with JetStream for one test.
package natstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// New starts a server with JetStream on a random loopback port; it is shut
// down when the test ends.
func New(t testing.TB) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		Host:      "127.0.0.1",
		Port:      -1,
		JetStream: true,
		StoreDir:  t.TempDir(),
		NoLog:     true,
		NoSigs:    true,
	})
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

// Connect starts a server and returns a client connection to it.
func Connect(t testing.TB) (*server.Server, *nats.Conn) {
	t.Helper()
	s := New(t)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	t.Cleanup(nc.Close)
	return s, nc
}
