package chargeback

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/audit"
	"modelplane/auth"
	"modelplane/busapi"
	"modelplane/db"
	"modelplane/field"
	"modelplane/money"
	"modelplane/outbox"
	"modelplane/service"
)

// Enforcement says what a budget does once a month's spend reaches it.
const (
	// EnforceAlert only raises the 80 and 100 percent events (the default).
	EnforceAlert = "alert"
	// EnforceBlock also stops replicas beyond the endpoints' minimum until
	// the month ends; the fleet reconciler reads them with query
	// BudgetBlockingList.
	EnforceBlock = "block"
)

// Thresholds are the percentages of a budget at which an alert is raised.
var Thresholds = []int{80, 100}

// BudgetSpec sets a budget: a team's, or one endpoint's of the team.
type BudgetSpec struct {
	Team        string `json:"team"`
	Endpoint    string `json:"endpoint,omitempty"`
	MonthlyUUSD int64  `json:"monthly_uusd"`
	Enforcement string `json:"enforcement"`
}

// Budget is a budget with the month's spend and its forecast.
type Budget struct {
	ID          int64     `json:"id"`
	Team        string    `json:"team"`
	Endpoint    string    `json:"endpoint,omitempty"`
	MonthlyUUSD int64     `json:"monthly_uusd"`
	Enforcement string    `json:"enforcement"`
	UpdatedBy   string    `json:"updated_by"`
	UpdatedAt   time.Time `json:"updated_at"`
	// SpentUUSD is the month's cost so far; ForecastUUSD extends its run
	// rate to the end of the month; SpentPct is spent over the budget.
	SpentUUSD    int64   `json:"spent_uusd"`
	ForecastUUSD int64   `json:"forecast_uusd"`
	SpentPct     float64 `json:"spent_pct"`
}

// Alert is a budget threshold passed in a month.
type Alert struct {
	Team         string    `json:"team"`
	Endpoint     string    `json:"endpoint,omitempty"`
	Month        string    `json:"month"`
	ThresholdPct int       `json:"threshold_pct"`
	SpentUUSD    int64     `json:"spent_uusd"`
	BudgetUUSD   int64     `json:"budget_uusd"`
	ForecastUUSD int64     `json:"forecast_uusd"`
	At           time.Time `json:"at"`
}

// Budgets keeps budgets in PostgreSQL, measures them against the month's
// cost from Service, and raises their alerts.
type Budgets struct {
	pool    *pgxpool.Pool
	reports *Service
	// published is called after an alert's event was written to the
	// outbox (it wakes the relay); nil when nobody waits.
	published func()
	log       *slog.Logger
	clock     quartz.Clock
	// wake lets Check run early (after a budget changed).
	wake chan struct{}
	mu   sync.Mutex
	// measured holds the budgets as the last Check measured them, for
	// the metrics (budget_metrics.go).
	measured budgetsMeasured
}

