package drift

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/auth"
	"modelplane/db"
	"modelplane/field"
)

// Report defaults (docs/drift.md).
const (
	// DefaultCurrent is the current window's length.
	DefaultCurrent = time.Hour
	// DefaultReference is the reference window's length; it ends where the
	// current window starts, so the two never share samples.
	DefaultReference = 7 * 24 * time.Hour
)

// ErrNoStable is what stableVersion returns when the endpoint has no
// version with traffic; Report turns it into a validation error naming the
// parameters to give instead.
var ErrNoStable = errors.New("drift: endpoint has no version with traffic")

// Service serves drift reports and stored scores to callers, scoped to
// their teams in SQL.
type Service struct {
	pool   *pgxpool.Pool
	reader *Reader
	clock  quartz.Clock
}

// NewService returns a Service; clock ends every default window
// (quartz.NewReal() when nil).
func NewService(pool *pgxpool.Pool, reader *Reader, clock quartz.Clock) *Service {
	if clock == nil {
		clock = quartz.NewReal()
	}
	return &Service{pool: pool, reader: reader, clock: clock}
}

// Query is a report request as the API takes it: a version ("" for the
// stable one) and the reference and current window parameters (see
// ParseSpan; "" for the defaults).
type Query struct {
	Version   string
	Reference string
	Current   string
}

// Report is the drift report of an endpoint visible to p: q.Version's
// current window against the reference. A bad parameter is a
// field.Errors naming it.
func (s *Service) Report(ctx context.Context, p *auth.Principal, endpoint string, q Query) (Report, error) {
	var errs field.Errors
	refSpan, err := ParseSpan(q.Reference, true)
	if err != nil {
		errs.Add("reference", "%s", err.Error())
	}
	curSpan, err := ParseSpan(q.Current, false)
	if err != nil {
		errs.Add("current", "%s", err.Error())
	}
	if len(q.Version) > 128 {
		errs.Add("version", "must be at most 128 characters")
	}
	if err := errs.Err(); err != nil {
		return Report{}, err
	}
	all, ids := p.Scope()
	row, err := db.New(s.pool).EndpointGet(ctx, db.EndpointGetParams{Name: endpoint, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return Report{}, fmt.Errorf("drift report of %s: %w", endpoint, err)
	}
	version, refVersion := q.Version, refSpan.Version
	if version == "" || refVersion == "" {
		stable, err := stableVersion(row.Traffic)
		if errors.Is(err, ErrNoStable) {
			errs.Add("version", "the endpoint has no version with traffic: name the version and the reference's version (reference=VERSION@…)")
			return Report{}, errs.Err()
		}
		if err != nil {
			return Report{}, err
		}
		version, refVersion = cmp.Or(version, stable), cmp.Or(refVersion, stable)
	}
	if curSpan == (Span{}) {
		curSpan.Last = DefaultCurrent
	}
	cur := curSpan.window(version, s.clock.Now().UTC())
	if refSpan.Last == 0 && refSpan.From.IsZero() {
		refSpan.Last = DefaultReference
	}
	ref := refSpan.window(refVersion, cur.From)
	// Samples from before the endpoint existed are a deleted namesake's.
	return s.reader.Report(ctx, endpoint, row.ID, ref.Since(row.CreatedAt), cur.Since(row.CreatedAt))
}

// stableVersion is the version with the largest weight in the endpoint's
// traffic JSON (EndpointGet), the first by name on a tie.
func stableVersion(traffic string) (string, error) {
	var ws []struct {
		Version string `json:"version"`
		Weight  int32  `json:"weight"`
	}
	if err := json.Unmarshal([]byte(traffic), &ws); err != nil {
		return "", fmt.Errorf("drift: traffic of endpoint: %w", err)
	}
	sort.SliceStable(ws, func(i, j int) bool { return ws[i].Weight > ws[j].Weight })
	if len(ws) == 0 || ws[0].Weight <= 0 {
		return "", ErrNoStable
	}
	return ws[0].Version, nil
}

// Score is one stored score of the scheduled check.
type Score struct {
	Version          string    `json:"version"`
	Metric           string    `json:"metric"`
	Value            float64   `json:"value"`
	Threshold        float64   `json:"threshold"`
	ReferenceSamples int64     `json:"reference_samples"`
	CurrentSamples   int64     `json:"current_samples"`
	Enough           bool      `json:"enough_data"`
	At               time.Time `json:"at"`
}

// Alert is a metric of a version past its threshold: pending until it has
// stayed there for the alert duration, fired after.
type Alert struct {
	Version       string     `json:"version"`
	Metric        string     `json:"metric"`
	Value         float64    `json:"value"`
	Threshold     float64    `json:"threshold"`
	BreachedSince time.Time  `json:"breached_since"`
	FiredAt       *time.Time `json:"fired_at,omitempty"`
}

// History returns an endpoint's stored scores since since, oldest first,
// and its open alerts, for an endpoint visible to p.
func (s *Service) History(ctx context.Context, p *auth.Principal, endpoint string, since time.Time) ([]Score, []Alert, error) {
	all, ids := p.Scope()
	q := db.New(s.pool)
	e, err := q.EndpointGet(ctx, db.EndpointGetParams{Name: endpoint, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return nil, nil, fmt.Errorf("drift history of %s: %w", endpoint, err)
	}
	rows, err := q.DriftScoreList(ctx, db.DriftScoreListParams{EndpointID: e.ID, Since: since, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return nil, nil, fmt.Errorf("drift history of %s: %w", endpoint, err)
	}
	scores := make([]Score, len(rows))
	for i, r := range rows {
		scores[i] = Score{Version: r.Version, Metric: r.Metric, Value: r.Value, Threshold: r.Threshold,
			ReferenceSamples: r.ReferenceSamples, CurrentSamples: r.CurrentSamples, Enough: r.Enough, At: r.ComputedAt}
	}
	arows, err := q.DriftAlertList(ctx, db.DriftAlertListParams{EndpointID: e.ID, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return nil, nil, fmt.Errorf("drift alerts of %s: %w", endpoint, err)
	}
	alerts := make([]Alert, len(arows))
	for i, r := range arows {
		alerts[i] = Alert{Version: r.Version, Metric: r.Metric, Value: r.Value, Threshold: r.Threshold,
			BreachedSince: r.BreachedSince, FiredAt: r.FiredAt}
	}
	return scores, alerts, nil
}
