package drift

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"modelplane/audit"
	"modelplane/auth"
	"modelplane/busapi"
	"modelplane/db"
	"modelplane/drift/stat"
	"modelplane/outbox"
	"modelplane/service"
)

// CheckerConfig configures the scheduled drift check; zero values take the
// defaults.
type CheckerConfig struct {
	// Interval between checks (default 5 minutes).
	Interval time.Duration
	// AlertAfter is how long a score must stay past its threshold, check
	// after check, before the alert fires (default 15 minutes).
	AlertAfter time.Duration
	// Keep is how long scores are kept in PostgreSQL (default 30 days).
	Keep time.Duration
	// Reference and Current are the windows' lengths (defaults
	// DefaultReference and DefaultCurrent).
	Reference, Current time.Duration
}

func (c *CheckerConfig) defaults() {
	if c.Interval <= 0 {
		c.Interval = 5 * time.Minute
	}
	if c.AlertAfter <= 0 {
		c.AlertAfter = 15 * time.Minute
	}
	if c.Keep <= 0 {
		c.Keep = 30 * 24 * time.Hour
	}
	if c.Reference <= 0 {
		c.Reference = DefaultReference
	}
	if c.Current <= 0 {
		c.Current = DefaultCurrent
	}
}

// Event is what the audit log records when a drift alert fires
// ("drift.alert") and when a fired one clears ("drift.resolved"). The event
// on mp.events.<team> is a busapi.Event of kind EventKind written to the
// outbox in the same transaction (see alert).
type Event struct {
	Type             string    `json:"type"`
	Team             string    `json:"team"`
	Endpoint         string    `json:"endpoint"`
	Version          string    `json:"version"`
	Metric           string    `json:"metric"`
	Value            float64   `json:"value"`
	Threshold        float64   `json:"threshold"`
	ReferenceSamples uint64    `json:"reference_samples"`
	CurrentSamples   uint64    `json:"current_samples"`
	BreachedSince    time.Time `json:"breached_since"`
	At               time.Time `json:"at"`
	// Reason says why an alert resolved other than by its metric coming
	// back within the threshold (its version left the endpoint).
	Reason string `json:"reason,omitempty"`
}

// Audit actions of drift alerts.
const (
	EventAlert    = "drift.alert"
	EventResolved = "drift.resolved"
)

// EventKind is the Kind of a drift alert's busapi.Event on mp.events.<team>:
// ID and Name are the endpoint's, Type "alert" or "resolved", State the
// version and metric ("v24 w1_norm"), Message the figures for people.
const EventKind = "drift"

// system is the principal the drift loops read every team's endpoints as
// and the one alerts are audited as.
var system = auth.System("drift-check")

// Checker is the scheduled drift check: every interval it reports every
// live version of every endpoint against the endpoint's stable version,
// stores the scores, exports the judged ones (enough data) as
// ml_serving_prediction_drift_score and raises alerts. A pass over many
// endpoints may outlast the interval; the ticker then skips ticks. Run it on the leader only (app/loops.go).
type Checker struct {
	service.Runner
	pool   *pgxpool.Pool
	reader *Reader
	// published is called after a check wrote events to the outbox (it
	// wakes the relay); nil when nobody waits.
	published func()
	log       *slog.Logger
	clock     quartz.Clock
	cfg       CheckerConfig
	score     *prometheus.GaugeVec
	// threshold is each exported score's threshold, so that an alert rule
	// compares the two series instead of repeating the configuration.
	threshold *prometheus.GaugeVec
	shown     map[[3]string]bool
}

