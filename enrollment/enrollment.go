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
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/audit"
	"modelplane/auth"
	"modelplane/bus"
	"modelplane/db"
	"modelplane/errdefs"
	"modelplane/field"
	"modelplane/trust"
)

// Token prefixes: a join token and a node's artifact-download token, so a
// leaked one is recognisable.
const (
	joinPrefix     = "mpj_"
	artifactPrefix = "mpn_"
)

// MaxJoinTTL bounds how long a join token stays usable.
const MaxJoinTTL = 7 * 24 * time.Hour

// ErrInvalidToken means a join or artifact token is unknown, or an
// artifact token revoked (401).
var ErrInvalidToken = errors.New("invalid or expired token")

// Why a join token that exists did not enrol: its holder knows the token
// already, so telling them which costs nothing and saves a support call.
// Each wraps ErrInvalidToken.
var (
	ErrTokenUsed    = fmt.Errorf("join token already used: %w", ErrInvalidToken)
	ErrTokenExpired = fmt.Errorf("join token expired: %w", ErrInvalidToken)
	ErrTokenRevoked = fmt.Errorf("join token revoked: %w", ErrInvalidToken)
)

// ErrNotPlaced means a node asked for a blob that no version placed on it
// needs (403).
var ErrNotPlaced = errors.New("no version placed on this node needs this file")

// DefaultCredentialLifetime is how long a node's credentials (its NATS
// user and artifact token) stay valid after they were issued: twice the
// agent's default rotation interval (24 h), so an agent that rotates on
// time never sees one expire, and a copy taken from a node stops working
// within two days even if nobody revokes it. An agent down for longer
// enrolls again with a new join token.
const DefaultCredentialLifetime = 48 * time.Hour

// ErrCredentialsExpired means a node's artifact token was issued more than
// the credential lifetime ago (401): it enrolls again with a new join token.
var ErrCredentialsExpired = fmt.Errorf("node credentials expired, enroll again with a new join token: %w", ErrInvalidToken)

// DefaultRotationGrace is how long a node's previous credentials keep
// working after it rotates: enough for the agent to reconnect with the new
// ones and for downloads in flight to finish.
const DefaultRotationGrace = 10 * time.Minute

var nodeName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Pusher sends the authority's account JWT to the NATS servers (a
// bus.Authority.Push over a system-user connection); nil in tests that do
// not run NATS.
type Pusher func(ctx context.Context) error

// Service enrolls, rotates and revokes nodes.
type Service struct {
	pool  *pgxpool.Pool
	auth  *bus.Authority
	push  Pusher
	clock quartz.Clock
	grace time.Duration
	// lifetime is how long issued credentials stay valid.
	lifetime time.Duration
	// natsURLs and natsCA are what a node is told about NATS: the URLs to
	// connect to and the PEM of the CAs of the servers' certificates;
	// empty: the agent's own settings.
	natsURLs []string
	natsCA   string
	// pushMu makes one revocation list leave at a time.
	pushMu sync.Mutex
}

// New returns a Service minting credentials with a and pushing revocations
// with push; clock is what credentials and enrollment tokens expire on
// (quartz.NewReal() when nil).
func New(pool *pgxpool.Pool, a *bus.Authority, push Pusher, clock quartz.Clock) *Service {
	if clock == nil {
		clock = quartz.NewReal()
	}
	return &Service{pool: pool, auth: a, push: push, clock: clock, grace: DefaultRotationGrace, lifetime: DefaultCredentialLifetime}
}

// SetCredentialLifetime sets how long issued credentials stay valid (0:
// DefaultCredentialLifetime). Keep it above the agents' rotation interval
// (--rotate-every), or they expire before the agent rotates them.
func (s *Service) SetCredentialLifetime(d time.Duration) {
	if d <= 0 {
		d = DefaultCredentialLifetime
	}
	s.lifetime = d
}

// Advertise sets what enrolled nodes are told about NATS: the server URLs
// and the PEM of the CAs their certificates chain to.
func (s *Service) Advertise(urls []string, caPEM string) *Service {
	s.natsURLs, s.natsCA = urls, caPEM
	return s
}

