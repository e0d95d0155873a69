package enrollment_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/coder/quartz"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"modelplane/auth"
	"modelplane/bus"
	"modelplane/db"
	"modelplane/enrollment"
	"modelplane/internal/pgtest"
	"modelplane/internal/wait"
)

var (
	admin    = &auth.Principal{Name: "root@example.com", Via: "session", PlatformRole: auth.RolePlatformAdmin}
	engineer = &auth.Principal{Name: "eng@example.com", Via: "session"}
)

// natsFor starts a server trusting a and returns its URL and a
// system-user connection to it.
func natsFor(t *testing.T, a *bus.Authority) (string, *nats.Conn) {
	t.Helper()
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
		t.Fatal("nats not ready")
	}
	sys, err := a.SystemUser()
	if err != nil {
		t.Fatal(err)
	}
	sc, err := nats.Connect(s.ClientURL(), sys.Options()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sc.Close)
	return s.ClientURL(), sc
}

func pusher(a *bus.Authority, sc *nats.Conn) enrollment.Pusher {
	return func(ctx context.Context) error { return a.Push(ctx, sc) }
}

func connectCreds(url string, creds []byte) (*nats.Conn, error) {
	c, err := bus.ParseCredential(creds)
	if err != nil {
		return nil, err
	}
	return nats.Connect(url, append(c.Options(), nats.NoReconnect())...)
}

