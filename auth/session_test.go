package auth

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/db"
	"modelplane/internal/pgtest"
)

// t0 is whole seconds, so it survives PostgreSQL's microsecond timestamps.
var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

// sessionFixture is a fresh database with one user and a session store on a
// hand-moved clock.
func sessionFixture(t *testing.T) (*Sessions, *quartz.Mock, *pgxpool.Pool, int64) {
	t.Helper()
	pool := pgtest.New(t)
	u, err := db.New(pool).UserUpsert(t.Context(), db.UserUpsertParams{Issuer: "https://idp.example", Subject: "s1", Email: "ann@example.com", Name: "Ann"})
	if err != nil {
		t.Fatal(err)
	}
	clk := newClock(t, t0)
	return NewSessions(pool, SessionConfig{}, clk), clk, pool, u.ID
}

func TestSessionLookup(t *testing.T) {
	t.Parallel()
	s, _, pool, uid := sessionFixture(t)
	ctx := t.Context()
	token, csrf, err := s.Create(ctx, uid)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if len(token) != 43 || len(csrf) != 43 {
		t.Errorf("token, csrf lengths = %d, %d; want 43 (256 bits base64url)", len(token), len(csrf))
	}
	p, gotCSRF, err := s.Lookup(ctx, token)
	if err != nil {
		t.Fatalf("Lookup: %v", err)
	}
	if p.UserID != uid || p.Via != "session" || p.Name != "ann@example.com" {
		t.Errorf("principal = %+v, want user %d ann@example.com via session", p, uid)
	}
	if gotCSRF != csrf {
		t.Errorf("csrf = %q, want %q", gotCSRF, csrf)
	}
	// Only the hash is stored.
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM sessions WHERE id_hash = $1 OR id_hash = $2", []byte(token), HashKey(token)).Scan(&n); err != nil || n != 1 {
		t.Errorf("rows by hash = %d, %v; want 1", n, err)
	}
	if _, _, err := s.Lookup(ctx, token+"x"); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("Lookup(unknown) error = %v, want ErrUnauthenticated", err)
	}
	if _, _, err := s.Lookup(ctx, ""); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("Lookup(\"\") error = %v, want ErrUnauthenticated", err)
	}
}

func TestSessionRotate(t *testing.T) {
	t.Parallel()
	s, _, _, uid := sessionFixture(t)
	ctx := t.Context()
	old, _, err := s.Create(ctx, uid)
	if err != nil {
		t.Fatal(err)
	}
	token, csrf, err := s.Rotate(ctx, old, uid)
	if err != nil {
		t.Fatalf("Rotate: %v", err)
	}
	if token == old {
		t.Fatalf("Rotate kept the token")
	}
	if _, _, err := s.Lookup(ctx, old); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("Lookup(old) error = %v, want ErrUnauthenticated", err)
	}
	if _, got, err := s.Lookup(ctx, token); err != nil || got != csrf {
		t.Errorf("Lookup(new) = csrf %q, %v; want %q, nil", got, err, csrf)
	}
	// A browser without a session cookie, or with an unknown one, signs in too.
	for _, stale := range []string{"", "unknown"} {
		if _, _, err := s.Rotate(ctx, stale, uid); err != nil {
			t.Errorf("Rotate(%q): %v", stale, err)
		}
	}
}

func TestSessionEnd(t *testing.T) {
	t.Parallel()
	s, _, _, uid := sessionFixture(t)
	ctx := t.Context()
	token, _, err := s.Create(ctx, uid)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.End(ctx, token); err != nil {
		t.Fatalf("End: %v", err)
	}
	if _, _, err := s.Lookup(ctx, token); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("Lookup after End error = %v, want ErrUnauthenticated", err)
	}
	if err := s.End(ctx, token); err != nil {
		t.Errorf("second End: %v, want nil", err)
	}
}

