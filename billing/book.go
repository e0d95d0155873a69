package billing

import (
	"context"
	"fmt"
	"regexp"
	"time"

	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/audit"
	"modelplane/auth"
	"modelplane/db"
	"modelplane/field"
)

// RateLead is how far ahead of now a new rate must take effect. The ingest
// consumer reloads its rate table every minute (ingest.UsageConfig
// RateRefresh) and prices a second when it stores it, so a rate entered
// for a time already past, or due before every consumer has reloaded, would
// price some seconds after its effective time at the old rate and could
// reprice seconds not yet stored from before it. Five minutes covers the
// refresh with room to spare.
const RateLead = 5 * time.Minute

// Entry is one row of the rate history.
type Entry struct {
	ID            int64     `json:"id"`
	GPUType       string    `json:"gpu_type"`
	Profile       string    `json:"profile"`
	UUSDPerHour   int64     `json:"uusd_per_hour"`
	EffectiveFrom time.Time `json:"effective_from"`
	CreatedBy     string    `json:"created_by"`
	CreatedAt     time.Time `json:"created_at"`
}

// Book keeps the rate history in PostgreSQL: every rate ever entered, none
// ever changed or deleted, so any past bill can be explained.
type Book struct {
	pool  *pgxpool.Pool
	clock quartz.Clock
}

// NewBook returns a Book; clock is what a new rate's lead is checked on
// (quartz.NewReal() when nil).
func NewBook(pool *pgxpool.Pool, clock quartz.Clock) *Book {
	if clock == nil {
		clock = quartz.NewReal()
	}
	return &Book{pool: pool, clock: clock}
}

func entryOf(r db.CostRate) Entry {
	return Entry{ID: r.ID, GPUType: r.GPUType, Profile: r.Profile, UUSDPerHour: r.UusdPerHour,
		EffectiveFrom: r.EffectiveFrom.UTC(), CreatedBy: r.CreatedBy, CreatedAt: r.CreatedAt.UTC()}
}

// List returns the whole history, by GPU type, profile and effective time.
// Rates are prices, not team data: anyone signed in may read them (teams
// weigh right-sizing advice with them).
func (b *Book) List(ctx context.Context) ([]Entry, error) {
	rows, err := db.New(b.pool).CostRateListAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("list cost rates: %w", err)
	}
	out := make([]Entry, len(rows))
	for i, r := range rows {
		out[i] = entryOf(r)
	}
	return out, nil
}

// Current returns the table of every rate, for pricing advice.
func (b *Book) Current(ctx context.Context) (*Rates, error) {
	return LoadRates(ctx, db.New(b.pool))
}

var (
	gpuTypeRule = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
	// Profiles: a whole GPU, a MIG profile, an MPS share or a CPU core.
	profileRule = regexp.MustCompile(`^(full|mig-[1-7]g\.[0-9]{1,3}gb|mps-[0-9]{1,3}pct|cpu-core)$`)
)

// Create enters a new rate; platform admins only (finance reads rates and
// reports but changes nothing, docs/chargeback.md). It takes
// effect at EffectiveFrom, which must be at least RateLead ahead of now and
// is kept to the whole second (a rate never applies to part of a second).
// A rate of the same type, profile and time already entered is a conflict.
func (b *Book) Create(ctx context.Context, p *auth.Principal, r Rate) (Entry, error) {
	if !p.PlatformAdmin() {
		return Entry{}, auth.ErrForbidden
	}
	var errs field.Errors
	if !gpuTypeRule.MatchString(r.GPUType) {
		errs.Add("gpu_type", "must be 1-63 letters, digits, '.', '_' or '-'")
	}
	if !profileRule.MatchString(r.Profile) {
		errs.Add("profile", "must be full, a MIG profile (mig-1g.10gb), an MPS share (mps-25pct) or cpu-core")
	}
	if r.UUSDPerHour < 0 || r.UUSDPerHour > 1_000_000_000_000 {
		errs.Add("uusd_per_hour", "must be between 0 and 1,000,000,000,000 micro-USD")
	}
	from := r.EffectiveFrom.UTC().Truncate(time.Second)
	if from.Before(r.EffectiveFrom) {
		from = from.Add(time.Second)
	}
	if earliest := b.clock.Now().Add(RateLead); from.Before(earliest) {
		errs.Add("effective_from", "must be at least %s from now (after %s): seconds already metered are never repriced",
			RateLead, earliest.UTC().Format(time.RFC3339))
	}
	if err := errs.Err(); err != nil {
		return Entry{}, err
	}
	var out Entry
	err := db.InTx(ctx, b.pool, func(q *db.Queries) error {
		row, err := q.CostRateCreate(ctx, db.CostRateCreateParams{GPUType: r.GPUType, Profile: r.Profile,
			UusdPerHour: r.UUSDPerHour, EffectiveFrom: from, CreatedBy: p.Actor(), CreatedByUserID: p.ActorUserID(), CreatedByKeyID: p.ActorKeyID()})
		if err != nil {
			return err
		}
		out = entryOf(row)
		return audit.Record(ctx, q, p, audit.Entry{Action: "cost_rate.create", ObjectType: "cost_rate",
			ObjectName: r.GPUType + "/" + r.Profile, After: out})
	})
	if err != nil {
		return Entry{}, fmt.Errorf("create cost rate: %w", err)
	}
	return out, nil
}