// NewChecker returns a Checker and registers its gauge on reg (nil: not
// registered). published is called after a check wrote alert events to the
// outbox (the relay's Wake); nil leaves them to the relay's next poll.
// clock ends every window and drives the interval (quartz.NewReal() when
// nil).
func NewChecker(pool *pgxpool.Pool, reader *Reader, published func(), log *slog.Logger, clock quartz.Clock, reg prometheus.Registerer, cfg CheckerConfig) (*Checker, error) {
	cfg.defaults()
	if clock == nil {
		clock = quartz.NewReal()
	}
	c := &Checker{pool: pool, reader: reader, published: published, log: log, clock: clock, cfg: cfg, shown: map[[3]string]bool{},
		score: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ml_serving_prediction_drift_score",
			Help: "Latest drift score of an endpoint's live version: psi:<feature>, kl, w1_norm or completion_length_w1_norm."},
			[]string{"endpoint", "version", "metric"})}
	c.threshold = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ml_serving_prediction_drift_threshold",
		Help: "The threshold of each ml_serving_prediction_drift_score series, with the same labels."},
		[]string{"endpoint", "version", "metric"})
	if reg != nil {
		if err := reg.Register(c.score); err != nil {
			return nil, fmt.Errorf("drift metrics: %w", err)
		}
		if err := reg.Register(c.threshold); err != nil {
			return nil, fmt.Errorf("drift metrics: %w", err)
		}
	}
	return c, nil
}

// Start checks every interval until Stop.
func (c *Checker) Start(ctx context.Context) error {
	return c.Go(ctx, func(ctx context.Context) {
		service.Tick(ctx, c.clock, c.cfg.Interval, nil, func(ctx context.Context) {
			if err := c.Check(ctx); err != nil && ctx.Err() == nil {
				c.log.Warn("drift check", slog.String("error", err.Error()))
			}
		})
	})
}

type target struct {
	endpointID, teamID int64
	endpoint, team     string
	stable             string
	versions           []string
	created            time.Time
}

// Check runs one pass. A version whose report fails is logged and skipped;
// the others are still checked.
func (c *Checker) Check(ctx context.Context) error {
	all, ids := system.Scope()
	now := c.clock.Now().UTC()
	q := db.New(c.pool)
	rows, err := q.DriftTargetList(ctx, db.DriftTargetListParams{AllTeams: all, TeamIDs: ids})
	if err != nil {
		return fmt.Errorf("drift targets: %w", err)
	}
	var targets []*target
	for _, r := range rows {
		if len(targets) == 0 || targets[len(targets)-1].endpointID != r.EndpointID {
			targets = append(targets, &target{endpointID: r.EndpointID, teamID: r.TeamID, endpoint: r.Endpoint, team: r.Team, stable: r.Version, created: r.CreatedAt})
		}
		t := targets[len(targets)-1]
		t.versions = append(t.versions, r.Version)
	}
	shown := map[[3]string]bool{}
	for _, t := range targets {
		for _, v := range t.versions {
			cur := Window{Version: v, From: now.Add(-c.cfg.Current), To: now}
			ref := Window{Version: t.stable, From: cur.From.Add(-c.cfg.Reference), To: cur.From}
			// Samples from before the endpoint existed are a deleted
			// namesake's, not its own.
			rep, err := c.reader.Report(ctx, t.endpoint, t.endpointID, ref.Since(t.created), cur.Since(t.created))
			if err != nil {
				c.log.Warn("drift report", slog.String("endpoint", t.endpoint), slog.String("version", v), slog.String("error", err.Error()))
				continue
			}
			scores := Scores(rep)
			if err := c.store(ctx, t, v, rep, scores, now); err != nil {
				return err
			}
			// Only judged scores are exported: a rule on the gauge must not
			// fire on the noise of a handful of samples.
			for _, s := range scores {
				if rep.Verdict == VerdictNotEnough {
					break
				}
				k := [3]string{t.endpoint, v, s.Metric}
				c.score.WithLabelValues(k[:]...).Set(s.Value)
				c.threshold.WithLabelValues(k[:]...).Set(s.Threshold)
				shown[k] = true
			}
			// Without enough data nothing is known: a run or a fired alert
			// stays as it is until a judged report says otherwise (a gap
			// in the samples must not "resolve" an alert).
			if rep.Verdict == VerdictNotEnough {
				continue
			}
			if err := c.alert(ctx, t, v, rep, scores, now); err != nil {
				return err
			}
		}
	}
	for k := range c.shown {
		if !shown[k] {
			c.score.DeleteLabelValues(k[:]...)
			c.threshold.DeleteLabelValues(k[:]...)
		}
	}
	c.shown = shown
	if err := c.retire(ctx, now); err != nil {
		return err
	}
	if _, err := q.DriftScoreDeleteBefore(ctx, db.DriftScoreDeleteBeforeParams{Before: now.Add(-c.cfg.Keep), AllTeams: all, TeamIDs: ids}); err != nil {
		return fmt.Errorf("drift scores expiry: %w", err)
	}
	return nil
}