func TestSessionTimeouts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		steps []time.Duration // clock moves before each Lookup
		alive bool            // after the last step
	}{
		{"fresh", []time.Duration{0}, true},
		{"just-before-idle", []time.Duration{DefaultIdleTimeout - time.Second}, true},
		{"idle", []time.Duration{DefaultIdleTimeout}, false},
		{"activity-extends-idle", []time.Duration{7 * time.Hour, 7 * time.Hour, 7 * time.Hour}, true},
		{"absolute", []time.Duration{7 * time.Hour, 7 * time.Hour, 7 * time.Hour, 3 * time.Hour}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, clk, pool, uid := sessionFixture(t)
			ctx := t.Context()
			token, _, err := s.Create(ctx, uid)
			if err != nil {
				t.Fatal(err)
			}
			for i, d := range tc.steps {
				clk.Advance(d)
				_, _, err = s.Lookup(ctx, token)
				if i < len(tc.steps)-1 && err != nil {
					t.Fatalf("Lookup at step %d: %v", i, err)
				}
			}
			if tc.alive && err != nil {
				t.Errorf("Lookup after %v: %v, want alive", tc.steps, err)
			}
			if !tc.alive {
				if !errors.Is(err, ErrUnauthenticated) {
					t.Errorf("Lookup after %v error = %v, want ErrUnauthenticated", tc.steps, err)
				}
				if _, err := db.New(pool).SessionGet(ctx, HashKey(token)); !errors.Is(err, db.ErrNotFound) {
					t.Errorf("expired session row: err = %v, want deleted", err)
				}
			}
		})
	}
}

func TestSessionTouchEveryMinute(t *testing.T) {
	t.Parallel()
	s, clk, pool, uid := sessionFixture(t)
	ctx := t.Context()
	token, _, err := s.Create(ctx, uid)
	if err != nil {
		t.Fatal(err)
	}
	lastSeen := func() time.Time {
		row, err := db.New(pool).SessionGet(ctx, HashKey(token))
		if err != nil {
			t.Fatal(err)
		}
		return row.LastSeenAt
	}
	for _, step := range []struct {
		move time.Duration
		want time.Time
	}{
		{30 * time.Second, t0},                  // too soon: no write
		{30 * time.Second, t0.Add(time.Minute)}, // a minute since the last write
		{59 * time.Second, t0.Add(time.Minute)}, // too soon again
		{time.Second, t0.Add(2 * time.Minute)},
	} {
		clk.Advance(step.move)
		if _, _, err := s.Lookup(ctx, token); err != nil {
			t.Fatal(err)
		}
		if got := lastSeen(); !got.Equal(step.want) {
			t.Errorf("at %v last_seen_at = %v, want %v", clk.Now().Sub(t0), got, step.want)
		}
	}
}

func TestSessionSweep(t *testing.T) {
	t.Parallel()
	s, clk, pool, uid := sessionFixture(t)
	ctx := t.Context()
	idle, _, err := s.Create(ctx, uid)
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(DefaultIdleTimeout / 2)
	live, _, err := s.Create(ctx, uid)
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(DefaultIdleTimeout/2 + time.Second)
	n, err := s.Sweep(ctx)
	if err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want 1, nil", n, err)
	}
	q := db.New(pool)
	if _, err := q.SessionGet(ctx, HashKey(idle)); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("idle session: err = %v, want swept", err)
	}
	if _, err := q.SessionGet(ctx, HashKey(live)); err != nil {
		t.Errorf("live session: %v, want kept", err)
	}
}

func TestSessionCookie(t *testing.T) {
	t.Parallel()
	c := SessionCookieFor("tok", 24*time.Hour)
	if err := c.Valid(); err != nil {
		t.Fatalf("cookie invalid: %v", err)
	}
	got := c.String()
	for _, want := range []string{"__Host-mp_session=tok", "Path=/", "Max-Age=86400", "HttpOnly", "Secure", "SameSite=Lax"} {
		if !strings.Contains(got, want) {
			t.Errorf("cookie %q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "Domain") {
		t.Errorf("cookie %q has a Domain; __Host- cookies must not", got)
	}
	clear := ClearSessionCookie()
	if clear.Name != SessionCookie || clear.MaxAge >= 0 || !clear.Secure || clear.Path != "/" {
		t.Errorf("clearing cookie = %+v, want %s with MaxAge < 0, Secure, Path=/", clear, SessionCookie)
	}
	// Set-Cookie must carry Max-Age=0 for the browser to drop it.
	w := httptest.NewRecorder()
	http.SetCookie(w, clear)
	if h := w.Header().Get("Set-Cookie"); !strings.Contains(h, "Max-Age=0") {
		t.Errorf("clearing Set-Cookie = %q, want Max-Age=0", h)
	}
	if !ValidCSRF("abc", "abc") || ValidCSRF("abc", "abd") || ValidCSRF("", "") {
		t.Errorf("ValidCSRF accepts a wrong or empty token")
	}
}
