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
	"modelplane/readcache"
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

// The bounds of the report cache the control plane gives its Service
// (WithCache): a report is read again in the background once a minute
// old, and none older than ten minutes is served.
const (
	ReportFresh  = time.Minute
	ReportMaxAge = 10 * time.Minute
)

// Service serves drift reports and stored scores to callers, scoped to
// their teams in SQL.
type Service struct {
	pool   *pgxpool.Pool
	reader *Reader
	clock  quartz.Clock
	// reports keeps computed reports (WithCache); nil computes every time.
	reports *readcache.Cache[reportKey, Report]
}

// reportKey names everything a report depends on besides the samples and
// the time: the endpoint (its id and creation, which clamps the windows),
// the versions compared and the windows as asked.
type reportKey struct {
	endpointID          int64
	created             time.Time
	version, refVersion string
	reference, current  string
}

// WithCache returns a copy of s that serves reports from a cache bounded
// by opts (its clock s's): a report scans up to a week of samples, and no
// pre-aggregate holds the distributions it compares. A cached report's
// windows end when it was computed, at most opts.MaxAge ago. Scores the
// scheduled check stores are not cached.
func (s *Service) WithCache(opts readcache.Options) *Service {
	c := *s
	opts.Clock = s.clock
	c.reports = readcache.New[reportKey, Report](opts)
	return &c
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
	if s.reports == nil {
		return s.report(ctx, endpoint, row.ID, row.CreatedAt, version, refVersion, refSpan, curSpan)
	}
	key := reportKey{endpointID: row.ID, created: row.CreatedAt, version: version, refVersion: refVersion, reference: q.Reference, current: q.Current}
	a, err := s.reports.Get(ctx, key, func(ctx context.Context) (Report, error) {
		return s.report(ctx, endpoint, row.ID, row.CreatedAt, version, refVersion, refSpan, curSpan)
	})
	return a.Value, err
}

// report computes the report of version against refVersion over the
// windows the spans give now, for endpoint (id, created at created).
func (s *Service) report(ctx context.Context, endpoint string, id int64, created time.Time, version, refVersion string, refSpan, curSpan Span) (Report, error) {
	now := s.clock.Now().UTC()
	defaultCur := curSpan == (Span{})
	if defaultCur {
		curSpan.Last = DefaultCurrent
	}
	cur := curSpan.window(version, now)
	defaultRef := refSpan.Last == 0 && refSpan.From.IsZero()
	if defaultRef {
		refSpan.Last = DefaultReference
	}
	ref := refSpan.window(refVersion, cur.From)
	// Samples from before the endpoint existed are a deleted namesake's.
	ref, cur = ref.Since(created), cur.Since(created)
	if defaultRef && defaultCur && !ref.From.Before(ref.To) {
		ref, cur = youngWindows(ref, cur, created, now)
	}
	return s.reader.Report(ctx, endpoint, id, ref, cur)
}

// youngWindows are the default windows of an endpoint younger than the
// default current window: its whole life would be the current window and
// the reference would be empty ("20:25 – 20:25, 0 samples"), so its life
// is split in two halves instead, the first the reference. A reference
// naming another version than the current keeps the same span.
func youngWindows(ref, cur Window, created, now time.Time) (Window, Window) {
	created = created.UTC()
	if created.Truncate(time.Second) != created {
		created = created.Truncate(time.Second).Add(time.Second)
	}
	if !created.Before(now) {
		return ref, cur
	}
	mid := created.Add(now.Sub(created) / 2).Truncate(time.Second)
	ref.From, ref.To = created, mid
	cur.From, cur.To = mid, now
	return ref, cur
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
