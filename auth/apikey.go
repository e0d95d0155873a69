package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/db"
)

// KeyPrefix starts every modelplane API key, so secret scanners and people
// recognise one.
const KeyPrefix = "mpk_"

// A key is "mpk_" + 12 hex characters of public lookup id + "_" + 43 characters
// of base64url secret (256 random bits). Only SHA-256 of the whole key is
// stored; keys carry enough entropy that a slow hash adds nothing.
const (
	lookupLen = 12
	secretLen = 32
)

// NewKey returns a fresh API key and its public lookup prefix.
func NewKey() (key, prefix string, err error) {
	id := make([]byte, lookupLen/2)
	secret := make([]byte, secretLen)
	if _, err := rand.Read(id); err != nil {
		return "", "", err
	}
	if _, err := rand.Read(secret); err != nil {
		return "", "", err
	}
	prefix = KeyPrefix + hex.EncodeToString(id)
	return prefix + "_" + base64.RawURLEncoding.EncodeToString(secret), prefix, nil
}

// HashKey is the stored digest of a key.
func HashKey(key string) []byte {
	h := sha256.Sum256([]byte(key))
	return h[:]
}

// splitKey returns the lookup prefix of a well-formed key.
func splitKey(key string) (string, bool) {
	if !strings.HasPrefix(key, KeyPrefix) || len(key) != len(KeyPrefix)+lookupLen+1+43 {
		return "", false
	}
	prefix := key[:len(KeyPrefix)+lookupLen]
	if key[len(prefix)] != '_' {
		return "", false
	}
	return prefix, true
}

// LooksLikeKey reports whether a bearer token has the API key shape (as
// opposed to an OIDC token).
func LooksLikeKey(token string) bool { return strings.HasPrefix(token, KeyPrefix) }

// Keys verifies API keys against PostgreSQL.
type Keys struct {
	pool  *pgxpool.Pool
	clock quartz.Clock
}

// NewKeys returns a key verifier; clock is what expiry is checked on
// (quartz.NewReal() when nil).
func NewKeys(pool *pgxpool.Pool, clock quartz.Clock) *Keys {
	if clock == nil {
		clock = quartz.NewReal()
	}
	return &Keys{pool: pool, clock: clock}
}

// Authenticate returns the principal for a raw key, or ErrUnauthenticated.
func (k *Keys) Authenticate(ctx context.Context, key string) (*Principal, error) {
	prefix, ok := splitKey(key)
	if !ok {
		return nil, ErrUnauthenticated
	}
	q := db.New(k.pool)
	row, err := q.APIKeyGetByPrefix(ctx, prefix)
	if err != nil {
		if errors.Is(err, db.ErrNotFound) {
			return nil, ErrUnauthenticated
		}
		return nil, fmt.Errorf("authenticate key: %w", err)
	}
	if subtle.ConstantTimeCompare(row.Hash, HashKey(key)) != 1 {
		return nil, ErrUnauthenticated
	}
	now := k.clock.Now()
	if row.RevokedAt != nil || (row.ExpiresAt != nil && !now.Before(*row.ExpiresAt)) {
		return nil, ErrUnauthenticated
	}
	// A key grants no more than its creator still holds: one whose creator
	// left its team, was demoted below its role or lost the platform role
	// that minted it stops here. The lookup computes this, so it costs no
	// extra round trip; tenant deletes the gateways' copy when it changes.
	if !row.CreatorHolds {
		return nil, ErrUnauthenticated
	}
	// last_used_at is written at most once a minute per key, so reads stay
	// reads; the query re-checks staleness against concurrent requests.
	if stale := now.Add(-time.Minute); row.LastUsedAt == nil || row.LastUsedAt.Before(stale) {
		if err := q.APIKeyTouch(ctx, db.APIKeyTouchParams{ID: row.ID, Now: &now, StaleBefore: &stale}); err != nil {
			return nil, fmt.Errorf("authenticate key: %w", err)
		}
	}
	p := &Principal{KeyID: row.ID, Name: row.Prefix, Via: "api-key", OwnerEmail: row.CreatorEmail}
	if row.CreatedBy != nil {
		p.OwnerUserID = *row.CreatedBy
	}
	if row.TeamID == nil {
		p.PlatformRole = Role(row.Role)
	} else {
		p.Teams = []Membership{{TeamID: *row.TeamID, Team: *row.TeamName, Role: Role(row.Role)}}
	}
	return p, nil
}

// LoadUser builds the principal of a signed-in user from its memberships.
func LoadUser(ctx context.Context, q *db.Queries, userID int64, via string) (*Principal, error) {
	u, err := q.UserGet(ctx, userID)
	if err != nil {
		return nil, fmt.Errorf("load user: %w", err)
	}
	rows, err := q.TeamMemberListByUser(ctx, userID)
	if err != nil {
		return nil, fmt.Errorf("load user: %w", err)
	}
	p := &Principal{UserID: u.ID, Name: u.Email, Via: via}
	if p.Name == "" {
		p.Name = u.Subject
	}
	if u.PlatformRole != nil {
		p.PlatformRole = Role(*u.PlatformRole)
	}
	for _, r := range rows {
		p.Teams = append(p.Teams, Membership{TeamID: r.TeamID, Team: r.TeamName, Role: Role(r.Role)})
	}
	return p, nil
}
