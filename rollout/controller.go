package rollout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/db"
	"modelplane/graph"
	"modelplane/judge"
	"modelplane/route"
	"modelplane/service"
)

// StatsReader reads each version's request statistics of an endpoint (by
// name and id) over [from, to), and how far they have arrived (the end of
// the newest window started at or after since; zero when none has);
// package reqstats' Reader is one.
type StatsReader interface {
	Totals(ctx context.Context, endpoint string, endpointID int64, from, to time.Time) (map[string]judge.Window, error)
	Through(ctx context.Context, endpoint string, endpointID int64, since time.Time) (time.Time, error)
}

// ControllerConfig configures a Controller.
type ControllerConfig struct {
	Pool *pgxpool.Pool
	// Stats may be nil (no ClickHouse): every evaluation then holds, saying
	// so.
	Stats StatsReader
	// Drift may be nil (the drift gate then holds when a rollout asks for
	// it); drift.NewGate gives one.
	Drift DriftMeasurer
	// Clock decides steps and drives Interval (nil: quartz.NewReal()).
	Clock quartz.Clock
	Log   *slog.Logger
	// Interval is the longest time between passes; a Wake starts one now.
	Interval time.Duration
	// Published is called after a pass wrote outbox rows (it wakes the
	// outbox relay, so a new routing entry leaves at once).
	Published func()
}

// Controller is the rollout reconciler. Run it under a leader lease: it
// keeps no state between passes, everything is read from PostgreSQL.
type Controller struct {
	service.Runner
	cfg  ControllerConfig
	wake chan struct{}
}

