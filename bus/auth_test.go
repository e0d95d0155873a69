package bus_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/bus"
	"modelplane/internal/wait"
)

// TestSecretsNeverPrint: the authority and credentials print as <secret>
// with fmt and slog, whatever verb.
func TestSecretsNeverPrint(t *testing.T) {
	t.Parallel()
	a, err := bus.NewAuthority()
	if err != nil {
		t.Fatal(err)
	}
	c, err := a.Agent("a")
	if err != nil {
		t.Fatal(err)
	}
	file, err := c.File()
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("x", slog.Any("cred", c), slog.Any("auth", a))
	for _, out := range []string{fmt.Sprint(c), fmt.Sprintf("%v %s", c, a), fmt.Sprint(a), logged.String()} {
		if strings.Contains(out, "SU") || strings.Contains(out, "eyJ") || !strings.Contains(out, "<secret>") {
			t.Errorf("printed %q, want <secret> only", out)
		}
	}
	if !bytes.Contains(file, []byte("SUA")) {
		t.Errorf("creds file has no user seed")
	}
}

// TestAuthorityIsKept: the authority written to disk is read back the same
// (dev keeps its account, and the JetStream data under it), and the file is
// private.
func TestAuthorityIsKept(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "nats", "authority.json")
	a, err := bus.LoadOrCreateAuthority(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := bus.LoadOrCreateAuthority(path)
	if err != nil {
		t.Fatal(err)
	}
	// The JWTs are signed again at each load, with that second's issue
	// time, so the keys they are of are compared, not their text.
	if a.AccountPublicKey() != b.AccountPublicKey() || a.SystemAccountPublicKey() != b.SystemAccountPublicKey() ||
		operatorOf(t, a.OperatorJWT()) != operatorOf(t, b.OperatorJWT()) {
		t.Error("a reloaded authority differs")
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("authority file mode %v, want 0600", fi.Mode().Perm())
	}
}

// TestCredentialFileRoundTrip: a creds file read back gives the inbox its
// permissions allow, so a process needs no inbox setting.
func TestCredentialFileRoundTrip(t *testing.T) {
	t.Parallel()
	a, err := bus.NewAuthority()
	if err != nil {
		t.Fatal(err)
	}
	c, err := a.Agent("gpu-node-07")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "node.creds")
	if err := c.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	back, err := bus.ParseCredential(data)
	if err != nil {
		t.Fatal(err)
	}
	if back.PublicKey() != c.PublicKey() {
		t.Errorf("public key %s, want %s", back.PublicKey(), c.PublicKey())
	}
	if got, want := back.Inbox(), bus.AgentInbox("gpu-node-07"); got != want {
		t.Errorf("inbox %q, want %q", got, want)
	}
}

// TestServerConfigRunsARealServer: the configuration `modelplane nats init`
// writes, read by the NATS server's own parser, trusts the authority's
// credentials and refuses anonymous clients.
func TestServerConfigRunsARealServer(t *testing.T) {
	t.Parallel()
	a, err := bus.NewAuthority()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "modelplane-trust.conf"), []byte(a.ServerConfig()), 0o644); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "nats.conf")
	main := fmt.Sprintf("listen: \"127.0.0.1:-1\"\njetstream { store_dir: %q }\ninclude \"modelplane-trust.conf\"\n", filepath.Join(dir, "js"))
	if err := os.WriteFile(conf, []byte(main), 0o644); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	opts.NoLog, opts.NoSigs = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	if nc, err := nats.Connect(srv.ClientURL()); err == nil {
		nc.Close()
		t.Error("anonymous connection accepted")
	}
	c, err := a.ControlPlane()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.ClientURL(), c.Options()...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Ensure(t.Context(), js); err != nil {
		t.Fatalf("JetStream in the modelplane account: %v", err)
	}
}