// NewBudgets returns Budgets. published is called after Check wrote an
// alert's event to the outbox (the relay's Wake), and may be nil (the relay
// then sends it at its next poll); reports may be nil too (no usage store:
// spend reads as zero and no alert is raised). clock is what months and
// the check's interval run on (quartz.NewReal() when nil).
func NewBudgets(pool *pgxpool.Pool, reports *Service, published func(), log *slog.Logger, clock quartz.Clock) *Budgets {
	if clock == nil {
		clock = quartz.NewReal()
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Budgets{pool: pool, reports: reports, published: published, log: log, clock: clock, wake: make(chan struct{}, 1)}
}

// system is who the budget check reads costs as: it measures every team.
var system = auth.System("budget-check")

// Set creates or replaces the budget of a team or of one of its
// endpoints; team admins of that team and platform admins only.
func (b *Budgets) Set(ctx context.Context, p *auth.Principal, s BudgetSpec) (Budget, error) {
	var errs field.Errors
	if s.MonthlyUUSD <= 0 || s.MonthlyUUSD > 1_000_000_000_000_000 {
		errs.Add("monthly_uusd", "must be a positive number of micro-USD")
	}
	if s.Enforcement == "" {
		s.Enforcement = EnforceAlert
	}
	field.OneOf(&errs, "enforcement", s.Enforcement, EnforceAlert, EnforceBlock)
	if err := errs.Err(); err != nil {
		return Budget{}, err
	}
	all, ids := p.Scope()
	var out Budget
	err := db.InTx(ctx, b.pool, func(q *db.Queries) error {
		team, err := q.TeamGetScoped(ctx, db.TeamGetScopedParams{Name: s.Team, AllTeams: all, TeamIDs: ids})
		if err != nil {
			return err
		}
		if !p.CanAdmin(team.ID) {
			return auth.ErrForbidden
		}
		var endpointID *int64
		if s.Endpoint != "" {
			e, err := q.EndpointGet(ctx, db.EndpointGetParams{Name: s.Endpoint, AllTeams: false, TeamIDs: []int64{team.ID}})
			if err != nil {
				return err
			}
			endpointID = &e.ID
		}
		// A changed amount voids this month's alerts (and the block a 100
		// percent alert means): the checker measures the spend against the
		// new amount and alerts again.
		from, _ := Month(b.clock.Now())
		if _, err := q.BudgetAlertsResetChanged(ctx, db.BudgetAlertsResetChangedParams{Month: pgtype.Date{Time: from, Valid: true},
			TeamID: team.ID, EndpointID: endpointID, MonthlyUusd: s.MonthlyUUSD}); err != nil {
			return err
		}
		row, err := q.BudgetUpsert(ctx, db.BudgetUpsertParams{TeamID: team.ID, EndpointID: endpointID, MonthlyUusd: s.MonthlyUUSD,
			Enforcement: s.Enforcement, UpdatedBy: p.Actor(), UpdatedByUserID: p.ActorUserID(), UpdatedByKeyID: p.ActorKeyID()})
		if err != nil {
			return err
		}
		out = Budget{ID: row.ID, Team: team.Name, Endpoint: s.Endpoint, MonthlyUUSD: row.MonthlyUusd, Enforcement: row.Enforcement,
			UpdatedBy: row.UpdatedBy, UpdatedAt: row.UpdatedAt.UTC()}
		return audit.Record(ctx, q, p, audit.Entry{TeamID: &team.ID, Action: "budget.set", ObjectType: "budget",
			ObjectName: BudgetName(team.Name, s.Endpoint), After: out})
	})
	if err != nil {
		return Budget{}, fmt.Errorf("set budget: %w", err)
	}
	select {
	case b.wake <- struct{}{}:
	default:
	}
	return out, nil
}

// BudgetName names a budget for people and records: the team, or
// team/endpoint for an endpoint's budget (the audit object, the alert
// event's Name, and the portal's budget and alert lines).
func BudgetName(team, endpoint string) string {
	if endpoint == "" {
		return team
	}
	return team + "/" + endpoint
}

// budgetScope is who sees budgets: finance and platform admins all, others
// their teams.
func budgetScope(p *auth.Principal) (bool, []int64) {
	if p.Finance() {
		return true, []int64{}
	}
	return p.Scope()
}

// List returns the budgets p may see with this month's spend and forecast.
func (b *Budgets) List(ctx context.Context, p *auth.Principal) ([]Budget, error) {
	all, ids := budgetScope(p)
	rows, err := db.New(b.pool).BudgetListScoped(ctx, db.BudgetListScopedParams{AllTeams: all, TeamIDs: ids})
	if err != nil {
		return nil, fmt.Errorf("list budgets: %w", err)
	}
	out := make([]Budget, 0, len(rows))
	if len(rows) == 0 {
		return out, nil
	}
	sp, err := b.spend(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		bu := Budget{ID: r.ID, Team: r.TeamName, Endpoint: r.EndpointName, MonthlyUUSD: r.MonthlyUusd, Enforcement: r.Enforcement,
			UpdatedBy: r.UpdatedBy, UpdatedAt: r.UpdatedAt.UTC()}
		sp.measure(&bu)
		out = append(out, bu)
	}
	return out, nil
}

// monthSpend is the month's cost so far of every team and endpoint, read
// as one report grouped by team and endpoint, so that measuring every
// budget costs one report rather than one each.
type monthSpend struct {
	// elapsed and month are the month's seconds so far and in all; zero
	// elapsed (the month's first second, or no report service) measures
	// nothing.
	elapsed, month time.Duration
	// team and endpoint hold exact costs in micro-USD times 3,600, keyed
	// by team and by team and endpoint.
	team     map[string]int64
	endpoint map[[2]string]int64
}

// spend reads the month's cost so far of every team and endpoint.
func (b *Budgets) spend(ctx context.Context) (monthSpend, error) {
	now := b.clock.Now().UTC()
	from, to := Month(now)
	end := now.Truncate(time.Second)
	sp := monthSpend{team: map[string]int64{}, endpoint: map[[2]string]int64{}}
	if !end.After(from) || b.reports == nil {
		return sp, nil
	}
	rep, err := b.reports.Report(ctx, system, Query{From: from, To: end, GroupBy: []Dimension{DimTeam, DimEndpoint}})
	if err != nil {
		return monthSpend{}, fmt.Errorf("budget spend: %w", err)
	}
	for _, r := range rep.Rows {
		sp.team[r.Team] += r.CostX3600
		sp.endpoint[[2]string{r.Team, r.Endpoint}] += r.CostX3600
	}
	sp.elapsed, sp.month = end.Sub(from), to.Sub(from)
	return sp, nil
}

// measure fills the month's spend and forecast of one budget: its team's
// rows summed, or its endpoint's row, rounded as a report's total (half
// up) so that the figure is the one a report of the budget alone shows.
func (sp monthSpend) measure(bu *Budget) {
	if sp.elapsed <= 0 {
		return
	}
	x3600 := sp.team[bu.Team]
	if bu.Endpoint != "" {
		x3600 = sp.endpoint[[2]string{bu.Team, bu.Endpoint}]
	}
	bu.SpentUUSD = divRound(x3600, 3600)
	bu.ForecastUUSD = Forecast(bu.SpentUUSD, sp.elapsed, sp.month)
	if bu.MonthlyUUSD > 0 {
		bu.SpentPct = float64(bu.SpentUUSD) * 100 / float64(bu.MonthlyUUSD)
	}
}

// Forecast extends spend over elapsed to the whole month at the same run
// rate, in integers (rounded half up, the product in 128 bits: spend times
// a month's seconds passes int64 above about $3.4M).
func Forecast(spent int64, elapsed, month time.Duration) int64 {
	e := int64(elapsed / time.Second)
	if e <= 0 {
		return spent
	}
	return mulDivRound(spent, int64(month/time.Second), e)
}

// Alerts returns this month's alerts p may see, newest first.
func (b *Budgets) Alerts(ctx context.Context, p *auth.Principal) ([]Alert, error) {
	all, ids := budgetScope(p)
	from, _ := Month(b.clock.Now())
	rows, err := db.New(b.pool).BudgetAlertListScoped(ctx, db.BudgetAlertListScopedParams{AllTeams: all, TeamIDs: ids,
		Month: pgtype.Date{Time: from, Valid: true}})
	if err != nil {
		return nil, fmt.Errorf("list budget alerts: %w", err)
	}
	out := make([]Alert, len(rows))
	for i, r := range rows {
		out[i] = Alert{Team: r.TeamName, Endpoint: r.EndpointName, Month: r.Month.Time.Format("2006-01"), ThresholdPct: int(r.ThresholdPct),
			SpentUUSD: r.SpentUusd, BudgetUUSD: r.BudgetUusd, ForecastUUSD: r.ForecastUusd, At: r.CreatedAt.UTC()}
	}
	return out, nil
}

// Check measures every budget once: a threshold newly passed this month is
// stored as an alert with an audit record and its event (busapi.Event, kind
// "budget", on mp.events.<team>) as an outbox row, in one transaction, so
// the event goes out exactly when the alert is stored, through the relay
// like every other event (MP_EVENTS).
func (b *Budgets) Check(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := db.New(b.pool)
	rows, err := q.BudgetListAll(ctx)
	if err != nil {
		return fmt.Errorf("budget check: %w", err)
	}
	if len(rows) == 0 {
		b.measured.set(nil)
		return nil
	}
	sp, err := b.spend(ctx)
	if err != nil {
		return fmt.Errorf("budget check: %w", err)
	}
	month, _ := Month(b.clock.Now())
	var errs []error
	raised := 0
	seen := make([]Budget, 0, len(rows))
	defer func() { b.measured.set(seen) }()
	for _, r := range rows {
		bu := Budget{ID: r.ID, Team: r.TeamName, Endpoint: r.EndpointName, MonthlyUUSD: r.MonthlyUusd, Enforcement: r.Enforcement}
		sp.measure(&bu)
		seen = append(seen, bu)
		for _, pct := range Thresholds {
			// spent ≥ pct% of the budget, in integers.
			if bu.SpentUUSD*100 < bu.MonthlyUUSD*int64(pct) {
				continue
			}
			teamID := r.TeamID
			err := db.InTx(ctx, b.pool, func(q *db.Queries) error {
				n, err := q.BudgetAlertInsert(ctx, db.BudgetAlertInsertParams{BudgetID: r.ID, TeamID: teamID, Month: pgtype.Date{Time: month, Valid: true},
					ThresholdPct: int32(pct), SpentUusd: bu.SpentUUSD, BudgetUusd: bu.MonthlyUUSD, ForecastUusd: bu.ForecastUUSD})
				if err != nil || n == 0 {
					return err
				}
				if err := audit.Record(ctx, q, system, audit.Entry{TeamID: &teamID, Action: fmt.Sprintf("budget.alert_%d", pct), ObjectType: "budget",
					ObjectName: BudgetName(bu.Team, bu.Endpoint), After: bu}); err != nil {
					return err
				}
				raised++
				return writeEvent(ctx, q, r.ID, bu, pct, b.clock.Now())
			})
			if err != nil {
				errs = append(errs, fmt.Errorf("budget alert: %w", err))
			}
		}
	}
	if raised > 0 && b.published != nil {
		b.published()
	}
	return errors.Join(errs...)
}

// EventKind is the Kind of a budget alert's busapi.Event; its Type is
// "alert", State the threshold passed ("80" or "100"), ID the budget's id
// and Name the team or team/endpoint. Readers fetch the alerts for the
// figures; Message says them for people.
const EventKind = "budget"

// writeEvent writes the event of a budget alert to the outbox in the
// alert's transaction.
func writeEvent(ctx context.Context, q *db.Queries, budgetID int64, bu Budget, pct int, at time.Time) error {
	msg := fmt.Sprintf("%s spent $%s of its $%s monthly budget (%d percent passed); forecast $%s", BudgetName(bu.Team, bu.Endpoint),
		money.Dollars(bu.SpentUUSD), money.Dollars(bu.MonthlyUUSD), pct, money.Dollars(bu.ForecastUUSD))
	if bu.Enforcement == EnforceBlock && pct >= 100 {
		msg += "; no new replicas beyond the endpoints' minimum this month"
	}
	return outbox.Event(ctx, q, bu.Team, busapi.Event{Kind: EventKind, ID: budgetID, Name: BudgetName(bu.Team, bu.Endpoint),
		Type: "alert", State: strconv.Itoa(pct), Message: msg, At: at.UTC()})
}

// BudgetInterval is how often the budget check runs when no budget changed.
const BudgetInterval = time.Minute

// Checker returns the budget check as a Service: every BudgetInterval, and
// soon after a budget changes. Run it under a leader lease: one checker
// per control plane.
func (b *Budgets) Checker() service.Service {
	return service.NewFunc(func(ctx context.Context) {
		service.Tick(ctx, b.clock, BudgetInterval, b.wake, func(ctx context.Context) {
			if err := b.Check(ctx); err != nil && ctx.Err() == nil {
				b.log.Warn("budget check", slog.String("error", err.Error()))
			}
		})
	})
}
