package auth

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/db"
)

// SessionCookie names the browser session cookie. The __Host- prefix makes
// browsers refuse it unless it is Secure, has Path=/ and no Domain, so no
// sibling host can set or overwrite it.
const SessionCookie = "__Host-mp_session"

// Session timeout defaults.
const (
	DefaultIdleTimeout     = 8 * time.Hour
	DefaultAbsoluteTimeout = 24 * time.Hour
)

// touchEvery limits last_seen_at writes to one a minute per session, so
// every page view is not a write; idle timeouts are that much coarse.
const touchEvery = time.Minute

// SessionConfig sets how long sessions live.
type SessionConfig struct {
	IdleTimeout     time.Duration // since the last request; default 8h
	AbsoluteTimeout time.Duration // since sign-in; default 24h
}

// Sessions keeps server-side browser sessions. The cookie holds a random
// token; the table holds only its SHA-256, so a database leak yields no
// usable session.
type Sessions struct {
	pool  *pgxpool.Pool
	cfg   SessionConfig
	clock quartz.Clock
}

// NewSessions returns the session store; zero timeouts take the defaults and
// clock is what timeouts are measured on (quartz.NewReal() when nil).
func NewSessions(pool *pgxpool.Pool, cfg SessionConfig, clock quartz.Clock) *Sessions {
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.AbsoluteTimeout <= 0 {
		cfg.AbsoluteTimeout = DefaultAbsoluteTimeout
	}
	if clock == nil {
		clock = quartz.NewReal()
	}
	return &Sessions{pool: pool, cfg: cfg, clock: clock}
}

// Create starts a session for the user and returns the cookie token and the
// session's CSRF token. At sign-in use Rotate, so a session id planted
// before login never becomes an authenticated one.
func (s *Sessions) Create(ctx context.Context, userID int64) (token, csrf string, err error) {
	token, csrf, err = s.create(ctx, db.New(s.pool), userID)
	if err != nil {
		return "", "", fmt.Errorf("create session: %w", err)
	}
	return token, csrf, nil
}

// Rotate ends the session of oldToken, if any, and starts a new one for the
// user, in one transaction. Call it at every sign-in with whatever session
// cookie the browser sent.
func (s *Sessions) Rotate(ctx context.Context, oldToken string, userID int64) (token, csrf string, err error) {
	err = db.InTx(ctx, s.pool, func(q *db.Queries) error {
		if oldToken != "" {
			if err := q.SessionDelete(ctx, hashToken(oldToken)); err != nil {
				return err
			}
		}
		token, csrf, err = s.create(ctx, q, userID)
		return err
	})
	if err != nil {
		return "", "", fmt.Errorf("rotate session: %w", err)
	}
	return token, csrf, nil
}

func (s *Sessions) create(ctx context.Context, q *db.Queries, userID int64) (token, csrf string, err error) {
	if token, err = randomToken(); err != nil {
		return "", "", err
	}
	if csrf, err = randomToken(); err != nil {
		return "", "", err
	}
	now := s.clock.Now()
	err = q.SessionInsert(ctx, db.SessionInsertParams{
		IDHash:    hashToken(token),
		UserID:    userID,
		CsrfToken: csrf,
		Now:       now,
		ExpiresAt: now.Add(s.cfg.AbsoluteTimeout),
	})
	if err != nil {
		return "", "", err
	}
	return token, csrf, nil
}

// Lookup returns the signed-in principal and the session's CSRF token. A
// missing, unknown, idle or expired session is ErrUnauthenticated; an
// expired one is deleted on the way.
func (s *Sessions) Lookup(ctx context.Context, token string) (*Principal, string, error) {
	return s.lookup(ctx, token, true)
}

// Check is Lookup for a request already under way (an open event stream)
// re-reading the session and memberships: it does not count as activity,
// so a stream left open does not keep an idle session alive.
func (s *Sessions) Check(ctx context.Context, token string) (*Principal, error) {
	p, _, err := s.lookup(ctx, token, false)
	return p, err
}