// MetricScore is one number of a report with its threshold and whether it
// counts as past it (never without enough data).
type MetricScore struct {
	Metric    string
	Value     float64
	Threshold float64
	Breached  bool
}

// Scores flattens a report into its numbers: one "psi:<feature>" per
// feature, then the output metric.
func Scores(rep Report) []MetricScore {
	enough := rep.Verdict != VerdictNotEnough
	var out []MetricScore
	for _, f := range rep.Features {
		out = append(out, MetricScore{Metric: stat.MetricPSI + ":" + f.Name, Value: f.PSI, Threshold: f.Threshold, Breached: enough && f.PSI > f.Threshold})
	}
	o := rep.Output
	return append(out, MetricScore{Metric: o.Metric, Value: o.Value, Threshold: o.Threshold, Breached: enough && o.Value > o.Threshold})
}

func (c *Checker) store(ctx context.Context, t *target, version string, rep Report, scores []MetricScore, now time.Time) error {
	all, ids := system.Scope()
	p := db.DriftScoreInsertManyParams{EndpointID: t.endpointID, Version: version, ReferenceSamples: int64(rep.ReferenceSamples),
		CurrentSamples: int64(rep.CurrentSamples), Enough: rep.Verdict != VerdictNotEnough, ComputedAt: now, AllTeams: all, TeamIDs: ids}
	for _, s := range scores {
		p.Metrics = append(p.Metrics, s.Metric)
		p.Vals = append(p.Vals, s.Value)
		p.Thresholds = append(p.Thresholds, s.Threshold)
	}
	if err := db.New(c.pool).DriftScoreInsertMany(ctx, p); err != nil {
		return fmt.Errorf("store drift scores of %s %s: %w", t.endpoint, version, err)
	}
	return nil
}

