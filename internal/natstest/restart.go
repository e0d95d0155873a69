package natstest

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Restartable is an embedded server a test can shut down and start again on
// the same port and store directory, so clients reconnect on their own and
// JetStream finds its streams (and their duplicate windows) as they were:
// an outage of NATS, not a new NATS.
type Restartable struct {
	t    testing.TB
	opts server.Options

	mu  sync.Mutex
	srv *server.Server
}

// NewRestartable starts a server with JetStream on a free loopback port; it
// is shut down when the test ends.
func NewRestartable(t testing.TB) *Restartable {
	t.Helper()
	r := &Restartable{t: t, opts: options(t)}
	r.start()
	// Pin the port the first start picked for every restart.
	r.opts.Port = r.srv.Addr().(*net.TCPAddr).Port
	t.Cleanup(r.Shutdown)
	return r
}

// URL is the client URL, the same across restarts.
func (r *Restartable) URL() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.srv.ClientURL()
}

// Server is the running server (or the last one, after Shutdown).
func (r *Restartable) Server() *server.Server {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.srv
}

// Shutdown stops the server and waits until it has stopped; it may be
// called more than once.
func (r *Restartable) Shutdown() {
	r.mu.Lock()
	s := r.srv
	r.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// Restart starts a new server with the same options. Call Shutdown first.
func (r *Restartable) Restart() {
	r.t.Helper()
	r.start()
}

func (r *Restartable) start() {
	r.t.Helper()
	opts := r.opts // the server keeps and edits its options
	var s *server.Server
	var err error
	// The old listener's port may linger for a moment after a shutdown.
	for range 20 {
		s, err = server.NewServer(&opts)
		if err != nil {
			r.t.Fatalf("natstest: %v", err)
		}
		go s.Start()
		if s.ReadyForConnections(2 * time.Second) {
			break
		}
		s.Shutdown()
		s = nil
		time.Sleep(100 * time.Millisecond)
		opts = r.opts
	}
	if s == nil {
		r.t.Fatal("natstest: server not ready")
	}
	r.mu.Lock()
	r.srv = s
	r.mu.Unlock()
}