func (s *Sessions) lookup(ctx context.Context, token string, touch bool) (*Principal, string, error) {
	if token == "" {
		return nil, "", ErrUnauthenticated
	}
	q := db.New(s.pool)
	h := hashToken(token)
	// One round trip: the session, its user and the user's memberships.
	row, err := q.SessionLookup(ctx, h)
	if err != nil {
		if errors.Is(err, db.ErrNotFound) {
			return nil, "", ErrUnauthenticated
		}
		return nil, "", fmt.Errorf("lookup session: %w", err)
	}
	now := s.clock.Now()
	if !now.Before(row.ExpiresAt) || now.Sub(row.LastSeenAt) >= s.cfg.IdleTimeout {
		if err := q.SessionDelete(ctx, h); err != nil {
			return nil, "", fmt.Errorf("lookup session: %w", err)
		}
		return nil, "", ErrUnauthenticated
	}
	if touch && now.Sub(row.LastSeenAt) >= touchEvery {
		if err := q.SessionTouch(ctx, db.SessionTouchParams{Now: now, IDHash: h}); err != nil {
			return nil, "", fmt.Errorf("lookup session: %w", err)
		}
	}
	p := &Principal{UserID: row.UserID, Name: row.Email, Via: "session"}
	if p.Name == "" {
		p.Name = row.Subject
	}
	if row.PlatformRole != nil {
		p.PlatformRole = Role(*row.PlatformRole)
	}
	var teams []struct {
		TeamID int64  `json:"team_id"`
		Team   string `json:"team"`
		Role   string `json:"role"`
	}
	if err := json.Unmarshal([]byte(row.Teams), &teams); err != nil {
		return nil, "", fmt.Errorf("lookup session: memberships: %w", err)
	}
	for _, t := range teams {
		p.Teams = append(p.Teams, Membership{TeamID: t.TeamID, Team: t.Team, Role: Role(t.Role)})
	}
	return p, row.CsrfToken, nil
}

// End deletes the session (logout). Ending an unknown session is not an
// error, so logging out twice is harmless.
func (s *Sessions) End(ctx context.Context, token string) error {
	if token == "" {
		return nil
	}
	if err := db.New(s.pool).SessionDelete(ctx, hashToken(token)); err != nil {
		return fmt.Errorf("end session: %w", err)
	}
	return nil
}

// Sweep deletes sessions past their absolute or idle timeout and returns
// how many; Lookup refuses them anyway, this only reclaims the rows.
func (s *Sessions) Sweep(ctx context.Context) (int64, error) {
	now := s.clock.Now()
	n, err := db.New(s.pool).SessionDeleteExpired(ctx, db.SessionDeleteExpiredParams{
		Now:        now,
		IdleBefore: now.Add(-s.cfg.IdleTimeout),
	})
	if err != nil {
		return 0, fmt.Errorf("sweep sessions: %w", err)
	}
	return n, nil
}

// Cookie returns the session cookie for token, living as long as a session
// can.
func (s *Sessions) Cookie(token string) *http.Cookie {
	return SessionCookieFor(token, s.cfg.AbsoluteTimeout)
}

// SessionCookieFor returns the session cookie carrying token. Secure is kept
// even in development: browsers accept Secure cookies from http://localhost
// and http://127.0.0.1. SameSite=Lax still sends it on the top-level
// redirect back from the IdP.
func SessionCookieFor(token string, maxAge time.Duration) *http.Cookie {
	return &http.Cookie{
		Name:     SessionCookie,
		Value:    token,
		Path:     "/",
		MaxAge:   int(maxAge / time.Second),
		Secure:   true,
		HttpOnly: true,
		SameSite: http.SameSiteLaxMode,
	}
}

// ClearSessionCookie returns a cookie that makes the browser drop the
// session cookie.
func ClearSessionCookie() *http.Cookie {
	c := SessionCookieFor("", 0)
	c.MaxAge = -1
	return c
}

// ValidCSRF reports whether a request's CSRF token matches its session's,
// in constant time.
func ValidCSRF(session, sent string) bool {
	return session != "" && subtle.ConstantTimeCompare([]byte(session), []byte(sent)) == 1
}

// hashToken is the stored form of a session token: 256 random bits need no
// slow hash.
func hashToken(token string) []byte { return HashKey(token) }
