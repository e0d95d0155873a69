package enrollment_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"

	"modelplane/bus"
	"modelplane/enrollment"
	"modelplane/internal/natstest"
	"modelplane/internal/pgtest"
	"modelplane/internal/wait"
)

// controlPlane is the enrollment side of one control-plane process: the
// authority loaded from its file (with no revocations in memory), a
// system-user connection that wakes the repusher when it reconnects, and
// the service, restored as controlplane.Start does.
type controlPlane struct {
	svc    *enrollment.Service
	rep    *enrollment.Repusher
	landed atomic.Int64 // pushes the server took
}

func startControlPlane(t *testing.T, path, url string, pool *pgxpool.Pool, clock *quartz.Mock, wakeOnReconnect bool) *controlPlane {
	t.Helper()
	ctx := t.Context()
	a, err := bus.LoadOrCreateAuthority(path)
	if err != nil {
		t.Fatal(err)
	}
	sys, err := a.SystemUser()
	if err != nil {
		t.Fatal(err)
	}
	reconnected := make(chan struct{}, 1)
	opts := append(sys.Options(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if wakeOnReconnect {
		opts = append(opts, nats.ReconnectHandler(func(*nats.Conn) {
			select {
			case reconnected <- struct{}{}:
			default:
			}
		}))
	}
	sc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	cp := &controlPlane{}
	push := pusher(a, sc)
	cp.svc = enrollment.New(pool, a, func(ctx context.Context) error {
		err := push(ctx)
		if err == nil {
			cp.landed.Add(1)
		}
		return err
	}, clock)
	if err := cp.svc.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	var wake <-chan struct{}
	if wakeOnReconnect {
		wake = reconnected
	}
	cp.rep = cp.svc.Repusher(slog.New(slog.DiscardHandler), clock, wake)
	if err := cp.rep.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cp.rep.Stop()
		sc.Close()
	})
	return cp
}

