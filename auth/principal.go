package auth

import (
	"errors"
	"fmt"
)

// Role is a member's role in a team, or a key's role.
type Role string

// Team roles, weakest first, and the two org-wide roles.
const (
	RoleViewer        Role = "viewer"
	RoleEngineer      Role = "engineer"
	RoleAdmin         Role = "admin"
	RolePlatformAdmin Role = "platform_admin"
	RoleFinance       Role = "finance"
)

// ValidTeamRole reports whether r is a role a team member or team key may hold.
func ValidTeamRole(r Role) bool {
	return r == RoleViewer || r == RoleEngineer || r == RoleAdmin
}

// ErrUnauthenticated means the credentials are missing, malformed, unknown,
// expired or revoked. Callers answer 401 and never say which.
var ErrUnauthenticated = errors.New("unauthenticated")

// ErrForbidden means the caller is known but its role does not allow the action
// on an object it can see.
var ErrForbidden = errors.New("forbidden")

// Membership is one team the principal belongs to.
type Membership struct {
	TeamID int64
	Team   string
	Role   Role
}

// Principal is an authenticated caller: a signed-in user, an OIDC bearer token
// or an API key.
type Principal struct {
	UserID int64 // 0 for API keys
	KeyID  int64 // 0 unless authenticated by API key
	// OwnerUserID is, for an API key, the user who created it (the human
	// acting through the key); 0 for users and for keys with no known
	// creator (made before users existed, or the creator was deleted).
	OwnerUserID int64
	// OwnerEmail is that user's email, for Who; "" when unknown.
	OwnerEmail   string
	Name         string // email for users, key prefix for keys
	Via          string // "session", "oidc-token" or "api-key"
	PlatformRole Role   // "", RolePlatformAdmin or RoleFinance
	Teams        []Membership
}

// ViaSystem is the Via of System's principals: the platform acting on its
// own, not for any caller.
const ViaSystem = "system"

// System returns the principal the platform itself acts as, named actor in
// the audit log (for example "rollout-controller"). It may read and change
// every team's objects, as a platform admin may: its Scope is all teams.
//
// It is for background loops (the rollout controller, the drift and budget
// checks, retention) and internal calls that act for no caller (demo
// seeding, benchmarks). A request path never uses it: there the principal is
// the one auth built from the caller's credentials, so that team scoping in
// SQL holds. It is the one spelling of system access; the scope test in db
// fails on a hand-built principal or an AllTeams: true outside this package.
func System(actor string) *Principal {
	return &Principal{Name: actor, Via: ViaSystem, PlatformRole: RolePlatformAdmin}
}

// Node is the principal of a node agent acting on its own enrollment
// (exchanging its join token, rotating its credentials), as the audit log
// records it. It holds no role and no team: it may do nothing else.
func Node(node string) *Principal {
	return &Principal{Name: "node:" + node, Via: "node-credential"}
}

// PlatformAdmin reports whether the principal administers the whole platform.
func (p *Principal) PlatformAdmin() bool { return p.PlatformRole == RolePlatformAdmin }

// Finance reports whether the principal reads chargeback for every team.
func (p *Principal) Finance() bool { return p.PlatformRole == RoleFinance || p.PlatformAdmin() }

// Scope returns the teams whose objects the principal may see, in the form the
// team-scoped queries take: all teams, or the listed ids.
func (p *Principal) Scope() (all bool, teamIDs []int64) {
	if p.PlatformAdmin() {
		return true, []int64{}
	}
	ids := make([]int64, 0, len(p.Teams))
	for _, m := range p.Teams {
		ids = append(ids, m.TeamID)
	}
	return false, ids
}

// RoleIn returns the principal's role in a team, or "" when it is not a member.
func (p *Principal) RoleIn(teamID int64) Role {
	for _, m := range p.Teams {
		if m.TeamID == teamID {
			return m.Role
		}
	}
	return ""
}

// Membership returns the principal's membership of the named team.
func (p *Principal) Membership(team string) (Membership, bool) {
	for _, m := range p.Teams {
		if m.Team == team {
			return m, true
		}
	}
	return Membership{}, false
}

// CanWrite reports whether the principal may change a team's models and
// endpoints: engineers, admins and platform admins.
func (p *Principal) CanWrite(teamID int64) bool {
	r := p.RoleIn(teamID)
	return p.PlatformAdmin() || r == RoleAdmin || r == RoleEngineer
}

// CanAdmin reports whether the principal may manage a team's members and keys.
func (p *Principal) CanAdmin(teamID int64) bool {
	return p.PlatformAdmin() || p.RoleIn(teamID) == RoleAdmin
}

// HumanID is the user behind the principal: the user itself, or the
// creator of the API key it authenticated with; 0 when nobody is known.
// Separation-of-duty checks (a rollout's four eyes) compare these, so one
// person cannot act once in the portal and once through a key of theirs.
func (p *Principal) HumanID() int64 {
	if p.UserID != 0 {
		return p.UserID
	}
	return p.OwnerUserID
}

// Actor is how the audit log labels the principal: an email, a key prefix
// or a system actor. It is for people to read, never to compare: emails
// change and can be shared; ActorUserID, ActorKeyID and Namespace say who.
func (p *Principal) Actor() string { return p.Name }

// Who names the principal where people read what it did (a rollout's
// timeline and messages, who registered a version): a key as the person
// behind it with the key's prefix ("search-admin@example.com via
// mpk_2939ab12cd34"), anyone else as Actor. Like Actor it is for reading,
// never for comparing.
func (p *Principal) Who() string {
	if p.KeyID != 0 && p.OwnerEmail != "" {
		return p.OwnerEmail + " via " + p.Name
	}
	return p.Name
}

// ActorUserID is the person who acted (HumanID), as the nullable id the
// audit log and created_by columns store; nil when nobody is known.
func (p *Principal) ActorUserID() *int64 {
	if h := p.HumanID(); h != 0 {
		return &h
	}
	return nil
}

// ActorKeyID is the API key the principal authenticated with, nil for
// sessions, bearer tokens and the system.
func (p *Principal) ActorKeyID() *int64 {
	if p.KeyID != 0 {
		id := p.KeyID
		return &id
	}
	return nil
}

// Namespace names the principal for per-caller records (idempotency keys):
// by key id or user id, never by email or key prefix, which two callers can
// share.
func (p *Principal) Namespace() string {
	switch {
	case p.KeyID != 0:
		return fmt.Sprintf("key:%d", p.KeyID)
	case p.UserID != 0:
		return fmt.Sprintf("user:%d", p.UserID)
	default:
		return p.Via + ":" + p.Name
	}
}
