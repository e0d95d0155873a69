// Package tenant owns teams, their members and their API keys: who belongs to
// which team with which role. Authentication itself (verifying a key or a
// login) is package auth; tenant only manages the records. Every lookup is
// scoped to the caller's teams in SQL.
package tenant

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/audit"
	"modelplane/auth"
	"modelplane/busapi"
	"modelplane/db"
	"modelplane/field"
)

// Team is a group of people that owns models and endpoints.
type Team struct {
	ID          int64     `json:"-"`
	Name        string    `json:"name"`
	DisplayName string    `json:"display_name"`
	CreatedAt   time.Time `json:"created_at"`
}

// Member is a user's membership of a team.
type Member struct {
	Email string    `json:"email"`
	Name  string    `json:"name"`
	Role  auth.Role `json:"role"`
	Since time.Time `json:"since"`
}

// Key is an API key as listed; the secret is never kept.
type Key struct {
	ID         int64      `json:"id"`
	Name       string     `json:"name"`
	Prefix     string     `json:"prefix"`
	Team       string     `json:"team,omitempty"`
	Role       auth.Role  `json:"role"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
}

// Service manages teams, members and keys.
type Service struct {
	pool  *pgxpool.Pool
	clock quartz.Clock
}

// New returns a Service; clock is what key expiry is checked on
// (quartz.NewReal() when nil).
func New(pool *pgxpool.Pool, clock quartz.Clock) *Service {
	if clock == nil {
		clock = quartz.NewReal()
	}
	return &Service{pool: pool, clock: clock}
}

func teamOf(t db.Team) Team {
	return Team{ID: t.ID, Name: t.Name, DisplayName: t.DisplayName, CreatedAt: t.CreatedAt}
}

// CreateTeam creates a team; only platform admins may.
func (s *Service) CreateTeam(ctx context.Context, p *auth.Principal, name, displayName string) (Team, error) {
	if !p.PlatformAdmin() {
		return Team{}, auth.ErrForbidden
	}
	var errs field.Errors
	field.Name(&errs, "name", name)
	if len(displayName) > 200 {
		errs.Add("display_name", "must be at most 200 characters")
	}
	if err := errs.Err(); err != nil {
		return Team{}, err
	}
	var out Team
	err := db.InTx(ctx, s.pool, func(q *db.Queries) error {
		t, err := q.TeamCreate(ctx, db.TeamCreateParams{Name: name, DisplayName: displayName})
		if err != nil {
			return err
		}
		out = teamOf(t)
		return audit.Record(ctx, q, p, audit.Entry{TeamID: &t.ID, Action: "team.create", ObjectType: "team", ObjectName: name, After: out})
	})
	if err != nil {
		return Team{}, fmt.Errorf("create team: %w", err)
	}
	return out, nil
}

// Team returns a team the caller belongs to (platform admins: any team).
func (s *Service) Team(ctx context.Context, p *auth.Principal, name string) (Team, error) {
	all, ids := p.Scope()
	t, err := db.New(s.pool).TeamGetScoped(ctx, db.TeamGetScopedParams{Name: name, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return Team{}, fmt.Errorf("team %s: %w", name, err)
	}
	return teamOf(t), nil
}

// Teams lists the teams the caller can see, after the given id.
func (s *Service) Teams(ctx context.Context, p *auth.Principal, afterID int64, limit int) ([]Team, error) {
	all, ids := p.Scope()
	rows, err := db.New(s.pool).TeamListScoped(ctx, db.TeamListScopedParams{AllTeams: all, TeamIDs: ids, AfterID: afterID, Lim: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("list teams: %w", err)
	}
	out := make([]Team, len(rows))
	for i, r := range rows {
		out[i] = teamOf(r)
	}
	return out, nil
}

// Members lists a team's members.
func (s *Service) Members(ctx context.Context, p *auth.Principal, team string) ([]Member, error) {
	t, err := s.Team(ctx, p, team)
	if err != nil {
		return nil, err
	}
	rows, err := db.New(s.pool).TeamMemberListByTeam(ctx, t.ID)
	if err != nil {
		return nil, fmt.Errorf("list members: %w", err)
	}
	out := make([]Member, len(rows))
	for i, r := range rows {
		out[i] = Member{Email: r.Email, Name: r.Name, Role: auth.Role(r.Role), Since: r.CreatedAt}
	}
	return out, nil
}

// ErrUnknownUser means no user with that email has signed in yet; users are
// created by their first SSO login.
var ErrUnknownUser = errors.New("no user with that email has signed in yet")

// ErrAmbiguousEmail means more than one user has the email (they signed in
// through two issuers, or an address moved), so it names nobody: the caller
// must tell them apart another way. It comes with a validate error on the
// email field.
var ErrAmbiguousEmail = errors.New("more than one user has this email")

// ambiguous is ErrAmbiguousEmail with its field error, so the API answers
// 400 on the email and callers can still branch on the sentinel.
func ambiguous() error {
	return errors.Join(ErrAmbiguousEmail, field.Errors{{Field: "email", Message: ErrAmbiguousEmail.Error()}})
}

// ErrLastAdmin means the change would leave a team without an admin.
var ErrLastAdmin = errors.New("a team must keep at least one admin")

// SetMember adds a user to a team or changes their role; team admins only.
func (s *Service) SetMember(ctx context.Context, p *auth.Principal, team, email string, role auth.Role) (Member, error) {
	var errs field.Errors
	if !auth.ValidTeamRole(role) {
		errs.Add("role", "must be one of admin, engineer, viewer")
	}
	if email == "" {
		errs.Add("email", "is required")
	}
	if err := errs.Err(); err != nil {
		return Member{}, err
	}
	t, err := s.Team(ctx, p, team)
	if err != nil {
		return Member{}, err
	}
	if !p.CanAdmin(t.ID) {
		return Member{}, auth.ErrForbidden
	}
	var out Member
	err = db.InTx(ctx, s.pool, func(q *db.Queries) error {
		admins, err := s.lockTeam(ctx, q, p, t.ID)
		if err != nil {
			return err
		}
		users, err := q.UserListByEmail(ctx, email)
		if err != nil {
			return err
		}
		switch len(users) {
		case 0:
			return field.Errors{{Field: "email", Message: ErrUnknownUser.Error()}}
		case 1:
		default:
			return ambiguous()
		}
		u := users[0]
		m, err := q.TeamMemberUpsert(ctx, db.TeamMemberUpsertParams{TeamID: t.ID, UserID: u.ID, Role: string(role)})
		if err != nil {
			return err
		}
		if err := keepAdmin(ctx, q, t.ID, admins); err != nil {
			return err
		}
		if err := s.republishCreatorKeys(ctx, q, t.ID, u.ID); err != nil {
			return err
		}
		out = Member{Email: u.Email, Name: u.Name, Role: role, Since: m.CreatedAt}
		return audit.Record(ctx, q, p, audit.Entry{TeamID: &t.ID, Action: "member.set", ObjectType: "member", ObjectName: team + "/" + email, After: out})
	})
	if err != nil {
		return Member{}, fmt.Errorf("set member: %w", err)
	}
	return out, nil
}

// RemoveMember takes a user out of a team; team admins only.
func (s *Service) RemoveMember(ctx context.Context, p *auth.Principal, team, email string) error {
	t, err := s.Team(ctx, p, team)
	if err != nil {
		return err
	}
	if !p.CanAdmin(t.ID) {
		return auth.ErrForbidden
	}
	err = db.InTx(ctx, s.pool, func(q *db.Queries) error {
		admins, err := s.lockTeam(ctx, q, p, t.ID)
		if err != nil {
			return err
		}
		// By the team's own members: another user outside the team with
		// the same email does not block removing this one.
		ids, err := q.TeamMemberListByEmail(ctx, db.TeamMemberListByEmailParams{TeamID: t.ID, Email: email})
		if err != nil {
			return err
		}
		switch len(ids) {
		case 0:
			return db.ErrNotFound
		case 1:
		default:
			return ambiguous()
		}
		uid := ids[0]
		n, err := q.TeamMemberDelete(ctx, db.TeamMemberDeleteParams{TeamID: t.ID, UserID: uid})
		if err != nil {
			return err
		}
		if n == 0 {
			return db.ErrNotFound
		}
		if err := keepAdmin(ctx, q, t.ID, admins); err != nil {
			return err
		}
		if err := s.republishCreatorKeys(ctx, q, t.ID, uid); err != nil {
			return err
		}
		return audit.Record(ctx, q, p, audit.Entry{TeamID: &t.ID, Action: "member.remove", ObjectType: "member", ObjectName: team + "/" + email})
	})
	if err != nil {
		return fmt.Errorf("remove member: %w", err)
	}
	return nil
}

// lockTeam serialises membership changes of one team (so two admins demoting
// each other cannot both pass the last-admin check) and returns the team's
// admin count before the change.
func (s *Service) lockTeam(ctx context.Context, q *db.Queries, p *auth.Principal, teamID int64) (int64, error) {
	all, ids := p.Scope()
	if err := q.TeamLock(ctx, db.TeamLockParams{ID: teamID, AllTeams: all, TeamIDs: ids}); err != nil {
		return 0, err
	}
	return q.TeamAdminCount(ctx, teamID)
}

// keepAdmin refuses a change that leaves a team that had admins without one.
func keepAdmin(ctx context.Context, q *db.Queries, teamID, before int64) error {
	n, err := q.TeamAdminCount(ctx, teamID)
	if err != nil {
		return err
	}
	if before > 0 && n == 0 {
		return ErrLastAdmin
	}
	return nil
}

// KeyRequest asks for a new API key.
type KeyRequest struct {
	Name      string
	Team      string // empty for org-wide keys
	Role      auth.Role
	ExpiresAt *time.Time
}

// CreateKey creates an API key and returns it once, in clear, with its record.
// Team admins create keys for their team; platform admins also create
// org-wide platform_admin and finance keys (with no team).
func (s *Service) CreateKey(ctx context.Context, p *auth.Principal, r KeyRequest) (string, Key, error) {
	var errs field.Errors
	if r.Name == "" || len(r.Name) > 100 {
		errs.Add("name", "must be 1-100 characters")
	}
	orgWide := r.Role == auth.RolePlatformAdmin || r.Role == auth.RoleFinance
	switch {
	case orgWide && r.Team != "":
		errs.Add("team", "must be empty for an org-wide %s key", r.Role)
	case !orgWide && !auth.ValidTeamRole(r.Role):
		errs.Add("role", "must be one of admin, engineer, viewer, platform_admin, finance")
	case !orgWide && r.Team == "":
		errs.Add("team", "is required")
	}
	if r.ExpiresAt != nil && !r.ExpiresAt.After(s.clock.Now()) {
		errs.Add("expires_at", "must be in the future")
	}
	if err := errs.Err(); err != nil {
		return "", Key{}, err
	}
	var teamID *int64
	if orgWide {
		if !p.PlatformAdmin() {
			return "", Key{}, auth.ErrForbidden
		}
	} else {
		t, err := s.Team(ctx, p, r.Team)
		if err != nil {
			return "", Key{}, err
		}
		if !p.CanAdmin(t.ID) {
			return "", Key{}, auth.ErrForbidden
		}
		teamID = &t.ID
	}
	raw, prefix, err := auth.NewKey()
	if err != nil {
		return "", Key{}, err
	}
	// A key made through a key belongs to the human behind that key.
	var createdBy *int64
	if h := p.HumanID(); h != 0 {
		createdBy = &h
	}
	var out Key
	err = db.InTx(ctx, s.pool, func(q *db.Queries) error {
		k, err := q.APIKeyCreate(ctx, db.APIKeyCreateParams{TeamID: teamID, Name: r.Name, Prefix: prefix,
			Hash: auth.HashKey(raw), Role: string(r.Role), CreatedBy: createdBy, ExpiresAt: r.ExpiresAt})
		if err != nil {
			return err
		}
		out = Key{ID: k.ID, Name: k.Name, Prefix: k.Prefix, Team: r.Team, Role: r.Role, CreatedAt: k.CreatedAt, ExpiresAt: k.ExpiresAt}
		if err := publishKey(ctx, q, k, r.Team); err != nil {
			return err
		}
		return audit.Record(ctx, q, p, audit.Entry{TeamID: teamID, Action: "api_key.create", ObjectType: "api_key", ObjectName: prefix, After: out})
	})
	if err != nil {
		return "", Key{}, fmt.Errorf("create key: %w", err)
	}
	return raw, out, nil
}

// adminScope is the set of teams whose keys the caller manages.
func adminScope(p *auth.Principal) (bool, []int64) {
	ids := []int64{}
	for _, m := range p.Teams {
		if m.Role == auth.RoleAdmin {
			ids = append(ids, m.TeamID)
		}
	}
	return p.PlatformAdmin(), ids
}

func keyOf(k db.APIKey, team *string) Key {
	name := ""
	if team != nil {
		name = *team
	}
	return Key{ID: k.ID, Name: k.Name, Prefix: k.Prefix, Team: name, Role: auth.Role(k.Role), CreatedAt: k.CreatedAt,
		ExpiresAt: k.ExpiresAt, LastUsedAt: k.LastUsedAt, RevokedAt: k.RevokedAt}
}

// Keys lists the keys the caller administers: its teams' keys, and for
// platform admins every key including org-wide ones.
func (s *Service) Keys(ctx context.Context, p *auth.Principal, afterID int64, limit int) ([]Key, error) {
	all, ids := adminScope(p)
	rows, err := db.New(s.pool).APIKeyListByTeam(ctx, db.APIKeyListByTeamParams{AllTeams: all, TeamIDs: ids, AfterID: afterID, Lim: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	out := make([]Key, len(rows))
	for i, r := range rows {
		out[i] = keyOf(db.APIKey{ID: r.ID, Name: r.Name, Prefix: r.Prefix, Role: r.Role, CreatedAt: r.CreatedAt,
			ExpiresAt: r.ExpiresAt, LastUsedAt: r.LastUsedAt, RevokedAt: r.RevokedAt}, r.TeamName)
	}
	return out, nil
}

// RevokeKey revokes a key. A key of a team the caller cannot see is not
// found; one it sees but does not administer is forbidden.
func (s *Service) RevokeKey(ctx context.Context, p *auth.Principal, id int64) (Key, error) {
	all, ids := p.Scope()
	var out Key
	err := db.InTx(ctx, s.pool, func(q *db.Queries) error {
		k, err := q.APIKeyGet(ctx, db.APIKeyGetParams{ID: id, AllTeams: all, TeamIDs: ids})
		if err != nil {
			return err
		}
		if !p.PlatformAdmin() && (k.TeamID == nil || !p.CanAdmin(*k.TeamID)) {
			return auth.ErrForbidden
		}
		out = keyOf(db.APIKey{ID: k.ID, Name: k.Name, Prefix: k.Prefix, Role: k.Role, CreatedAt: k.CreatedAt,
			ExpiresAt: k.ExpiresAt, LastUsedAt: k.LastUsedAt, RevokedAt: k.RevokedAt}, k.TeamName)
		if k.RevokedAt != nil {
			return nil // already revoked: revoking again changes nothing
		}
		r, err := q.APIKeyRevoke(ctx, db.APIKeyRevokeParams{ID: id, AllTeams: all, TeamIDs: ids})
		if err != nil {
			return err
		}
		out.RevokedAt = r.RevokedAt
		if err := unpublishKey(ctx, q, r.Prefix); err != nil {
			return err
		}
		return audit.Record(ctx, q, p, audit.Entry{TeamID: r.TeamID, Action: "api_key.revoke", ObjectType: "api_key", ObjectName: r.Prefix, After: out})
	})
	if err != nil {
		return Key{}, fmt.Errorf("revoke key: %w", err)
	}
	return out, nil
}

// publishKey writes the key's digest for the gateways (busapi.BucketKeys) to
// the outbox, in the caller's transaction.
func publishKey(ctx context.Context, q *db.Queries, k db.APIKey, team string) error {
	payload, err := json.Marshal(busapi.KeyEntry{Prefix: k.Prefix, SHA256: hex.EncodeToString(k.Hash), Team: team,
		Role: k.Role, ExpiresAt: k.ExpiresAt, Name: k.Name})
	if err != nil {
		return err
	}
	_, err = q.OutboxInsert(ctx, db.OutboxInsertParams{Subject: busapi.KVSubject(busapi.BucketKeys, k.Prefix), Payload: payload})
	return err
}

// unpublishKey deletes the key's digest from the gateways: the relay turns a
// JSON null into a KV delete.
func unpublishKey(ctx context.Context, q *db.Queries, prefix string) error {
	_, err := q.OutboxInsert(ctx, db.OutboxInsertParams{Subject: busapi.KVSubject(busapi.BucketKeys, prefix), Payload: []byte("null")})
	return err
}

// republishCreatorKeys brings the gateways' copy of the keys userID made for
// teamID in line with the user's membership of it, in the caller's
// transaction: a key its creator can no longer mint (creator_holds, the
// rule auth.Keys applies) has its entry deleted, one the creator can mint
// again is published again. Gateways authenticate from that copy alone, so
// without this a removed or demoted member's keys kept working there.
func (s *Service) republishCreatorKeys(ctx context.Context, q *db.Queries, teamID, userID int64) error {
	rows, err := q.APIKeyListActiveByCreator(ctx, db.APIKeyListActiveByCreatorParams{TeamID: &teamID, CreatedBy: &userID, Now: s.clock.Now()})
	if err != nil {
		return fmt.Errorf("republish keys: %w", err)
	}
	for _, r := range rows {
		if !r.CreatorHolds {
			if err := unpublishKey(ctx, q, r.Prefix); err != nil {
				return err
			}
			continue
		}
		k := db.APIKey{ID: r.ID, Name: r.Name, Prefix: r.Prefix, Hash: r.Hash, Role: r.Role, ExpiresAt: r.ExpiresAt}
		if err := publishKey(ctx, q, k, r.TeamName); err != nil {
			return err
		}
	}
	return nil
}

// PublishKeys writes the digest of every active key to the outbox again, so
// that keys created before gateways authenticated from NATS (or whose entry
// was lost with a bucket) reach them, and deletes the entry of every active
// key whose creator can no longer mint it (creator_holds): platform roles
// change in SQL, outside any method here, so this is where a former
// platform admin's keys leave the gateways. It is idempotent: gateways
// treat an entry as the key's current state, and republishing one changes
// nothing. The control plane calls it once at start; it returns how many
// keys it published.
func (s *Service) PublishKeys(ctx context.Context) (int, error) {
	n := 0
	err := db.InTx(ctx, s.pool, func(q *db.Queries) error {
		rows, err := q.APIKeyListActive(ctx, s.clock.Now())
		if err != nil {
			return err
		}
		n = 0
		for _, r := range rows {
			if !r.CreatorHolds {
				if err := unpublishKey(ctx, q, r.Prefix); err != nil {
					return err
				}
				continue
			}
			team := ""
			if r.TeamName != nil {
				team = *r.TeamName
			}
			k := db.APIKey{ID: r.ID, Name: r.Name, Prefix: r.Prefix, Hash: r.Hash, Role: r.Role, ExpiresAt: r.ExpiresAt}
			if err := publishKey(ctx, q, k, team); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("publish keys: %w", err)
	}
	return n, nil
}