// TestRevokedUserIsCutOff: a revoked node credential, pushed to the server
// as an account update by the system user, loses its connection and
// cannot connect again; another node's is untouched.
func TestRevokedUserIsCutOff(t *testing.T) {
	t.Parallel()
	// A private authority: a revocation in natstest's would change the
	// account every test server of this binary trusts.
	a, err := bus.NewAuthority()
	if err != nil {
		t.Fatal(err)
	}
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true}
	if err := a.Configure(opts); err != nil {
		t.Fatal(err)
	}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	t.Cleanup(s.Shutdown)
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	victim, err := a.Agent("a")
	if err != nil {
		t.Fatal(err)
	}
	other, err := a.Agent("b")
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	vc, err := nats.Connect(s.ClientURL(), append(victim.Options(), nats.NoReconnect(), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))...)
	if err != nil {
		t.Fatal(err)
	}
	defer vc.Close()
	oc, err := nats.Connect(s.ClientURL(), other.Options()...)
	if err != nil {
		t.Fatal(err)
	}
	defer oc.Close()
	sys, err := a.SystemUser()
	if err != nil {
		t.Fatal(err)
	}
	sc, err := nats.Connect(s.ClientURL(), sys.Options()...)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()

	if err := a.Revoke(victim.PublicKey()); err != nil {
		t.Fatal(err)
	}
	if err := a.Push(t.Context(), sc); err != nil {
		t.Fatal(err)
	}
	wait.Eventually(t, time.Minute, func() bool { return isClosed(closed) }, "the revoked user's connection stays open")
	if nc, err := nats.Connect(s.ClientURL(), victim.Options()...); err == nil {
		nc.Close()
		t.Error("the revoked user connects again")
	}
	if err := oc.Publish("mp.node.b.status", []byte(`{}`)); err != nil || oc.FlushTimeout(5*time.Second) != nil || !oc.IsConnected() {
		t.Errorf("another node's connection was affected: %v", err)
	}
	if err := a.Revoke("not-a-key"); err == nil {
		t.Error("Revoke accepted a malformed key")
	}
}

// TestPushToAServerThatHasNotLoadedTheAccount: a server just started has
// loaded no account until a client of it connects, and skips an account
// update meanwhile (answering 200). Push says so, since the first client
// would then load the trust file's JWT and its revocations would be lost;
// once a client has connected, the same push lands.
func TestPushToAServerThatHasNotLoadedTheAccount(t *testing.T) {
	t.Parallel()
	a, err := bus.NewAuthority()
	if err != nil {
		t.Fatal(err)
	}
	opts := &server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true}
	if err := a.Configure(opts); err != nil {
		t.Fatal(err)
	}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	t.Cleanup(s.Shutdown)
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	sys, err := a.SystemUser()
	if err != nil {
		t.Fatal(err)
	}
	sc, err := nats.Connect(s.ClientURL(), sys.Options()...)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	if err := a.Push(t.Context(), sc); !errors.Is(err, bus.ErrAccountNotLoaded) {
		t.Fatalf("push before any client of the account: err %v, want ErrAccountNotLoaded", err)
	}
	user, err := a.Agent("a")
	if err != nil {
		t.Fatal(err)
	}
	uc, err := nats.Connect(s.ClientURL(), user.Options()...)
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	if err := a.Push(t.Context(), sc); err != nil {
		t.Fatalf("push once a client of the account connected: %v", err)
	}
}

// syncBuffer is a log sink the server's goroutines may write while the
// test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestEmbeddedServerSaysWhatARefusedClientMustConfigure: a client of the
// previous release connects anonymously; the embedded server refuses it
// and logs what it must be given.
func TestEmbeddedServerSaysWhatARefusedClientMustConfigure(t *testing.T) {
	t.Parallel()
	a, err := bus.NewAuthority()
	if err != nil {
		t.Fatal(err)
	}
	var logged syncBuffer
	ns, err := bus.StartEmbedded(t.TempDir(), a, slog.New(slog.NewJSONHandler(&logged, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	if nc, err := nats.Connect(ns.ClientURL()); err == nil {
		nc.Close()
		t.Fatal("anonymous connection accepted")
	}
	wait.Eventually(t, 10*time.Second, func() bool {
		out := logged.String()
		return strings.Contains(out, "authentication error") && strings.Contains(out, "MP_NATS_CREDS")
	}, "the server logged no hint for the refused client: %s", wait.Show(func() any { return logged.String() }))
}

// isClosed reports whether ch is closed, without waiting.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// operatorOf is the operator key an operator JWT is of.
func operatorOf(t *testing.T, token string) string {
	t.Helper()
	c, err := jwt.DecodeOperatorClaims(token)
	if err != nil {
		t.Fatal(err)
	}
	return c.Subject
}