// SetRotationGrace sets how long previous credentials work after a
// rotation (0: DefaultRotationGrace).
func (s *Service) SetRotationGrace(d time.Duration) {
	if d <= 0 {
		d = DefaultRotationGrace
	}
	s.grace = d
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

// JoinToken is a join token as platform admins list it: never the token
// itself, which is shown once, at its creation.
type JoinToken struct {
	ID        int64      `json:"id"`
	Node      string     `json:"node"`
	Host      string     `json:"host"`
	PortFirst int        `json:"port_first"`
	PortLast  int        `json:"port_last"`
	CreatedBy string     `json:"created_by"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt time.Time  `json:"expires_at"`
	UsedAt    *time.Time `json:"used_at,omitempty"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	// State is pending, used, expired or revoked.
	State string `json:"state" enum:"pending,used,expired,revoked"`
}

func joinTokenOf(t db.NodeJoinToken, now time.Time) JoinToken {
	out := JoinToken{ID: t.ID, Node: t.Node, Host: t.Host, PortFirst: int(t.PortFirst), PortLast: int(t.PortLast),
		CreatedBy: t.CreatedBy, CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt, UsedAt: t.UsedAt, RevokedAt: t.RevokedAt, State: "pending"}
	switch {
	case t.UsedAt != nil:
		out.State = "used"
	case t.RevokedAt != nil:
		out.State = "revoked"
	case !t.ExpiresAt.After(now):
		out.State = "expired"
	}
	return out
}

// CreateJoinToken makes a single-use token that enrolls req.Node until it
// expires. Only platform admins may.
func (s *Service) CreateJoinToken(ctx context.Context, p *auth.Principal, req JoinRequest) (token string, jt JoinToken, err error) {
	if p == nil || !p.PlatformAdmin() {
		return "", JoinToken{}, auth.ErrForbidden
	}
	if req.PortFirst == 0 && req.PortLast == 0 {
		req.PortFirst, req.PortLast = 1, 65535
	}
	var errs field.Errors
	if !nodeName.MatchString(req.Node) {
		errs.Add("node", "use up to 64 letters, digits, '-' and '_'")
	}
	if !trust.ValidHost(req.Host) {
		errs.Add("host", "must be a host name, an IP address, or a cluster pool's pod network (CIDR)")
	}
	if req.PortFirst < 1 || req.PortLast > 65535 || req.PortFirst > req.PortLast {
		errs.Add("port_first", "the port range must be within 1-65535")
	}
	if req.TTL <= 0 || req.TTL > MaxJoinTTL {
		errs.Add("ttl", "must be positive and at most %s", MaxJoinTTL)
	}
	if err := errs.Err(); err != nil {
		return "", JoinToken{}, err
	}
	token, hash := newToken(joinPrefix)
	now := s.clock.Now()
	err = db.InTx(ctx, s.pool, func(q *db.Queries) error {
		row, err := q.NodeJoinTokenInsert(ctx, db.NodeJoinTokenInsertParams{TokenHash: hash, Node: req.Node, Host: req.Host,
			PortFirst: int32(req.PortFirst), PortLast: int32(req.PortLast), CreatedBy: p.Actor(), CreatedAt: now, ExpiresAt: now.Add(req.TTL)})
		if err != nil {
			return err
		}
		jt = joinTokenOf(row, now)
		return audit.Record(ctx, q, p, audit.Entry{Action: "node.join_token.create", ObjectType: "node", ObjectName: req.Node, After: jt})
	})
	if err != nil {
		return "", JoinToken{}, fmt.Errorf("create join token: %w", err)
	}
	return token, jt, nil
}

// JoinTokens lists the newest join tokens (platform admins).
func (s *Service) JoinTokens(ctx context.Context, p *auth.Principal) ([]JoinToken, error) {
	if p == nil || !p.PlatformAdmin() {
		return nil, auth.ErrForbidden
	}
	rows, err := db.New(s.pool).NodeJoinTokenList(ctx, 200)
	if err != nil {
		return nil, fmt.Errorf("list join tokens: %w", err)
	}
	now := s.clock.Now()
	out := make([]JoinToken, 0, len(rows))
	for _, r := range rows {
		out = append(out, joinTokenOf(r, now))
	}
	return out, nil
}

// RevokeJoinToken makes an unused join token unusable; a used, revoked or
// unknown one is errdefs.ErrNotFound.
func (s *Service) RevokeJoinToken(ctx context.Context, p *auth.Principal, id int64) error {
	if p == nil || !p.PlatformAdmin() {
		return auth.ErrForbidden
	}
	now := s.clock.Now()
	err := db.InTx(ctx, s.pool, func(q *db.Queries) error {
		row, err := q.NodeJoinTokenRevoke(ctx, db.NodeJoinTokenRevokeParams{ID: id, Now: &now})
		if err != nil {
			return err
		}
		return audit.Record(ctx, q, p, audit.Entry{Action: "node.join_token.revoke", ObjectType: "node", ObjectName: row.Node, After: joinTokenOf(row, now)})
	})
	if err != nil {
		return fmt.Errorf("revoke join token %d: %w", id, err)
	}
	return nil
}

// Credentials are what a node gets when it enrolls or rotates: its NATS
// creds file, where NATS is, and its artifact-download token. It is the
// exchange's answer on the wire and what the agent stores (0600).
type Credentials struct {
	Node string `json:"node"`
	// NATSCreds is the node's NATS creds file (user JWT and seed).
	NATSCreds string `json:"nats_creds"`
	// NATSURLs and NATSCA are the servers and the PEM of their CAs, when
	// the control plane is configured to say (empty: the agent's own
	// --nats and --nats-ca).
	NATSURLs []string `json:"nats_urls,omitempty"`
	NATSCA   string   `json:"nats_ca,omitempty"`
	// ArtifactToken is the bearer token the node downloads artifacts with
	// and rotates its credentials with.
	ArtifactToken string    `json:"artifact_token"`
	IssuedAt      time.Time `json:"issued_at"`
}

// String keeps the secrets out of prints.
func (c Credentials) String() string { return "<secret>" }

// LogValue keeps the secrets out of structured logs.
func (c Credentials) LogValue() slog.Value { return slog.StringValue("<secret>") }

// mint makes node's new NATS user, which the servers refuse after the
// credential lifetime, and artifact token.
func (s *Service) mint(node string, now time.Time) (Credentials, bus.Credential, string, error) {
	cred, err := s.auth.Mint("node-"+node, bus.AgentPermissions(node), now.Add(s.lifetime))
	if err != nil {
		return Credentials{}, bus.Credential{}, "", err
	}
	file, err := cred.File()
	if err != nil {
		return Credentials{}, bus.Credential{}, "", err
	}
	artifact, artifactHash := newToken(artifactPrefix)
	return Credentials{Node: node, NATSCreds: string(file), NATSURLs: s.natsURLs, NATSCA: s.natsCA,
		ArtifactToken: artifact, IssuedAt: now}, cred, artifactHash, nil
}

// Join exchanges a join token for the node's credentials. The token works
// once; a node that enrolls again gets new credentials, and its old NATS
// users are revoked for good: kept in node_revoked_keys, whether or not
// the node was revoked before, so enrolling a revoked node again never
// lets its old credentials back in. addr is where the request came from,
// for the audit log.
func (s *Service) Join(ctx context.Context, token, addr string) (Credentials, error) {
	if !strings.HasPrefix(token, joinPrefix) {
		return Credentials{}, ErrInvalidToken
	}
	now := s.clock.Now()
	var out Credentials
	var oldKeys []string
	err := db.InTx(ctx, s.pool, func(q *db.Queries) error {
		jt, err := q.NodeJoinTokenTake(ctx, db.NodeJoinTokenTakeParams{TokenHash: digest(token), Now: &now})
		if errors.Is(err, errdefs.ErrNotFound) {
			return s.whyNot(ctx, q, token, now)
		}
		if err != nil {
			return err
		}
		old, err := q.NodeCredentialGetForUpdate(ctx, jt.Node)
		switch {
		case err == nil:
			// A revoked node's key too: its revocation was recorded only
			// on the row this enrollment overwrites.
			oldKeys = append(oldKeys, old.NATSUserKey)
			if old.PrevNatsUserKey != nil {
				oldKeys = append(oldKeys, *old.PrevNatsUserKey)
			}
		case !errors.Is(err, errdefs.ErrNotFound):
			return err
		}
		creds, cred, artifactHash, err := s.mint(jt.Node, now)
		if err != nil {
			return err
		}
		for _, k := range oldKeys {
			if err := q.NodeRevokedKeyInsert(ctx, db.NodeRevokedKeyInsertParams{NATSUserKey: k, Node: jt.Node, RevokedAt: now}); err != nil {
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
		out = creds
		return audit.Record(ctx, q, auth.Node(jt.Node), audit.Entry{Action: "node.enroll", ObjectType: "node", ObjectName: jt.Node,
			After: map[string]any{"join_token_id": jt.ID, "host": jt.Host, "port_first": jt.PortFirst, "port_last": jt.PortLast,
				"nats_user_key": cred.PublicKey(), "from": addr}})
	})
	if err != nil {
		if errors.Is(err, ErrInvalidToken) {
			return Credentials{}, err
		}
		return Credentials{}, fmt.Errorf("join: %w", err)
	}
	if len(oldKeys) > 0 {
		if err := s.pushRevocations(ctx); err != nil {
			return Credentials{}, err
		}
	}
	return out, nil
}

// whyNot says why a join token that could not be taken did not enrol.
func (s *Service) whyNot(ctx context.Context, q *db.Queries, token string, now time.Time) error {
	jt, err := q.NodeJoinTokenByHash(ctx, digest(token))
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		return ErrInvalidToken
	case err != nil:
		return err
	case jt.UsedAt != nil:
		return ErrTokenUsed
	case jt.RevokedAt != nil:
		return ErrTokenRevoked
	case !jt.ExpiresAt.After(now):
		return ErrTokenExpired
	}
	return ErrInvalidToken
}

// Rotate gives the node whose current artifact token this is new
// credentials. The previous ones keep working for the rotation grace, so
// the agent swaps its NATS connection and downloads without stopping a
// replica; Sweep revokes them afterwards. A previous set still in its grace
// when the node rotates again is revoked at once.
func (s *Service) Rotate(ctx context.Context, artifactToken string) (Credentials, error) {
	if !strings.HasPrefix(artifactToken, artifactPrefix) {
		return Credentials{}, ErrInvalidToken
	}
	now := s.clock.Now()
	var out Credentials
	var older string
	err := db.InTx(ctx, s.pool, func(q *db.Queries) error {
		c, err := q.NodeCredentialByCurrentArtifactToken(ctx, digest(artifactToken))
		if errors.Is(err, errdefs.ErrNotFound) {
			return ErrInvalidToken
		}
		if err != nil {
			return err
		}
		if s.expired(c, now) {
			return ErrCredentialsExpired
		}
		if c.PrevNatsUserKey != nil {
			older = *c.PrevNatsUserKey
			if err := q.NodeRevokedKeyInsert(ctx, db.NodeRevokedKeyInsertParams{NATSUserKey: older, Node: c.Node, RevokedAt: now}); err != nil {
				return err
			}
		}
		creds, cred, artifactHash, err := s.mint(c.Node, now)
		if err != nil {
			return err
		}
		until := now.Add(s.grace)
		if err := q.NodeCredentialRotate(ctx, db.NodeCredentialRotateParams{Node: c.Node, NATSUserKey: cred.PublicKey(),
			ArtifactTokenHash: artifactHash, PrevUntil: &until, Now: &now}); err != nil {
			return err
		}
		out = creds
		return audit.Record(ctx, q, auth.Node(c.Node), audit.Entry{Action: "node.rotate", ObjectType: "node", ObjectName: c.Node,
			After: map[string]any{"nats_user_key": cred.PublicKey(), "previous_valid_until": until}})
	})
	if err != nil {
		if errors.Is(err, ErrInvalidToken) {
			return Credentials{}, err
		}
		return Credentials{}, fmt.Errorf("rotate: %w", err)
	}
	if older != "" {
		if err := s.pushRevocations(ctx); err != nil {
			return Credentials{}, err
		}
	}
	return out, nil
}

// Sweep revokes the previous credentials of nodes whose rotation grace is
// over. The control plane runs it every few seconds (Sweeper).
func (s *Service) Sweep(ctx context.Context) (int, error) {
	now := s.clock.Now()
	n := 0
	err := db.InTx(ctx, s.pool, func(q *db.Queries) error {
		rows, err := q.NodeCredentialPrevExpired(ctx, &now)
		if err != nil {
			return err
		}
		for _, r := range rows {
			if err := q.NodeRevokedKeyInsert(ctx, db.NodeRevokedKeyInsertParams{NATSUserKey: *r.PrevNatsUserKey, Node: r.Node, RevokedAt: now}); err != nil {
				return err
			}
			if err := q.NodeCredentialPrevClear(ctx, r.Node); err != nil {
				return err
			}
		}
		n = len(rows)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("sweep rotated credentials: %w", err)
	}
	if n == 0 {
		return 0, nil
	}
	return n, s.pushRevocations(ctx)
}

// Revoke ends node's credentials: its artifact token stops working at
// once, and its NATS users (the current one and a previous one still in
// its rotation grace) are refused by the servers and disconnected.
func (s *Service) Revoke(ctx context.Context, p *auth.Principal, node string) error {
	if p == nil || !p.PlatformAdmin() {
		return auth.ErrForbidden
	}
	now := s.clock.Now()
	err := db.InTx(ctx, s.pool, func(q *db.Queries) error {
		c, err := q.NodeCredentialRevoke(ctx, db.NodeCredentialRevokeParams{Node: node, Now: &now})
		if err != nil {
			return err
		}
		// Kept for good, beside the row a later enrollment overwrites.
		if err := q.NodeRevokedKeyInsert(ctx, db.NodeRevokedKeyInsertParams{NATSUserKey: c.NATSUserKey, Node: node, RevokedAt: now}); err != nil {
			return err
		}
		if c.PrevNatsUserKey != nil {
			if err := q.NodeRevokedKeyInsert(ctx, db.NodeRevokedKeyInsertParams{NATSUserKey: *c.PrevNatsUserKey, Node: node, RevokedAt: now}); err != nil {
				return err
			}
			if err := q.NodeCredentialPrevClear(ctx, node); err != nil {
				return err
			}
		}
		return audit.Record(ctx, q, p, audit.Entry{Action: "node.revoke", ObjectType: "node", ObjectName: node,
			Before: map[string]any{"nats_user_key": c.NATSUserKey, "enrolled_at": c.EnrolledAt}})
	})
	if err != nil {
		return fmt.Errorf("revoke node %s: %w", node, err)
	}
	return s.pushRevocations(ctx)
}

// pushRevocations revokes, in the authority, every key PostgreSQL lists as
// revoked and pushes the account JWT. It reads the whole list each time, so
// a push by one control plane never drops what another revoked. A server
// that has not loaded the account (bus.ErrAccountNotLoaded) holds no
// connection of it to cut: that is no failure of the change that pushed,
// and the Repusher pushes until a push lands.
func (s *Service) pushRevocations(ctx context.Context) error {
	if err := s.pushRevocationsLanded(ctx); err != nil && !errors.Is(err, bus.ErrAccountNotLoaded) {
		return err
	}
	return nil
}

// pushRevocationsLanded is pushRevocations that also fails when a server
// skipped the push.
func (s *Service) pushRevocationsLanded(ctx context.Context) error {
	s.pushMu.Lock()
	defer s.pushMu.Unlock()
	keys, err := db.New(s.pool).NodeRevokedKeyList(ctx)
	if err != nil {
		return fmt.Errorf("revocations: %w", err)
	}
	for _, k := range keys {
		if err := s.auth.Revoke(k.NATSUserKey); err != nil {
			return err
		}
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
	if err := s.pushRevocations(ctx); err != nil {
		return fmt.Errorf("restore revocations: %w", err)
	}
	return nil
}

// VerifyArtifactToken returns the node an artifact-download token belongs
// to; ErrInvalidToken for an unknown or revoked one, or a previous one past
// its rotation grace.
func (s *Service) VerifyArtifactToken(ctx context.Context, token string) (node string, err error) {
	if !strings.HasPrefix(token, artifactPrefix) {
		return "", ErrInvalidToken
	}
	h := digest(token)
	now := s.clock.Now()
	c, err := db.New(s.pool).NodeCredentialByArtifactToken(ctx, db.NodeCredentialByArtifactTokenParams{ArtifactTokenHash: h, Now: &now})
	if errors.Is(err, errdefs.ErrNotFound) {
		return "", ErrInvalidToken
	}
	if err != nil {
		return "", fmt.Errorf("verify artifact token: %w", err)
	}
	// The lookup is by digest; compare again in constant time all the same.
	cur := subtle.ConstantTimeCompare([]byte(c.ArtifactTokenHash), []byte(h)) == 1
	prev := c.PrevArtifactTokenHash != nil && subtle.ConstantTimeCompare([]byte(*c.PrevArtifactTokenHash), []byte(h)) == 1
	if !cur && !prev {
		return "", ErrInvalidToken
	}
	if cur && s.expired(c, now) {
		return "", ErrCredentialsExpired
	}
	return c.Node, nil
}

// expired reports whether c's current credentials were issued (enrolled or
// last rotated) a lifetime or more before now.
func (s *Service) expired(c db.NodeCredential, now time.Time) bool {
	issued := c.EnrolledAt
	if c.RotatedAt != nil && c.RotatedAt.After(issued) {
		issued = *c.RotatedAt
	}
	return !now.Before(issued.Add(s.lifetime))
}

// AuthorizeArtifact returns the node whose artifact token this is when that
// node may read the blob digest: the manifest or a file of a version with
// a replica placed on it. ErrInvalidToken for a bad token, ErrNotPlaced for
// a blob the node has no business reading.
func (s *Service) AuthorizeArtifact(ctx context.Context, token, digest string) (node string, err error) {
	node, err = s.VerifyArtifactToken(ctx, token)
	if err != nil {
		return "", err
	}
	ok, err := db.New(s.pool).NodeArtifactAllowed(ctx, db.NodeArtifactAllowedParams{Node: node, Digest: digest})
	if err != nil {
		return "", fmt.Errorf("authorize artifact: %w", err)
	}
	if !ok {
		return node, ErrNotPlaced
	}
	return node, nil
}

// Node is a node's enrollment as platform admins see it.
type Node struct {
	Node       string     `json:"node"`
	EnrolledAt time.Time  `json:"enrolled_at"`
	RotatedAt  *time.Time `json:"rotated_at,omitempty"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
}

// Nodes lists every node that enrolled (platform admins).
func (s *Service) Nodes(ctx context.Context, p *auth.Principal) ([]Node, error) {
	if p == nil || !p.PlatformAdmin() {
		return nil, auth.ErrForbidden
	}
	rows, err := db.New(s.pool).NodeCredentialList(ctx)
	if err != nil {
		return nil, fmt.Errorf("list enrolled nodes: %w", err)
	}
	out := make([]Node, 0, len(rows))
	for _, r := range rows {
		out = append(out, Node{Node: r.Node, EnrolledAt: r.EnrolledAt, RotatedAt: r.RotatedAt, RevokedAt: r.RevokedAt})
	}
	return out, nil
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
