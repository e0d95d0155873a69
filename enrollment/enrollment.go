package enrollment

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/auth"
	"modelplane/bus"
	"modelplane/db"
	"modelplane/errdefs"
	"modelplane/validate"
)

// Token prefixes: a join token and a node's artifact-download token, so a
// leaked one is recognisable.
const (
	joinPrefix     = "mpj_"
	artifactPrefix = "mpn_"
)

// MaxJoinTTL bounds how long a join token stays usable.
const MaxJoinTTL = 7 * 24 * time.Hour

// ErrInvalidToken means a join or artifact token is unknown, used, expired
// or revoked; callers cannot tell which (401).
var ErrInvalidToken = errors.New("invalid or expired token")

var nodeName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Pusher sends the authority's account JWT to the NATS servers (a
// bus.Authority.Push over a system-user connection); nil in tests that do
// not run NATS.
type Pusher func(ctx context.Context) error

// Service enrolls and revokes nodes.
type Service struct {
	pool *pgxpool.Pool
	auth *bus.Authority
	push Pusher
	now  func() time.Time
}

// New returns a Service minting credentials with a and pushing revocations
// with push.
func New(pool *pgxpool.Pool, a *bus.Authority, push Pusher, now func() time.Time) *Service {
	return &Service{pool: pool, auth: a, push: push, now: now}
}

// JoinRequest is what a platform admin says about the node a token
// enrolls: its name, and the host and ports its replicas may listen on.
type JoinRequest struct {
	Node      string
	Host      string
	PortFirst int
	PortLast  int
	TTL       time.Duration
}

// CreateJoinToken makes a single-use token that enrolls req.Node until it
// expires. Only platform admins may.
func (s *Service) CreateJoinToken(ctx context.Context, p *auth.Principal, req JoinRequest) (token string, expires time.Time, err error) {
	if p == nil || !p.PlatformAdmin() {
		return "", time.Time{}, auth.ErrForbidden
	}
	if req.PortFirst == 0 && req.PortLast == 0 {
		req.PortFirst, req.PortLast = 1, 65535
	}
	var errs validate.Errors
	if !nodeName.MatchString(req.Node) {
		errs.Add("node", "use up to 64 letters, digits, '-' and '_'")
	}
	if req.Host == "" || strings.ContainsAny(req.Host, "/ ") || (strings.Contains(req.Host, ":") && net.ParseIP(req.Host) == nil) {
		errs.Add("host", "must be a host name or IP address")
	}
	if req.PortFirst < 1 || req.PortLast > 65535 || req.PortFirst > req.PortLast {
		errs.Add("port_first", "the port range must be within 1-65535")
	}
	if req.TTL <= 0 || req.TTL > MaxJoinTTL {
		errs.Add("ttl", "must be positive and at most %s", MaxJoinTTL)
	}
	if err := errs.Err(); err != nil {
		return "", time.Time{}, err
	}
	token, hash := newToken(joinPrefix)
	expires = s.now().Add(req.TTL)
	if err := db.New(s.pool).NodeJoinTokenInsert(ctx, db.NodeJoinTokenInsertParams{TokenHash: hash, Node: req.Node, Host: req.Host,
		PortFirst: int32(req.PortFirst), PortLast: int32(req.PortLast), CreatedBy: p.Name, ExpiresAt: expires}); err != nil {
		return "", time.Time{}, fmt.Errorf("create join token: %w", err)
	}
	return token, expires, nil
}

// Enrolled is what a node gets for its join token, once.
type Enrolled struct {
	Node string
	// Creds is the node's NATS creds file (user JWT and seed).
	Creds []byte
	// ArtifactToken is the bearer token the node downloads artifacts with.
	ArtifactToken string
}

