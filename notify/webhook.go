package notify

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/audit"
	"modelplane/auth"
	"modelplane/busapi"
	"modelplane/db"
	"modelplane/egress"
	"modelplane/field"
)

// Webhook is a team's webhook as its admins see it; the secret is shown
// only when created or rotated.
type Webhook struct {
	ID         int64     `json:"id"`
	Team       string    `json:"team"`
	URL        string    `json:"url"`
	EventTypes []string  `json:"event_types"`
	CreatedBy  string    `json:"created_by"`
	CreatedAt  time.Time `json:"created_at"`
}

// WebhookSpec is a webhook to create.
type WebhookSpec struct {
	Team       string
	URL        string
	EventTypes []string
}

// Delivery is one delivery as the delivery log shows it.
type Delivery struct {
	ID         int64        `json:"id"`
	WebhookID  int64        `json:"webhook_id,omitempty"`
	EventType  string       `json:"event_type"`
	Event      WebhookEvent `json:"event"`
	State      string       `json:"state" enum:"pending,delivered,dead,skipped"`
	Attempts   int          `json:"attempts"`
	NextAt     time.Time    `json:"next_at"`
	LastStatus int          `json:"last_status"`
	LastError  string       `json:"last_error"`
	CreatedAt  time.Time    `json:"created_at"`
	UpdatedAt  time.Time    `json:"updated_at"`
}

// WebhookEvent is the event a delivery carries: a busapi.Event, named
// apart for the API's schema.
type WebhookEvent busapi.Event

// Webhooks is the team-scoped management of webhooks and their deliveries.
type Webhooks struct {
	pool   *pgxpool.Pool
	keys   *Keyring
	egress *egress.Policy
	clock  quartz.Clock
	// sent is called after a redelivery was queued (the sender's Wake).
	sent func()
}

// NewWebhooks returns Webhooks; sent may be nil.
func NewWebhooks(pool *pgxpool.Pool, keys *Keyring, policy *egress.Policy, clock quartz.Clock, sent func()) *Webhooks {
	if sent == nil {
		sent = func() {}
	}
	return &Webhooks{pool: pool, keys: keys, egress: policy, clock: clock, sent: sent}
}

// newSecret returns a webhook signing secret.
func newSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return "whsec_" + base64.RawURLEncoding.EncodeToString(b)
}

// Create adds a webhook to a team the caller administers and returns it
// with its signing secret, which is not shown again.
func (w *Webhooks) Create(ctx context.Context, p *auth.Principal, s WebhookSpec) (Webhook, string, error) {
	var errs field.Errors
	if err := w.egress.CheckURL(s.URL); err != nil {
		errs.Add("url", "%v (the operator's egress policy, MP_EGRESS_HOSTS)", err)
	}
	if len(s.EventTypes) == 0 {
		errs.Add("event_types", "must name at least one event type, or \"*\"")
	}
	for i, t := range s.EventTypes {
		if t != "*" && !slices.Contains(Types, t) {
			errs.Add(fmt.Sprintf("event_types[%d]", i), "must be \"*\" or one of %v", Types)
		}
	}
	if err := errs.Err(); err != nil {
		return Webhook{}, "", err
	}
	secret := newSecret()
	sealed, keyID, err := w.keys.Seal([]byte(secret))
	if err != nil {
		return Webhook{}, "", fmt.Errorf("webhook secret: %w", err)
	}
	all, ids := p.Scope()
	var out Webhook
	err = db.InTx(ctx, w.pool, func(q *db.Queries) error {
		t, err := q.TeamGetScoped(ctx, db.TeamGetScopedParams{Name: s.Team, AllTeams: all, TeamIDs: ids})
		if err != nil {
			return err
		}
		if !p.CanAdmin(t.ID) {
			return auth.ErrForbidden
		}
		r, err := q.WebhookCreate(ctx, db.WebhookCreateParams{TeamID: t.ID, Url: s.URL, EventTypes: s.EventTypes, Secret: sealed, KeyID: keyID, CreatedBy: p.Actor()})
		if err != nil {
			return err
		}
		out = Webhook{ID: r.ID, Team: t.Name, URL: s.URL, EventTypes: s.EventTypes, CreatedBy: p.Actor(), CreatedAt: r.CreatedAt.UTC()}
		return audit.Record(ctx, q, p, audit.Entry{TeamID: &t.ID, Action: "webhook.create", ObjectType: "webhook", ObjectName: fmt.Sprint(r.ID), After: out})
	})
	if err != nil {
		return Webhook{}, "", err
	}
	return out, secret, nil
}

// List returns the webhooks of the caller's teams.
func (w *Webhooks) List(ctx context.Context, p *auth.Principal) ([]Webhook, error) {
	all, ids := p.Scope()
	rows, err := db.New(w.pool).WebhookListScoped(ctx, db.WebhookListScopedParams{AllTeams: all, TeamIDs: ids})
	if err != nil {
		return nil, err
	}
	out := make([]Webhook, len(rows))
	for i, r := range rows {
		out[i] = Webhook{ID: r.ID, Team: r.Team, URL: r.Url, EventTypes: r.EventTypes, CreatedBy: r.CreatedBy, CreatedAt: r.CreatedAt.UTC()}
	}
	return out, nil
}

