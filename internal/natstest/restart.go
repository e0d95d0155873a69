package natstest

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"modelplane/bus"
)

// Restartable is an embedded server a test can shut down and start again on
// the same port and store directory, so clients reconnect on their own and
// JetStream finds its streams (and their duplicate windows) as they were:
// an outage of NATS, not a new NATS.
type Restartable struct {
	t    testing.TB
	opts server.Options

	// resolver, when set, makes each start's account resolver afresh.
	resolver func() server.AccountResolver

	mu  sync.Mutex
	srv *server.Server
}

// NewRestartable starts a server with JetStream on a free loopback port; it
// is shut down when the test ends.
func NewRestartable(t testing.TB) *Restartable {
	t.Helper()
	return newRestartable(t, options(t))
}

// NewRestartableTrusting is NewRestartable for a server trusting a instead
// of the test binary's authority: each start reads a's account JWT as it
// was when this was called, as a server restarted from its trust file
// does.
func NewRestartableTrusting(t testing.TB, a *bus.Authority) *Restartable {
	t.Helper()
	o := server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true}
	if err := a.Configure(&o); err != nil {
		t.Fatalf("natstest: %v", err)
	}
	// A pushed account update lands in the running server's resolver;
	// each start gets a resolver of its own, holding only what the trust
	// file would.
	sysPub, sysJWT, accPub, accJWT := a.SystemAccountPublicKey(), a.SystemAccountJWT(), a.AccountPublicKey(), a.AccountJWT()
	r := newRestartable(t, o)
	r.resolver = func() server.AccountResolver {
		res := &server.MemAccResolver{}
		_ = res.Store(sysPub, sysJWT)
		_ = res.Store(accPub, accJWT)
		return res
	}
	return r
}

func newRestartable(t testing.TB, o server.Options) *Restartable {
	t.Helper()
	r := &Restartable{t: t, opts: o}
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
	if r.resolver != nil {
		opts.AccountResolver = r.resolver()
	}
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
		if r.resolver != nil {
			opts.AccountResolver = r.resolver()
		}
	}
	if s == nil {
		r.t.Fatal("natstest: server not ready")
	}
	r.mu.Lock()
	r.srv = s
	r.mu.Unlock()
}
