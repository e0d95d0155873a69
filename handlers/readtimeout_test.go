package handlers

import (
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/auth"
)

// TestSlowBodyIsCut: a form route stops waiting for a body that never
// comes once ReadTimeout passes; the client sees an error status, or the
// connection closed. (The API's huma operations bound their body reads
// already; the portal's chi routes did not.) The body is a pipe the test never writes to, so the
// test waits for the cut, however long the server takes, never for a fixed
// time.
func TestSlowBodyIsCut(t *testing.T) {
	t.Parallel()
	e := newTestEnvWith(t, envOptions{Deps: func(d *Deps, _ *pgxpool.Pool) { d.ReadTimeout = 50 * time.Millisecond }})
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	u := portalSignIn(t, e, "risk-admin@example.com")
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.URL+"/teams", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.AddCookie(&http.Cookie{Name: auth.SessionCookie, Value: u.token})
	req.Header.Set("X-CSRF-Token", u.csrf)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.ContentLength = 100 // a body promised and never sent
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if errors.Is(err, t.Context().Err()) && t.Context().Err() != nil {
			t.Fatalf("request ended with the test, not cut by the server: %v", err)
		}
		t.Logf("cut: %v", err)
		return // the connection was closed: cut
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	t.Logf("cut: %d %s", resp.StatusCode, b)
	if resp.StatusCode < 400 {
		t.Fatalf("slow body: %d %s; want an error status", resp.StatusCode, b)
	}
}