// Get returns a webhook of the caller's teams.
func (w *Webhooks) Get(ctx context.Context, p *auth.Principal, id int64) (Webhook, error) {
	all, ids := p.Scope()
	r, err := db.New(w.pool).WebhookGetScoped(ctx, db.WebhookGetScopedParams{ID: id, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return Webhook{}, err
	}
	return Webhook{ID: r.ID, Team: r.Team, URL: r.Url, EventTypes: r.EventTypes, CreatedBy: r.CreatedBy, CreatedAt: r.CreatedAt.UTC()}, nil
}

// forAdmin loads a webhook of a team the caller administers.
func forAdmin(ctx context.Context, q *db.Queries, p *auth.Principal, id int64) (db.WebhookGetScopedRow, error) {
	all, ids := p.Scope()
	r, err := q.WebhookGetScoped(ctx, db.WebhookGetScopedParams{ID: id, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return r, err
	}
	if !p.CanAdmin(r.TeamID) {
		return r, auth.ErrForbidden
	}
	return r, nil
}

// Delete removes a webhook and its deliveries.
func (w *Webhooks) Delete(ctx context.Context, p *auth.Principal, id int64) error {
	return db.InTx(ctx, w.pool, func(q *db.Queries) error {
		r, err := forAdmin(ctx, q, p, id)
		if err != nil {
			return err
		}
		all, ids := p.Scope()
		if _, err := q.WebhookDeleteScoped(ctx, db.WebhookDeleteScopedParams{ID: id, AllTeams: all, TeamIDs: ids}); err != nil {
			return err
		}
		return audit.Record(ctx, q, p, audit.Entry{TeamID: &r.TeamID, Action: "webhook.delete", ObjectType: "webhook", ObjectName: fmt.Sprint(id)})
	})
}

// RotateSecret gives a webhook a new signing secret and returns it; the
// old one signs nothing from then on.
func (w *Webhooks) RotateSecret(ctx context.Context, p *auth.Principal, id int64) (string, error) {
	secret := newSecret()
	sealed, keyID, err := w.keys.Seal([]byte(secret))
	if err != nil {
		return "", fmt.Errorf("webhook secret: %w", err)
	}
	err = db.InTx(ctx, w.pool, func(q *db.Queries) error {
		r, err := forAdmin(ctx, q, p, id)
		if err != nil {
			return err
		}
		if err := q.WebhookSetSecret(ctx, db.WebhookSetSecretParams{ID: id, Secret: sealed, KeyID: keyID}); err != nil {
			return err
		}
		return audit.Record(ctx, q, p, audit.Entry{TeamID: &r.TeamID, Action: "webhook.rotate_secret", ObjectType: "webhook", ObjectName: fmt.Sprint(id)})
	})
	if err != nil {
		return "", err
	}
	return secret, nil
}

// Deliveries returns a webhook's last deliveries, newest first.
func (w *Webhooks) Deliveries(ctx context.Context, p *auth.Principal, id int64, limit int) ([]Delivery, error) {
	q := db.New(w.pool)
	all, ids := p.Scope()
	if _, err := q.WebhookGetScoped(ctx, db.WebhookGetScopedParams{ID: id, AllTeams: all, TeamIDs: ids}); err != nil {
		return nil, err
	}
	rows, err := q.DeliveryListScoped(ctx, db.DeliveryListScopedParams{WebhookID: id, AllTeams: all, TeamIDs: ids, Lim: int32(min(max(limit, 1), 500))})
	if err != nil {
		return nil, err
	}
	out := make([]Delivery, len(rows))
	for i, r := range rows {
		d := Delivery{ID: r.ID, WebhookID: id, EventType: r.EventType, State: r.State, Attempts: int(r.Attempts), NextAt: r.NextAt.UTC(),
			LastStatus: int(r.LastStatus), LastError: r.LastError, CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC()}
		_ = json.Unmarshal(r.Event, &d.Event)
		out[i] = d
	}
	return out, nil
}

// Redeliver sends a dead (or delivered) delivery of a webhook of a team
// the caller administers again, from its first try.
func (w *Webhooks) Redeliver(ctx context.Context, p *auth.Principal, webhookID, deliveryID int64) error {
	q := db.New(w.pool)
	r, err := forAdmin(ctx, q, p, webhookID)
	if err != nil {
		return err
	}
	all, ids := p.Scope()
	n, err := q.DeliveryRedeliverScoped(ctx, db.DeliveryRedeliverScopedParams{ID: deliveryID, WebhookID: &r.ID, Now: w.clock.Now(), AllTeams: all, TeamIDs: ids})
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("delivery %d: %w (or not dead nor delivered)", deliveryID, db.ErrNotFound)
	}
	w.sent()
	return nil
}

// ResealAll re-seals every webhook secret sealed with an older server key
// with the current one, so the old key can then be dropped from
// MP_SECRET_KEY. It returns how many it re-sealed.
func ResealAll(ctx context.Context, pool *pgxpool.Pool, keys *Keyring) (int, error) {
	cur := keys.CurrentID()
	if cur == "" {
		return 0, nil
	}
	q := db.New(pool)
	rows, err := q.WebhookListSealedWithOther(ctx, cur)
	if err != nil {
		return 0, err
	}
	for _, r := range rows {
		secret, err := keys.Open(r.Secret, r.KeyID)
		if err != nil {
			return 0, fmt.Errorf("webhook %d: %w", r.ID, err)
		}
		sealed, keyID, err := keys.Seal(secret)
		if err != nil {
			return 0, err
		}
		if err := q.WebhookSetSecret(ctx, db.WebhookSetSecretParams{ID: r.ID, Secret: sealed, KeyID: keyID}); err != nil {
			return 0, err
		}
	}
	return len(rows), nil
}