// alert advances the alert state of every metric of one version: a breach
// starts or continues a run, a run older than AlertAfter fires once, a
// metric back within its threshold ends its run (a fired one is resolved).
// Firing and resolving write the audit entry and the event's outbox row in
// the transaction that changes the alert, so the event goes out exactly
// when the change commits (through the relay, to MP_EVENTS).
func (c *Checker) alert(ctx context.Context, t *target, version string, rep Report, scores []MetricScore, now time.Time) error {
	all, ids := system.Scope()
	var events []Event
	breached := []string{}
	err := db.InTx(ctx, c.pool, func(q *db.Queries) error {
		for _, s := range scores {
			if !s.Breached {
				continue
			}
			breached = append(breached, s.Metric)
			run, err := q.DriftAlertUpsert(ctx, db.DriftAlertUpsertParams{Version: version, Metric: s.Metric, Value: s.Value,
				Threshold: s.Threshold, Now: now, EndpointID: t.endpointID, AllTeams: all, TeamIDs: ids})
			if err != nil {
				return fmt.Errorf("drift alert: %w", err)
			}
			if run.FiredAt != nil || now.Sub(run.BreachedSince) < c.cfg.AlertAfter {
				continue
			}
			n, err := q.DriftAlertFire(ctx, db.DriftAlertFireParams{Now: &now, EndpointID: t.endpointID, Version: version,
				Metric: s.Metric, AllTeams: all, TeamIDs: ids})
			if err != nil {
				return fmt.Errorf("drift alert: %w", err)
			}
			if n == 0 {
				continue
			}
			e := Event{Type: EventAlert, Team: t.team, Endpoint: t.endpoint, Version: version, Metric: s.Metric, Value: s.Value,
				Threshold: s.Threshold, ReferenceSamples: rep.ReferenceSamples, CurrentSamples: rep.CurrentSamples,
				BreachedSince: run.BreachedSince, At: now}
			if err := audit.Record(ctx, q, system, audit.Entry{TeamID: &t.teamID, Action: EventAlert, ObjectType: "endpoint",
				ObjectName: t.endpoint, After: e}); err != nil {
				return err
			}
			if err := writeEvent(ctx, q, t.endpointID, e); err != nil {
				return err
			}
			events = append(events, e)
		}
		cleared, err := q.DriftAlertClear(ctx, db.DriftAlertClearParams{EndpointID: t.endpointID, Version: version, Breached: breached,
			AllTeams: all, TeamIDs: ids})
		if err != nil {
			return fmt.Errorf("drift alert clear: %w", err)
		}
		for _, cl := range cleared {
			if cl.FiredAt == nil {
				continue
			}
			e := Event{Type: EventResolved, Team: t.team, Endpoint: t.endpoint, Version: version, Metric: cl.Metric,
				ReferenceSamples: rep.ReferenceSamples, CurrentSamples: rep.CurrentSamples, At: now}
			for _, s := range scores {
				if s.Metric == cl.Metric {
					e.Value, e.Threshold = s.Value, s.Threshold
				}
			}
			if err := audit.Record(ctx, q, system, audit.Entry{TeamID: &t.teamID, Action: EventResolved, ObjectType: "endpoint",
				ObjectName: t.endpoint, After: e}); err != nil {
				return err
			}
			if err := writeEvent(ctx, q, t.endpointID, e); err != nil {
				return err
			}
			events = append(events, e)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, e := range events {
		c.log.Info("drift alert", slog.String("type", e.Type), slog.String("endpoint", e.Endpoint), slog.String("version", e.Version),
			slog.String("metric", e.Metric), slog.Float64("value", e.Value))
	}
	if len(events) > 0 && c.published != nil {
		c.published()
	}
	return nil
}

// retire removes the alerts of versions that no longer serve their
// endpoint; a fired one is resolved (audit entry and event, in the same
// transaction) so whoever was paged hears that it ended.
func (c *Checker) retire(ctx context.Context, now time.Time) error {
	all, ids := system.Scope()
	var events []Event
	err := db.InTx(ctx, c.pool, func(q *db.Queries) error {
		gone, err := q.DriftAlertDeleteStale(ctx, db.DriftAlertDeleteStaleParams{AllTeams: all, TeamIDs: ids})
		if err != nil {
			return err
		}
		for _, g := range gone {
			if g.FiredAt == nil {
				continue
			}
			e := Event{Type: EventResolved, Team: g.Team, Endpoint: g.Endpoint, Version: g.Version, Metric: g.Metric,
				Value: g.Value, Threshold: g.Threshold, At: now, Reason: "the version no longer serves the endpoint"}
			teamID := g.TeamID
			if err := audit.Record(ctx, q, system, audit.Entry{TeamID: &teamID, Action: EventResolved, ObjectType: "endpoint",
				ObjectName: g.Endpoint, After: e}); err != nil {
				return err
			}
			if err := writeEvent(ctx, q, g.EndpointID, e); err != nil {
				return err
			}
			events = append(events, e)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("drift alerts of retired versions: %w", err)
	}
	if len(events) > 0 && c.published != nil {
		c.published()
	}
	return nil
}

// writeEvent writes the busapi.Event of a fired or resolved alert to the
// outbox inside the alert's transaction.
func writeEvent(ctx context.Context, q *db.Queries, endpointID int64, e Event) error {
	typ, msg := "alert", fmt.Sprintf("%s %s = %.4g, past its threshold %.4g since %s", e.Version, e.Metric, e.Value, e.Threshold,
		e.BreachedSince.UTC().Format(time.RFC3339))
	switch {
	case e.Type == EventResolved && e.Reason != "":
		typ, msg = "resolved", fmt.Sprintf("%s %s: resolved, %s (last %.4g against %.4g)", e.Version, e.Metric, e.Reason, e.Value, e.Threshold)
	case e.Type == EventResolved:
		typ, msg = "resolved", fmt.Sprintf("%s %s = %.4g, back within its threshold %.4g", e.Version, e.Metric, e.Value, e.Threshold)
	}
	return outbox.Event(ctx, q, e.Team, busapi.Event{Kind: EventKind, ID: endpointID, Name: e.Endpoint, Type: typ,
		State: e.Version + " " + e.Metric, Message: msg, At: e.At.UTC()})
}