// TestJoinTokenEnrollsOnceAndRevokeEndsBoth: a join token is exchanged
// once, for a NATS credential of that node and an artifact token; revoking
// the node cuts its NATS connection and refuses both from then on.
func TestJoinTokenEnrollsOnceAndRevokeEndsBoth(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.New(t)
	path := filepath.Join(t.TempDir(), "authority.json")
	a, err := bus.LoadOrCreateAuthority(path)
	if err != nil {
		t.Fatal(err)
	}
	url, sc := natsFor(t, a)
	clock := quartz.NewMock(t)
	clock.Set(time.Now()) // NATS checks a credential's expiry by its own clock
	svc := enrollment.New(pool, a, pusher(a, sc), clock)

	if _, _, err := svc.CreateJoinToken(ctx, engineer, enrollment.JoinRequest{Node: "gpu-1", Host: "10.0.0.7", TTL: time.Hour}); !errors.Is(err, auth.ErrForbidden) {
		t.Fatalf("an engineer made a join token (err %v)", err)
	}
	token, _, err := svc.CreateJoinToken(ctx, admin, enrollment.JoinRequest{Node: "gpu-1", Host: "10.0.0.7", PortFirst: 8000, PortLast: 8999, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	got, err := svc.Join(ctx, token, "10.0.0.7")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Join(ctx, token, "10.0.0.7"); !errors.Is(err, enrollment.ErrTokenUsed) || !errors.Is(err, enrollment.ErrInvalidToken) {
		t.Errorf("second join with the same token: err %v, want ErrTokenUsed", err)
	}
	if got.Node != "gpu-1" {
		t.Errorf("enrolled node %q, want gpu-1", got.Node)
	}
	addr, err := db.New(pool).NodeAddressGet(ctx, "gpu-1")
	if err != nil || addr.Host != "10.0.0.7" || addr.PortFirst != 8000 || addr.PortLast != 8999 {
		t.Errorf("registered address %+v (err %v), want 10.0.0.7:8000-8999", addr, err)
	}
	node, err := svc.VerifyArtifactToken(ctx, got.ArtifactToken)
	if err != nil || node != "gpu-1" {
		t.Errorf("artifact token verifies as %q (err %v), want gpu-1", node, err)
	}
	closed := make(chan struct{})
	nc, err := connectCreds(url, []byte(got.NATSCreds))
	if err != nil {
		t.Fatal(err)
	}
	nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
	defer nc.Close()
	// The credential is the node's own: its heartbeat subject, no other.
	if err := nc.Publish("mp.node.gpu-1.status", []byte(`{}`)); err != nil || nc.FlushTimeout(5*time.Second) != nil {
		t.Fatalf("the node cannot heartbeat: %v", err)
	}

	if err := svc.Revoke(ctx, engineer, "gpu-1"); !errors.Is(err, auth.ErrForbidden) {
		t.Fatalf("an engineer revoked a node (err %v)", err)
	}
	if err := svc.Revoke(ctx, admin, "gpu-1"); err != nil {
		t.Fatal(err)
	}
	wait.Eventually(t, time.Minute, func() bool {
		select {
		case <-closed:
			return true
		default:
			return false
		}
	}, "the revoked node's NATS connection stays open")
	if nc, err := connectCreds(url, []byte(got.NATSCreds)); err == nil {
		nc.Close()
		t.Error("the revoked node connects again")
	}
	if _, err := svc.VerifyArtifactToken(ctx, got.ArtifactToken); !errors.Is(err, enrollment.ErrInvalidToken) {
		t.Errorf("revoked artifact token: err %v, want ErrInvalidToken", err)
	}

	// A restarted control plane loads the authority without revocations
	// and rebuilds the list from its records: what it pushes from then on
	// still refuses the node.
	b, err := bus.LoadOrCreateAuthority(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := enrollment.New(pool, b, pusher(b, sc), clock).Restore(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Push(ctx, sc); err != nil {
		t.Fatal(err)
	}
	if nc, err := connectCreds(url, []byte(got.NATSCreds)); err == nil {
		nc.Close()
		t.Error("the revoked node connects again after a restart")
	}
}

// TestJoinTokenExpires: a token past its expiry enrolls nothing.
func TestJoinTokenExpires(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.New(t)
	a, err := bus.NewAuthority()
	if err != nil {
		t.Fatal(err)
	}
	clock := quartz.NewMock(t)
	clock.Set(time.Now()) // NATS checks a credential's expiry by its own clock
	svc := enrollment.New(pool, a, nil, clock)
	token, _, err := svc.CreateJoinToken(ctx, admin, enrollment.JoinRequest{Node: "gpu-2", Host: "10.0.0.8", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour + time.Second)
	if _, err := svc.Join(ctx, token, "10.0.0.7"); !errors.Is(err, enrollment.ErrTokenExpired) {
		t.Errorf("expired token: err %v, want ErrTokenExpired", err)
	}
	if _, err := svc.Join(ctx, "mpj_never-made", "10.0.0.7"); !errors.Is(err, enrollment.ErrInvalidToken) || errors.Is(err, enrollment.ErrTokenExpired) {
		t.Errorf("unknown token: err %v, want ErrInvalidToken alone", err)
	}
	for _, bad := range []enrollment.JoinRequest{
		{Node: "a.b", Host: "10.0.0.8", TTL: time.Hour},
		{Node: "gpu-2", Host: "", TTL: time.Hour},
		{Node: "gpu-2", Host: "10.0.0.8", PortFirst: 9, PortLast: 8, TTL: time.Hour},
		{Node: "gpu-2", Host: "10.0.0.8", TTL: 30 * 24 * time.Hour},
	} {
		if _, _, err := svc.CreateJoinToken(ctx, admin, bad); err == nil {
			t.Errorf("CreateJoinToken(%+v) = nil error, want refused", bad)
		}
	}
	if _, err := svc.VerifyArtifactToken(ctx, "mpn_nothing"); !errors.Is(err, enrollment.ErrInvalidToken) {
		t.Errorf("unknown artifact token: err %v", err)
	}
}

// TestJoinTokenRevokedBeforeUse: a revoked join token enrolls nothing and
// says so; listing shows each token's state, never the token.
func TestJoinTokenRevokedBeforeUse(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.New(t)
	a, err := bus.NewAuthority()
	if err != nil {
		t.Fatal(err)
	}
	clock := quartz.NewMock(t)
	clock.Set(time.Now()) // NATS checks a credential's expiry by its own clock
	svc := enrollment.New(pool, a, nil, clock)
	token, jt, err := svc.CreateJoinToken(ctx, admin, enrollment.JoinRequest{Node: "gpu-3", Host: "10.0.0.9", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.RevokeJoinToken(ctx, engineer, jt.ID); !errors.Is(err, auth.ErrForbidden) {
		t.Fatalf("an engineer revoked a join token (err %v)", err)
	}
	if err := svc.RevokeJoinToken(ctx, admin, jt.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Join(ctx, token, "10.0.0.9"); !errors.Is(err, enrollment.ErrTokenRevoked) {
		t.Errorf("revoked token: err %v, want ErrTokenRevoked", err)
	}
	list, err := svc.JoinTokens(ctx, admin)
	if err != nil || len(list) != 1 || list[0].State != "revoked" || list[0].Node != "gpu-3" {
		t.Errorf("join tokens %+v (err %v), want gpu-3 revoked", list, err)
	}
	if _, err := svc.JoinTokens(ctx, engineer); !errors.Is(err, auth.ErrForbidden) {
		t.Errorf("an engineer listed join tokens (err %v)", err)
	}
}

// TestRotationKeepsOldCredentialsForTheGrace: after a rotation both the old
// and the new credentials work until the grace ends; then the sweep cuts
// the old NATS user and artifact token and the new ones keep working.
func TestRotationKeepsOldCredentialsForTheGrace(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.New(t)
	a, err := bus.NewAuthority()
	if err != nil {
		t.Fatal(err)
	}
	url, sc := natsFor(t, a)
	clock := quartz.NewMock(t)
	clock.Set(time.Now()) // NATS checks a credential's expiry by its own clock
	svc := enrollment.New(pool, a, pusher(a, sc), clock)
	token, _, err := svc.CreateJoinToken(ctx, admin, enrollment.JoinRequest{Node: "gpu-4", Host: "10.0.0.10", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	first, err := svc.Join(ctx, token, "10.0.0.10")
	if err != nil {
		t.Fatal(err)
	}
	oldConn, err := connectCreds(url, []byte(first.NATSCreds))
	if err != nil {
		t.Fatal(err)
	}
	defer oldConn.Close()
	if _, err := svc.Rotate(ctx, "mpn_unknown"); !errors.Is(err, enrollment.ErrInvalidToken) {
		t.Errorf("rotate with an unknown token: err %v", err)
	}
	second, err := svc.Rotate(ctx, first.ArtifactToken)
	if err != nil {
		t.Fatal(err)
	}
	if second.Node != "gpu-4" || second.ArtifactToken == first.ArtifactToken || second.NATSCreds == first.NATSCreds {
		t.Fatalf("rotation gave %v the same credentials", second.Node)
	}
	// Only the current token rotates: the previous one cannot mint more.
	if _, err := svc.Rotate(ctx, first.ArtifactToken); !errors.Is(err, enrollment.ErrInvalidToken) {
		t.Errorf("rotate with the previous token: err %v, want ErrInvalidToken", err)
	}
	for name, tok := range map[string]string{"old": first.ArtifactToken, "new": second.ArtifactToken} {
		if node, err := svc.VerifyArtifactToken(ctx, tok); err != nil || node != "gpu-4" {
			t.Errorf("%s artifact token in the grace: %q, %v", name, node, err)
		}
	}
	newConn, err := connectCreds(url, []byte(second.NATSCreds))
	if err != nil {
		t.Fatal(err)
	}
	defer newConn.Close()
	if n, err := svc.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("sweep in the grace revoked %d (err %v)", n, err)
	}
	if !oldConn.IsConnected() {
		t.Fatal("the old connection closed within the grace")
	}

	clock.Advance(enrollment.DefaultRotationGrace)
	if n, err := svc.Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("sweep after the grace revoked %d (err %v), want 1", n, err)
	}
	wait.Eventually(t, time.Minute, func() bool { return oldConn.IsClosed() }, "the old NATS connection stays open after the grace")
	if _, err := svc.VerifyArtifactToken(ctx, first.ArtifactToken); !errors.Is(err, enrollment.ErrInvalidToken) {
		t.Errorf("old artifact token after the grace: err %v", err)
	}
	if node, err := svc.VerifyArtifactToken(ctx, second.ArtifactToken); err != nil || node != "gpu-4" {
		t.Errorf("new artifact token after the grace: %q, %v", node, err)
	}
	if err := newConn.Publish("mp.node.gpu-4.status", []byte(`{}`)); err != nil || newConn.FlushTimeout(5*time.Second) != nil || !newConn.IsConnected() {
		t.Errorf("the new credential stopped working: %v", err)
	}
}