// Join exchanges a join token for the node's credentials. The token works
// once; a node that enrolls again gets new credentials, and its old NATS
// user is revoked.
func (s *Service) Join(ctx context.Context, token string) (Enrolled, error) {
	if !strings.HasPrefix(token, joinPrefix) {
		return Enrolled{}, ErrInvalidToken
	}
	now := s.now()
	var out Enrolled
	var oldKey string
	err := db.InTx(ctx, s.pool, func(q *db.Queries) error {
		jt, err := q.NodeJoinTokenTake(ctx, db.NodeJoinTokenTakeParams{TokenHash: digest(token), Now: &now})
		if errors.Is(err, errdefs.ErrNotFound) {
			return ErrInvalidToken
		}
		if err != nil {
			return err
		}
		old, err := q.NodeCredentialGetForUpdate(ctx, jt.Node)
		switch {
		case err == nil:
			if old.RevokedAt == nil {
				oldKey = old.NATSUserKey
			}
		case !errors.Is(err, errdefs.ErrNotFound):
			return err
		}
		cred, err := s.auth.Agent(jt.Node)
		if err != nil {
			return err
		}
		creds, err := cred.File()
		if err != nil {
			return err
		}
		artifact, artifactHash := newToken(artifactPrefix)
		if oldKey != "" {
			if err := q.NodeRevokedKeyInsert(ctx, db.NodeRevokedKeyInsertParams{NATSUserKey: oldKey, Node: jt.Node, RevokedAt: now}); err != nil {
				return err
			}
		}
		if err := q.NodeCredentialSet(ctx, db.NodeCredentialSetParams{Node: jt.Node, NATSUserKey: cred.PublicKey(),
			ArtifactTokenHash: artifactHash, EnrolledAt: now}); err != nil {
			return err
		}
		if err := q.NodeAddressSet(ctx, db.NodeAddressSetParams{Node: jt.Node, Host: jt.Host, PortFirst: jt.PortFirst, PortLast: jt.PortLast}); err != nil {
			return err
		}
		out = Enrolled{Node: jt.Node, Creds: creds, ArtifactToken: artifact}
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrInvalidToken) {
			return Enrolled{}, err
		}
		return Enrolled{}, fmt.Errorf("join: %w", err)
	}
	if oldKey != "" {
		if err := s.revokeKey(ctx, oldKey); err != nil {
			return Enrolled{}, err
		}
	}
	return out, nil
}

// Revoke ends node's credentials: its artifact token stops working at
// once, and its NATS user is refused by the servers and disconnected.
func (s *Service) Revoke(ctx context.Context, p *auth.Principal, node string) error {
	if p == nil || !p.PlatformAdmin() {
		return auth.ErrForbidden
	}
	now := s.now()
	c, err := db.New(s.pool).NodeCredentialRevoke(ctx, db.NodeCredentialRevokeParams{Node: node, Now: &now})
	if err != nil {
		return fmt.Errorf("revoke node %s: %w", node, err)
	}
	return s.revokeKey(ctx, c.NATSUserKey)
}

func (s *Service) revokeKey(ctx context.Context, key string) error {
	if err := s.auth.Revoke(key); err != nil {
		return err
	}
	if s.push == nil {
		return nil
	}
	if err := s.push(ctx); err != nil {
		return fmt.Errorf("revoke: %w", err)
	}
	return nil
}

// Restore revokes again, in the authority, every key revoked before this
// process started (the account JWT's revocation list lives in memory), and
// pushes the result. The control plane calls it at start.
func (s *Service) Restore(ctx context.Context) error {
	keys, err := db.New(s.pool).NodeRevokedKeyList(ctx)
	if err != nil {
		return fmt.Errorf("restore revocations: %w", err)
	}
	for _, k := range keys {
		if err := s.auth.Revoke(k.NATSUserKey); err != nil {
			return err
		}
	}
	if len(keys) == 0 || s.push == nil {
		return nil
	}
	return s.push(ctx)
}

// VerifyArtifactToken returns the node an artifact-download token belongs
// to; ErrInvalidToken for an unknown or revoked one.
func (s *Service) VerifyArtifactToken(ctx context.Context, token string) (node string, err error) {
	if !strings.HasPrefix(token, artifactPrefix) {
		return "", ErrInvalidToken
	}
	h := digest(token)
	c, err := db.New(s.pool).NodeCredentialByArtifactToken(ctx, h)
	if errors.Is(err, errdefs.ErrNotFound) {
		return "", ErrInvalidToken
	}
	if err != nil {
		return "", fmt.Errorf("verify artifact token: %w", err)
	}
	// The lookup is by digest; compare again in constant time all the same.
	if subtle.ConstantTimeCompare([]byte(c.ArtifactTokenHash), []byte(h)) != 1 {
		return "", ErrInvalidToken
	}
	return c.Node, nil
}

// newToken returns a random token with prefix and its digest.
func newToken(prefix string) (token, hash string) {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	token = prefix + base64.RawURLEncoding.EncodeToString(b)
	return token, digest(token)
}

func digest(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}
