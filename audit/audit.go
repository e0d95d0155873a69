// Package audit records every change (who, what, object, before and after,
// when, through which credential) in the same transaction as the change, and
// lists the records a caller may see. It never decides whether a change is
// allowed.
package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/auth"
	"modelplane/db"
)

// Entry describes one change.
type Entry struct {
	TeamID     *int64 // nil for platform-wide objects
	Action     string // e.g. "model.create"
	ObjectType string // e.g. "model"
	ObjectName string
	Before     any // nil when created
	After      any // nil when deleted
}

// Record writes e within the caller's transaction q.
func Record(ctx context.Context, q *db.Queries, p *auth.Principal, e Entry) error {
	before, err := marshal(e.Before)
	if err != nil {
		return err
	}
	after, err := marshal(e.After)
	if err != nil {
		return err
	}
	err = q.AuditInsert(ctx, db.AuditInsertParams{
		TeamID: e.TeamID, Actor: p.Actor(), ActorUserID: p.ActorUserID(), ActorKeyID: p.ActorKeyID(), Via: via(p), Action: e.Action,
		ObjectType: e.ObjectType, ObjectName: e.ObjectName, Before: before, After: after,
	})
	if err != nil {
		return fmt.Errorf("audit %s: %w", e.Action, err)
	}
	return nil
}

func via(p *auth.Principal) string {
	if p.KeyID != 0 {
		return "api-key " + p.Name
	}
	return p.Via
}

func marshal(v any) ([]byte, error) {
	if v == nil {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	return b, nil
}

// Row is one audit log record as callers see it.
type Row struct {
	ID    int64     `json:"id"`
	At    time.Time `json:"at"`
	Team  string    `json:"team,omitempty"`
	Actor string    `json:"actor"`
	// ActorEmail is the person behind the actor: the user, or the creator
	// of the API key used; "" for the platform itself or an unknown person.
	ActorEmail string `json:"actor_email,omitempty"`
	// Who is how people read the actor: the person, with the key's
	// prefix when a key was used ("search-admin@example.com via
	// mpk_2939ab12cd34"), else the actor.
	Who        string          `json:"who"`
	Via        string          `json:"via"`
	Action     string          `json:"action"`
	ObjectType string          `json:"object_type"`
	ObjectName string          `json:"object_name"`
	Before     json.RawMessage `json:"before,omitempty"`
	After      json.RawMessage `json:"after,omitempty"`
}

// Filter narrows a listing; zero fields match everything.
type Filter struct {
	Action     string
	ObjectType string
	Actor      string
	BeforeID   int64 // page: records older than this id
	Limit      int
}

// Log reads the audit log. Writing stays Record's, inside each change's own
// transaction; reading needs no transaction, so Log holds the pool and the
// HTTP layer lists records without touching db.
type Log struct {
	pool *pgxpool.Pool
}

// NewLog returns the audit log stored in pool.
func NewLog(pool *pgxpool.Pool) *Log { return &Log{pool: pool} }

// List returns the newest records visible to p: team admins see their teams,
// platform admins everything; others see nothing (auth.ErrForbidden).
func (l *Log) List(ctx context.Context, p *auth.Principal, f Filter) ([]Row, error) {
	q := db.New(l.pool)
	all := p.PlatformAdmin()
	ids := []int64{}
	for _, m := range p.Teams {
		if m.Role == auth.RoleAdmin {
			ids = append(ids, m.TeamID)
		}
	}
	if !all && len(ids) == 0 {
		return nil, auth.ErrForbidden
	}
	if f.Limit <= 0 {
		f.Limit = 100
	}
	f.Limit = min(f.Limit, 501) // callers ask for one more than a page of 500
	rows, err := q.AuditList(ctx, db.AuditListParams{
		AllTeams: all, TeamIDs: ids, Action: f.Action, ObjectType: f.ObjectType,
		Actor: f.Actor, BeforeID: f.BeforeID, Lim: int32(f.Limit),
	})
	if err != nil {
		return nil, fmt.Errorf("list audit: %w", err)
	}
	out := make([]Row, len(rows))
	for i, r := range rows {
		out[i] = Row{ID: r.ID, At: r.At, Team: r.TeamName, Actor: r.Actor, ActorEmail: r.ActorEmail, Who: who(r.Actor, r.ActorEmail),
			Via: r.Via, Action: r.Action, ObjectType: r.ObjectType, ObjectName: r.ObjectName, Before: r.Before, After: r.After}
	}
	return out, nil
}

// who names an actor for people: the person behind a key with the key.
func who(actor, email string) string {
	if email == "" || email == actor {
		return actor
	}
	return email + " via " + actor
}