// NewController returns a Controller.
func NewController(cfg ControllerConfig) *Controller {
	if cfg.Clock == nil {
		cfg.Clock = quartz.NewReal()
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Published == nil {
		cfg.Published = func() {}
	}
	return &Controller{cfg: cfg, wake: make(chan struct{}, 1)}
}

// Wake asks for a pass now.
func (c *Controller) Wake() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Start reconciles until Stop: every interval and whenever woken.
func (c *Controller) Start(ctx context.Context) error {
	return c.Go(ctx, func(ctx context.Context) {
		service.Tick(ctx, c.cfg.Clock, c.cfg.Interval, c.wake, func(ctx context.Context) {
			if err := c.Pass(ctx); err != nil && ctx.Err() == nil {
				c.cfg.Log.Warn("rollout controller", slog.String("error", err.Error()))
			}
		})
	})
}

// Pass reconciles every rollout that needs it once. One rollout failing does
// not stop the others; the first error is returned.
func (c *Controller) Pass(ctx context.Context) error {
	all, teams := system.Scope()
	ids, err := db.New(c.cfg.Pool).RolloutWorkList(ctx, db.RolloutWorkListParams{Now: c.cfg.Clock.Now(), AllTeams: all, TeamIDs: teams})
	if err != nil {
		return fmt.Errorf("rollout pass: %w", err)
	}
	var first error
	wrote := false
	for _, id := range ids {
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		w, err := c.reconcile(rctx, id)
		cancel()
		wrote = wrote || w
		if err != nil && first == nil {
			first = fmt.Errorf("rollout %d: %w", id, err)
		}
	}
	if wrote {
		c.cfg.Published()
	}
	return first
}

// evaluation is one verdict with what it saw.
type evaluation struct {
	verdict judge.Verdict
	windows Windows
}

func (c *Controller) due(r Rollout, now time.Time) bool {
	if !r.Active() || r.Paused || r.StepStartedAt == nil || (r.State != StateProgressing && r.State != StateAwaitingApproval) {
		return false
	}
	interval := time.Duration(r.EvaluationIntervalSeconds * float64(time.Second))
	return r.LastEvaluatedAt == nil || now.Sub(*r.LastEvaluatedAt) >= interval
}

// evaluate reads both versions' windows and asks the judge. It runs outside
// any transaction: ClickHouse may be slow, and row locks must not wait on it.
func (c *Controller) evaluate(ctx context.Context, r Rollout, now time.Time) evaluation {
	unavailable := func(w Windows, err error) evaluation {
		// Missing data never advances; nor does it roll back.
		return evaluation{windows: w, verdict: judge.Verdict{Decision: judge.Hold, Reason: "request statistics unavailable: " + err.Error(), Checks: []judge.Check{}}}
	}
	if c.cfg.Stats == nil {
		return unavailable(Windows{From: *r.StepStartedAt, To: now}, errors.New("no request statistics store is configured"))
	}
	// The window ends where the statistics have arrived, not at now: they
	// reach ClickHouse a flush interval and an ingest late, and a window
	// no longer than that lag read up to now would never hold a request.
	to := now
	through, err := c.cfg.Stats.Through(ctx, r.Endpoint, r.EndpointID, *r.StepStartedAt)
	if err != nil {
		return unavailable(Windows{From: *r.StepStartedAt, To: now}, err)
	}
	if through.After(*r.StepStartedAt) && through.Before(now) {
		to = through
	}
	from := to.Add(-time.Duration(r.EvaluationWindowSeconds * float64(time.Second)))
	if r.StepStartedAt.After(from) {
		// A step is judged on its own traffic only.
		from = *r.StepStartedAt
	}
	w := Windows{From: from, To: to}
	totals, err := c.cfg.Stats.Totals(ctx, r.Endpoint, r.EndpointID, from, to)
	if err != nil {
		return unavailable(w, err)
	}
	in := judge.Input{Candidate: totals[r.ToVersion], Incumbent: totals[r.FromVersion], LLM: r.Task == "llm",
		Baked: r.BakeDeadline != nil && !now.Before(*r.BakeDeadline)}
	if r.Strategy == BlueGreen {
		// After the switch the incumbent serves nothing: the candidate is
		// held to the incumbent's last window before the switch (the
		// step's start), read again from the request statistics, which
		// keep it far longer than any rollback window.
		switchAt := *r.StepStartedAt
		window := time.Duration(r.EvaluationWindowSeconds * float64(time.Second))
		before, err := c.cfg.Stats.Totals(ctx, r.Endpoint, r.EndpointID, switchAt.Add(-window), switchAt)
		if err != nil {
			return evaluation{windows: w, verdict: judge.Verdict{Decision: judge.Hold, Reason: "request statistics before the switch unavailable: " + err.Error(), Checks: []judge.Check{}}}
		}
		in.Incumbent = before[r.FromVersion]
	}
	// A shadow's output agreement is shown beside its latency and errors
	// whether or not it gates. Drift is measured once the candidate has the
	// requests the judge needs: samples can reach ClickHouse before the
	// request statistics do, and a drift verdict on a window whose latency
	// and errors were not judged would roll back on half the evidence.
	if (r.Criteria.Drift || r.Strategy == Shadow) && c.cfg.Drift != nil && in.Candidate.Requests >= r.Criteria.MinRequests {
		d, err := c.cfg.Drift.Drift(ctx, r.Endpoint, r.EndpointID, r.ToVersion, r.FromVersion, from, to)
		if err != nil {
			// Unmeasured drift holds (the judge's "drift not measured"),
			// never rolls back.
			c.cfg.Log.Warn("rollout drift", slog.Int64("rollout", r.ID), slog.String("error", err.Error()))
		} else {
			in.Drift, w.Drift = d, d
		}
	}
	w.Candidate, w.Incumbent = summary(in.Candidate), summary(in.Incumbent)
	return evaluation{verdict: judge.Evaluate(r.Criteria, in), windows: w}
}

func summary(w judge.Window) Summary {
	s := Summary{Requests: w.Requests, Errors: w.Errors, Streams: w.Streams}
	s.P99MS, _ = judge.Quantile(w.Latency, 0.99)
	s.P99TPOTMS, _ = judge.Quantile(w.TPOT, 0.99)
	return s
}

// reconcile takes one rollout one step towards where it should be. wrote
// reports outbox rows written.
func (c *Controller) reconcile(ctx context.Context, id int64) (wrote bool, err error) {
	all, ids := system.Scope()
	row, err := db.New(c.cfg.Pool).RolloutGet(ctx, db.RolloutGetParams{ID: id, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return false, err
	}
	seen := fromRow(row)
	now := c.cfg.Clock.Now()
	var ev *evaluation
	if c.due(seen, now) {
		e := c.evaluate(ctx, seen, now)
		ev = &e
	}
	err = db.InTx(ctx, c.cfg.Pool, func(q *db.Queries) error {
		t, err := lockTx(ctx, q, id, now, system)
		if err != nil {
			return err
		}
		if t.r.Generation != seen.Generation {
			// Someone changed the rollout while the judge read; its verdict
			// was about a state that is gone. The next pass judges again.
			ev = nil
		}
		before := t.r.Generation
		if err := c.step(ctx, t, ev); err != nil {
			return err
		}
		if err := t.finish(ctx); err != nil {
			return err
		}
		wrote = t.routes || t.r.Generation != before || ev != nil
		return nil
	})
	return wrote, err
}

// step is the state machine of one pass.
func (c *Controller) step(ctx context.Context, t *tx, ev *evaluation) error {
	r := &t.r
	if !r.Active() {
		if !r.Cleaned && r.CleanupAt != nil && !t.now.Before(*r.CleanupAt) {
			return c.cleanup(ctx, t)
		}
		return nil
	}
	if r.Paused {
		return nil
	}
	if ev != nil {
		r.LastEvaluatedAt = &t.now
		r.Reason = string(ev.verdict.Decision) + ": " + ev.verdict.Reason
		if err := t.persist(ctx); err != nil {
			return err
		}
		if err := t.event(ctx, "verdict", string(ev.verdict.Decision), ev.verdict.Reason, &ev.verdict, &ev.windows); err != nil {
			return err
		}
		if ev.verdict.Decision == judge.Rollback {
			return t.rollback(ctx, "judge: "+ev.verdict.Reason)
		}
	}
	advance := ev != nil && ev.verdict.Decision == judge.Advance
	switch r.State {
	case StateStarting:
		return c.start(ctx, t)
	case StateProgressing:
		switch r.Strategy {
		case Canary:
			if advance {
				return c.advance(ctx, t)
			}
		case BlueGreen:
			// The candidate, alone after the switch, is judged against the
			// incumbent's last window before it (see evaluate): it is
			// promoted once the rollback window passed and a verdict passed
			// every check. Missing data (no statistics, too few requests)
			// holds; it never promotes.
			if advance {
				return t.promote(ctx, fmt.Sprintf("%s served 100 percent through the rollback window and passed every check; promoted", r.ToVersion))
			}
		case Shadow:
			// A shadow never serves: it runs until a person starts a
			// canary from it or rolls it back (or the judge does).
		}
	case StateAwaitingApproval:
		return c.approved(ctx, t)
	}
	return nil
}

// start waits for the candidate's replicas, then moves the first traffic.
func (c *Controller) start(ctx context.Context, t *tx) error {
	all, ids := system.Scope()
	r := &t.r
	rules, err := t.q.RoutingRuleListByEndpoint(ctx, db.RoutingRuleListByEndpointParams{EndpointID: r.EndpointID, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return err
	}
	listed := false
	for _, rule := range rules {
		listed = listed || rule.VersionID == r.ToVersionID
	}
	if !listed {
		// Weight 0: the fleet places its replicas, no request reaches it.
		if err := t.setWeights(ctx, 0, 0); err != nil {
			return err
		}
	}
	// No traffic (nor mirrored copy) moves before a candidate replica is
	// ready, whatever min_replicas says (0 is a scale-to-zero endpoint).
	want := int32(1)
	n, err := t.q.ReplicaCountReady(ctx, db.ReplicaCountReadyParams{EndpointID: r.EndpointID, VersionID: r.ToVersionID, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return err
	}
	if r.Task == graph.Task {
		// A graph version runs in the gateways: it has no replica to wait
		// for, and is ready once its routing entry is written.
		want = 0
	} else if r.Strategy == BlueGreen {
		// Fully up before the switch: the candidate takes all of the
		// incumbent's load at once, so it needs as many ready replicas as
		// the incumbent serves with now, and at least min_replicas.
		inc, err := t.q.ReplicaCountReady(ctx, db.ReplicaCountReadyParams{EndpointID: r.EndpointID, VersionID: r.FromVersionID, AllTeams: all, TeamIDs: ids})
		if err != nil {
			return err
		}
		want = max(want, r.MinReplicas, inc.Ready)
	}
	if n.Ready < want {
		msg := fmt.Sprintf("waiting for %d ready replicas of %s (%d ready, %d placed)", want, r.ToVersion, n.Ready, n.Placed)
		if r.Reason != msg {
			r.Reason = msg
			return t.persist(ctx)
		}
		return nil
	}
	first := r.Steps[0]
	switch {
	case r.Strategy == Shadow:
		if err := t.setWeights(ctx, 0, float64(first.Percent)); err != nil {
			return err
		}
		r.State = StateProgressing
		t.startStep(0)
		return t.save(ctx, "step", fmt.Sprintf("%s ready; mirroring %d percent of requests to it", r.ToVersion, first.Percent))
	case r.ApprovalStep() == 0:
		r.State = StateAwaitingApproval
		return t.save(ctx, "await_approval", fmt.Sprintf("%s ready; the switch to 100 percent waits for a team admin other than %s", r.ToVersion, r.Initiator))
	}
	if err := t.setWeights(ctx, first.Percent, 0); err != nil {
		return err
	}
	r.State = StateProgressing
	t.startStep(0)
	return t.save(ctx, "step", fmt.Sprintf("%s ready; step 1: %d percent", r.ToVersion, first.Percent))
}

// advance moves a canary to its next step, or to the approval the step to
// 100 percent needs.
func (c *Controller) advance(ctx context.Context, t *tx) error {
	r := &t.r
	next := r.StepIndex + 1
	if next >= len(r.Steps) {
		return t.promote(ctx, "every step passed; promoted")
	}
	if next == r.ApprovalStep() {
		r.State = StateAwaitingApproval
		if err := t.save(ctx, "await_approval", fmt.Sprintf("step %d passed; 100 percent waits for a team admin other than %s", r.StepIndex+1, r.Initiator)); err != nil {
			return err
		}
		// An approval given before a restart still counts.
		return c.approved(ctx, t)
	}
	// The candidate is warmed before the weight moves: the fleet places
	// its replicas for the next step's share once this step has baked
	// (fleet's canary sizing); until they are ready the step waits.
	all, ids := system.Scope()
	total, err := t.q.EndpointReplicaTotal(ctx, db.EndpointReplicaTotalParams{EndpointID: r.EndpointID, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return err
	}
	need := max(1, int32(math.Ceil(float64(total)*float64(r.Steps[next].Percent)/100-1e-9)))
	if r.Task == graph.Task {
		need = 0 // no replica: see start
	}
	n, err := t.q.ReplicaCountReady(ctx, db.ReplicaCountReadyParams{EndpointID: r.EndpointID, VersionID: r.ToVersionID, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return err
	}
	if n.Ready < need {
		msg := fmt.Sprintf("step %d passed; warming %s for %d percent: %d of %d replicas ready", r.StepIndex+1, r.ToVersion, r.Steps[next].Percent, n.Ready, need)
		if r.Reason != msg {
			r.Reason = msg
			return t.persist(ctx)
		}
		return nil
	}
	if err := t.setWeights(ctx, r.Steps[next].Percent, 0); err != nil {
		return err
	}
	t.startStep(next)
	return t.save(ctx, "advance", fmt.Sprintf("step %d: %d percent", next+1, r.Steps[next].Percent))
}

// approved acts on an approval of the step to 100 percent, once it exists.
func (c *Controller) approved(ctx context.Context, t *tx) error {
	all, ids := system.Scope()
	r := &t.r
	aps, err := t.q.ApprovalList(ctx, db.ApprovalListParams{RolloutID: r.ID, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return err
	}
	for _, a := range aps {
		if int(a.StepIndex) != r.ApprovalStep() || a.Decision != "approve" {
			continue
		}
		if r.Strategy == BlueGreen {
			if err := t.setWeights(ctx, 100, 0); err != nil {
				return err
			}
			r.State = StateProgressing
			t.startStep(0)
			return t.save(ctx, "switch", fmt.Sprintf("approved by %s; %s serves 100 percent, %s kept for the rollback window", a.Approver, r.ToVersion, r.FromVersion))
		}
		return t.promote(ctx, fmt.Sprintf("approved by %s; %s serves 100 percent", a.Approver, r.ToVersion))
	}
	return nil
}

// cleanup removes the losing version from the routing table once the keep
// time has passed (its replicas then stop), unless an active rollout of the
// endpoint uses it again or it carries traffic.
func (c *Controller) cleanup(ctx context.Context, t *tx) error {
	all, ids := system.Scope()
	r := &t.r
	loserID, loser := r.ToVersionID, r.ToVersion
	if r.State == StatePromoted {
		loserID, loser = r.FromVersionID, r.FromVersion
	}
	msg := "kept " + loser + " in the routing table: "
	active, err := t.q.RolloutActiveByEndpoint(ctx, db.RolloutActiveByEndpointParams{EndpointID: r.EndpointID, AllTeams: all, TeamIDs: ids})
	inUse := err == nil && active.ToVersion == loser
	rules, err := t.q.RoutingRuleListByEndpoint(ctx, db.RoutingRuleListByEndpointParams{EndpointID: r.EndpointID, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return err
	}
	for _, rule := range rules {
		if rule.VersionID != loserID {
			continue
		}
		switch {
		case inUse:
			msg += fmt.Sprintf("rollout %d uses it", active.ID)
		case rule.Weight > 0 || rule.ShadowPercent > 0:
			msg += "it carries traffic again"
		default:
			if err := route.Lock(ctx, t.q, r.EndpointID); err != nil {
				return err
			}
			if err := t.q.RoutingRuleDeleteVersion(ctx, db.RoutingRuleDeleteVersionParams{EndpointID: r.EndpointID, VersionID: loserID,
				AllTeams: all, TeamIDs: ids}); err != nil {
				return err
			}
			t.routes = true
			msg = "removed " + loser + " from the routing table; its replicas stop"
		}
	}
	if msg == "kept "+loser+" in the routing table: " {
		msg = loser + " had already left the routing table"
	}
	r.Cleaned = true
	return t.save(ctx, "cleanup", msg)
}
