package handlers

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"modelplane/auth"
	"modelplane/db"
)

// TestRolloutEventsEndWithAccess checks that an open rollout event stream
// ends when the session that opened it ends (logout) or the person leaves
// the rollout's team, instead of going on showing the team's rollout until
// its lifetime runs out.
func TestRolloutEventsEndWithAccess(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	ctx := context.Background()
	id := e.riskRollout(t)
	q := db.New(e.pool)

	open := func(u *portalUser) io.ReadCloser {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second) // a bound on the test
		t.Cleanup(cancel)
		req, _ := http.NewRequestWithContext(sctx, http.MethodGet, fmt.Sprintf("%s/rollouts/%d/events", e.URL, id), nil)
		req.AddCookie(&http.Cookie{Name: auth.SessionCookie, Value: u.token})
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("events = %d, want 200", resp.StatusCode)
		}
		buf := make([]byte, 64)
		if _, err := resp.Body.Read(buf); err != nil {
			t.Fatalf("first bytes of the stream: %v", err)
		}
		return resp.Body
	}
	// ended reads the stream to its end; an error other than EOF means the
	// test's bound cut it, so the server never ended it.
	ended := func(what string, body io.ReadCloser) {
		t.Helper()
		defer body.Close()
		if _, err := io.Copy(io.Discard, body); err != nil {
			t.Errorf("%s: the stream did not end: %v", what, err)
		}
	}

	t.Run("logout", func(t *testing.T) {
		t.Parallel()
		u := portalSignIn(t, e, "risk-admin@example.com")
		body := open(u)
		if err := e.srv.Sessions.End(ctx, u.token); err != nil {
			t.Fatal(err)
		}
		ended("after logout", body)
	})
	t.Run("membership removed", func(t *testing.T) {
		t.Parallel()
		u := portalSignIn(t, e, "risk-viewer@example.com")
		body := open(u)
		user, err := q.UserGetByEmail(ctx, "risk-viewer@example.com")
		if err != nil {
			t.Fatal(err)
		}
		risk, err := q.TeamGetByName(ctx, "risk")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := q.TeamMemberDelete(ctx, db.TeamMemberDeleteParams{TeamID: risk.ID, UserID: user.ID}); err != nil {
			t.Fatal(err)
		}
		ended("after the membership went", body)
	})
}