// TestRevocationSurvivesReenrollAndRestarts is issue 25 finding 2: a node
// is enrolled and its credentials copied; it is revoked and enrolled again
// with a new join token; then the control plane restarts (its authority
// holds no revocations in memory) and NATS restarts (it reloads the
// account from its trust file, which lists none). Before, enrolling again
// cleared the old key's revocation, so the control plane's next push let
// the copy back in, and nothing pushed after a NATS restart. Now the copy
// is refused at every step, the node's new credentials work, and a NATS
// restart is followed by a push both on the control plane's reconnect and,
// where no reconnect is noticed, within RepushInterval.
func TestRevocationSurvivesReenrollAndRestarts(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.New(t)
	path := filepath.Join(t.TempDir(), "authority.json")
	a, err := bus.LoadOrCreateAuthority(path)
	if err != nil {
		t.Fatal(err)
	}
	srv := natstest.NewRestartableTrusting(t, a)
	url := srv.URL()
	clock := quartz.NewMock(t)
	clock.Set(time.Now()) // NATS checks a credential's expiry by its own clock

	refused := func(creds string) bool {
		nc, err := connectCreds(url, []byte(creds))
		if err != nil {
			return true
		}
		nc.Close()
		return false
	}
	enroll := func(svc *enrollment.Service) enrollment.Credentials {
		t.Helper()
		token, _, err := svc.CreateJoinToken(ctx, admin, enrollment.JoinRequest{Node: "gpu-1", Host: "10.0.0.7", TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		c, err := svc.Join(ctx, token, "10.0.0.7")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	cp1 := startControlPlane(t, path, url, pool, clock, true)
	first := enroll(cp1.svc)
	copied := first.NATSCreds
	if refused(copied) {
		t.Fatal("the node's fresh credentials are refused")
	}
	if err := cp1.svc.Revoke(ctx, admin, "gpu-1"); err != nil {
		t.Fatal(err)
	}
	wait.Eventually(t, time.Minute, func() bool { return refused(copied) }, "the revoked credentials still connect")

	second := enroll(cp1.svc)
	if refused(second.NATSCreds) {
		t.Fatal("the node's credentials from its new join token are refused")
	}
	if !refused(copied) {
		t.Error("enrolling the node again let its revoked credentials back in")
	}
	if _, err := cp1.svc.VerifyArtifactToken(ctx, first.ArtifactToken); !errors.Is(err, enrollment.ErrInvalidToken) {
		t.Errorf("the copied artifact token: err %v, want ErrInvalidToken", err)
	}
	if _, err := cp1.svc.Rotate(ctx, first.ArtifactToken); !errors.Is(err, enrollment.ErrInvalidToken) {
		t.Errorf("rotating with the copied artifact token: err %v, want ErrInvalidToken", err)
	}

	// The control plane restarts: its push rebuilds the list from
	// PostgreSQL, which must still hold the copy's key.
	cp1.rep.Stop()
	cp2 := startControlPlane(t, path, url, pool, clock, true)
	if !refused(copied) {
		t.Error("after a control-plane restart the revoked credentials connect")
	}

	// NATS restarts from its trust file: the control plane's reconnect
	// pushes the revocations again.
	srv.Shutdown()
	srv.Restart()
	wait.Eventually(t, time.Minute, func() bool { return refused(copied) }, "after a NATS restart the revoked credentials still connect")
	if refused(second.NATSCreds) {
		t.Error("after the restarts the node's current credentials are refused")
	}

	// A restart the control plane does not hear of (here: a repusher not
	// woken by reconnects) is covered within RepushInterval.
	cp2.rep.Stop()
	cp3 := startControlPlane(t, path, url, pool, clock, false)
	// Its first push (Restore's, then the repusher's at start) must land
	// before the restart: one retried across it would teach the new server.
	wait.Eventually(t, time.Minute, func() bool { return cp3.landed.Load() >= 2 }, "the repusher's first push did not land")
	srv.Shutdown()
	srv.Restart()
	wait.Eventually(t, time.Minute, func() bool { return !refused(second.NATSCreds) }, "NATS did not come back")
	// Until the next push the restarted server has forgotten: this is
	// what a restart does without the repusher.
	if refused(copied) {
		t.Error("the restarted server refused the copy before any push; the test no longer shows a restart forgetting revocations")
	}
	clock.Advance(enrollment.RepushInterval).MustWait(ctx)
	wait.Eventually(t, time.Minute, func() bool { return refused(copied) }, "RepushInterval after a NATS restart the revoked credentials still connect")
}

// TestCredentialsExpire: a node's NATS user carries an expiry of the
// credential lifetime, and its artifact token stops verifying, and
// rotating, once that lifetime has passed: a copy nobody revoked stops
// working by itself. Rotating in time renews both.
func TestCredentialsExpire(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.New(t)
	a, err := bus.NewAuthority()
	if err != nil {
		t.Fatal(err)
	}
	clock := quartz.NewMock(t)
	svc := enrollment.New(pool, a, nil, clock)
	token, _, err := svc.CreateJoinToken(ctx, admin, enrollment.JoinRequest{Node: "gpu-1", Host: "10.0.0.7", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	c, err := svc.Join(ctx, token, "10.0.0.7")
	if err != nil {
		t.Fatal(err)
	}
	expires := func(c enrollment.Credentials) time.Time {
		t.Helper()
		raw, err := jwt.ParseDecoratedJWT([]byte(c.NATSCreds))
		if err != nil {
			t.Fatal(err)
		}
		uc, err := jwt.DecodeUserClaims(raw)
		if err != nil {
			t.Fatal(err)
		}
		return time.Unix(uc.Expires, 0)
	}
	if got, want := expires(c), clock.Now().Add(enrollment.DefaultCredentialLifetime); !got.Equal(want.Truncate(time.Second)) {
		t.Errorf("NATS user expires at %v, want %v", got, want)
	}
	// Rotated before the lifetime ends: renewed.
	clock.Advance(enrollment.DefaultCredentialLifetime / 2)
	r, err := svc.Rotate(ctx, c.ArtifactToken)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := expires(r), clock.Now().Add(enrollment.DefaultCredentialLifetime); !got.Equal(want.Truncate(time.Second)) {
		t.Errorf("rotated NATS user expires at %v, want %v", got, want)
	}
	clock.Advance(enrollment.DefaultCredentialLifetime - time.Second)
	if _, err := svc.VerifyArtifactToken(ctx, r.ArtifactToken); err != nil {
		t.Errorf("artifact token a second before its lifetime ends: %v", err)
	}
	clock.Advance(time.Second)
	if _, err := svc.VerifyArtifactToken(ctx, r.ArtifactToken); !errors.Is(err, enrollment.ErrCredentialsExpired) {
		t.Errorf("artifact token past its lifetime: err %v, want ErrCredentialsExpired", err)
	}
	if _, err := svc.Rotate(ctx, r.ArtifactToken); !errors.Is(err, enrollment.ErrCredentialsExpired) {
		t.Errorf("rotating past the lifetime: err %v, want ErrCredentialsExpired", err)
	}
}
