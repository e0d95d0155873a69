package autoscaler

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"modelplane/audit"
	"modelplane/auth"
	"modelplane/autoscale"
	"modelplane/busapi"
	"modelplane/db"
	"modelplane/outbox"
	"modelplane/replica"
	"modelplane/service"
	"modelplane/tracing"
)

// DefaultInterval is how often the autoscaler evaluates every endpoint
// (DESIGN.md section 17: every 2 to 5 seconds).
const DefaultInterval = 2 * time.Second

// staleMetrics is how old a replica's last heartbeat metrics may be before
// the replica counts as reporting no signal at all: a replica whose node
// stopped sending metrics is missing data, never zero load.
const staleMetrics = 15 * time.Second

// EventKind is the Kind of the autoscaler's busapi.Event on
// mp.events.<team> (a freeze and its end), and AuditFrozen and
// AuditResumed the audit actions recorded with them.
const (
	EventKind    = "autoscale"
	AuditFrozen  = "autoscale.frozen"
	AuditResumed = "autoscale.resumed"
)

var autoscaler = auth.System("autoscaler")

// Loop evaluates every routed endpoint's replica count from its replicas'
// heartbeat metrics and its policy (package autoscale), stores each count
// and every decision that changed one, and wakes the fleet's reconciler,
// which places what the count asks for. It keeps each
// endpoint's autoscale.State in memory; the count itself is in PostgreSQL
// (autoscale_counts), so a new leader resumes from it. Run it under a
// leader lease (db.Lease): two evaluating at once would each keep windows
// of their own.
type Loop struct {
	service.Runner
	pool     *pgxpool.Pool
	clock    quartz.Clock
	log      *slog.Logger
	interval time.Duration
	grace    time.Duration
	// changed is called after a round changed a count (it wakes the
	// reconciler) and published after it wrote an event to the outbox.
	changed, published func()

	historyOf HistoryFunc
	tracer    trace.Tracer

	mu        sync.Mutex
	states    map[int64]*scaleState
	histories map[int64]*history
	// rates are the ready replicas' requests per second over
	// autoscale.RateWindow, from the counters in their heartbeats.
	rates autoscale.Counters
}

// scaleState is what the autoscaler remembers of one endpoint.
type scaleState struct {
	st autoscale.State
	// key is the policy the state was built under; another starts afresh.
	key string
}

// Options configure a Loop. Clock and Grace are required.
type Options struct {
	// Clock times the rounds and is the time every decision is made at:
	// the fleet's clock, so that counts and wakes agree.
	Clock quartz.Clock
	// Log receives warnings and decisions (nil: discarded).
	Log *slog.Logger
	// Interval is how often a round runs (<= 0: DefaultInterval).
	Interval time.Duration
	// Grace is the fleet's wake grace (fleet.Fleet.Grace): how long a
	// woken endpoint at zero counts as wanting a replica, and the default
	// scale-to-zero grace of a policy.
	Grace time.Duration
	// Changed is called when a round changed a count (it wakes the
	// reconciler), Published when it wrote outbox rows; either may be nil.
	Changed, Published func()
	// History is the source of request history of predictive policies
	// (nil: their forecast is missing, "no history source").
	History HistoryFunc
	// Tracer traces each round (package tracing); nil traces nothing.
	Tracer trace.TracerProvider
}

// New returns a Loop over the endpoints in pool.
func New(pool *pgxpool.Pool, o Options) *Loop {
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Tracer == nil {
		o.Tracer = tracing.Off()
	}
	return &Loop{pool: pool, clock: o.Clock, log: o.Log, interval: o.Interval, grace: o.Grace, changed: o.Changed,
		published: o.Published, historyOf: o.History, states: map[int64]*scaleState{}, histories: map[int64]*history{},
		tracer: o.Tracer.Tracer("modelplane/autoscaler")}
}

// Start evaluates in the background every interval until Stop.
func (a *Loop) Start(ctx context.Context) error {
	return a.Go(ctx, func(ctx context.Context) {
		service.Tick(ctx, a.clock, a.interval, nil, func(ctx context.Context) {
			ectx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if _, err := a.Evaluate(ectx); err != nil && ctx.Err() == nil {
				a.log.Warn("autoscale", slog.String("error", err.Error()))
			}
		})
	})
}

// Round is what one evaluation did.
type Round struct {
	Endpoints int
	// Decisions are those that changed a count, by endpoint name.
	Decisions map[string]autoscale.Decision
	// Events are the freezes and resumptions raised, by endpoint name.
	Events map[string]string
}

// Evaluate runs one round over every routed endpoint at the clock's now,
// traced as an autoscaler.round span that counts the endpoints evaluated,
// the counts changed and the events raised.
func (a *Loop) Evaluate(ctx context.Context) (Round, error) {
	ctx, span := a.tracer.Start(ctx, "autoscaler.round")
	defer span.End()
	round, err := a.evaluate(ctx)
	span.SetAttributes(attribute.Int("autoscaler.endpoints", round.Endpoints), attribute.Int("autoscaler.decisions", len(round.Decisions)),
		attribute.Int("autoscaler.events", len(round.Events)))
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	return round, err
}

func (a *Loop) evaluate(ctx context.Context) (Round, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.clock.Now()
	q := db.New(a.pool)
	eps, err := q.AutoscaleEndpointList(ctx)
	if err != nil {
		return Round{}, fmt.Errorf("autoscale: %w", err)
	}
	reps, err := q.AutoscaleReplicaList(ctx)
	if err != nil {
		return Round{}, fmt.Errorf("autoscale: %w", err)
	}
	type load struct{ ready []autoscale.Sample }
	loads := map[int64]*load{}
	for _, r := range reps {
		l := loads[r.EndpointID]
		if l == nil {
			l = &load{}
			loads[r.EndpointID] = l
		}
		if r.State == busapi.StateReady {
			l.ready = append(l.ready, sampleOf(r.Name, replica.ParseMetrics(r.Metrics), now, &a.rates))
		}
	}
	a.rates.Retain()
	round := Round{Endpoints: len(eps), Decisions: map[string]autoscale.Decision{}, Events: map[string]string{}}
	type write struct {
		e       db.AutoscaleEndpointListRow
		d       autoscale.Decision
		desired int
	}
	var writes []write
	seen := map[int64]bool{}
	for _, e := range eps {
		seen[e.ID] = true
		p := autoscale.StoredPolicy(e.AutoscalePolicy, e.Task, e.GPU, e.MinReplicas, e.MaxReplicas, a.grace)
		key := fmt.Sprintf("%s|%d|%d", e.AutoscalePolicy, e.MinReplicas, e.MaxReplicas)
		s := a.states[e.ID]
		if s == nil || s.key != key {
			s = &scaleState{key: key}
			a.states[e.ID] = s
		}
		l := loads[e.ID]
		if l == nil {
			l = &load{}
		}
		current := 0
		if e.Desired != nil {
			current = int(*e.Desired)
		} else {
			// Never decided: what the reconciler aims for without a
			// decision, min_replicas, or one for a woken endpoint at 0.
			current = int(e.MinReplicas)
			if current == 0 && e.WokenAt != nil && now.Sub(*e.WokenAt) < a.grace {
				current = 1
			}
		}
		in := autoscale.Input{Now: now, Current: current, Ready: l.ready, Forecast: a.forecast(ctx, &p, e.Name, e.ID, now)}
		if e.WokenAt != nil {
			in.LastRequest = *e.WokenAt
			in.Wake = current == 0 && now.Sub(*e.WokenAt) < a.grace
		}
		// A new state (a leader that just took over, a changed policy)
		// scales nothing down for its first window (autoscale.State).
		d := s.st.Decide(&p, in)
		if d.Event != "" {
			round.Events[e.Name] = d.Event
		}
		if d.Changed {
			round.Decisions[e.Name] = d
		}
		// A count is stored only when a decision changes it: before the
		// first, the reconciler derives the same count itself.
		if d.Changed || d.Event != "" {
			writes = append(writes, write{e: e, d: d, desired: d.Desired})
		}
	}
	for id := range a.states {
		if !seen[id] {
			delete(a.states, id) // the endpoint is gone or routes nothing
			delete(a.histories, id)
		}
	}
	if len(writes) == 0 {
		return round, nil
	}
	events := false
	err = db.InTx(ctx, a.pool, func(q *db.Queries) error {
		events = false
		for _, w := range writes {
			if w.d.Changed {
				if err := q.AutoscaleCountSet(ctx, db.AutoscaleCountSetParams{EndpointID: w.e.ID, Desired: int32(w.desired), DecidedAt: now}); err != nil {
					return err
				}
			}
			if w.d.Changed {
				raw, err := json.Marshal(w.d)
				if err != nil {
					return err
				}
				if err := q.AutoscaleDecisionInsert(ctx, db.AutoscaleDecisionInsertParams{TeamID: w.e.TeamID, EndpointID: w.e.ID, At: now,
					Before: int32(w.d.Current), After: int32(w.d.Desired), Signal: string(w.d.Signal), Reason: w.d.Reason, Decision: raw}); err != nil {
					return err
				}
			}
			if w.d.Event != "" {
				if err := a.raise(ctx, q, w.e, w.d, now); err != nil {
					return err
				}
				events = true
			}
		}
		return nil
	})
	if err != nil {
		return Round{}, fmt.Errorf("autoscale: %w", err)
	}
	for name, d := range round.Decisions {
		a.log.Info("autoscale", slog.String("endpoint", name), slog.Int("from", d.Current), slog.Int("to", d.Desired),
			slog.String("reason", d.Reason))
	}
	if len(round.Decisions) > 0 && a.changed != nil {
		a.changed()
	}
	if events && a.published != nil {
		a.published()
	}
	return round, nil
}

// raise records a freeze (or its end) in the audit log and as an event on
// the team's subject.
func (a *Loop) raise(ctx context.Context, q *db.Queries, e db.AutoscaleEndpointListRow, d autoscale.Decision, now time.Time) error {
	action, typ := AuditResumed, "resumed"
	if d.Frozen {
		action, typ = AuditFrozen, "frozen"
	}
	a.log.Warn("autoscale event", slog.String("endpoint", e.Name), slog.String("event", d.Event))
	if err := audit.Record(ctx, q, autoscaler, audit.Entry{TeamID: &e.TeamID, Action: action, ObjectType: "endpoint",
		ObjectName: e.Name, After: d}); err != nil {
		return err
	}
	return outbox.Event(ctx, q, e.Team, busapi.Event{Kind: EventKind, ID: e.ID, Name: e.Name, Type: typ,
		State: fmt.Sprintf("%d replicas", d.Desired), Message: d.Event, At: now.UTC()})
}

// sampleOf is what ready replica name's latest metrics say for each
// signal. Metrics older than staleMetrics (or none at all) report nothing,
// and neither does a field the replica's runtime does not report
// (replica.Metrics.Absent), so a signal no fresh replica reports is
// missing, never zero; the Sample says why, for the freeze's reason.
// Requests, tokens and prompt tokens per second are rates' over
// autoscale.RateWindow, from the replica's counters. Until rates has two
// readings of a replica that was there before (a leader's first round),
// requests/s are the stored rate between its last two heartbeats and
// tokens/s the agent's between its last two readings, and prompt tokens/s
// are missing; none is made across a heartbeat whose counter could not be
// read.
func sampleOf(name string, m replica.Metrics, now time.Time, rates *autoscale.Counters) autoscale.Sample {
	var s autoscale.Sample
	if m.ObservedAtMS == 0 || now.Sub(time.UnixMilli(m.ObservedAtMS)) > staleMetrics {
		why := "no metrics from replica " + name + " yet"
		if m.ObservedAtMS != 0 {
			why = fmt.Sprintf("no metrics from replica %s for %s", name, now.Sub(time.UnixMilli(m.ObservedAtMS)).Round(time.Second))
		}
		for _, sig := range autoscale.Signals {
			s.Missing(sig, why)
		}
		return s
	}
	if rps, ok := windowRate(rates, name, busapi.MetricRequests, m, m.Requests, now); ok {
		m.RPS = rps
	}
	if tps, ok := windowRate(rates, name, busapi.MetricTokens, m, m.Tokens, now); ok {
		m.TokensPerSecond = tps
	}
	prompt, ok := windowRate(rates, name, busapi.MetricPromptTokens, m, m.PromptTokens, now)
	promptWhy := ""
	if !ok {
		promptWhy = fmt.Sprintf("%s of replica %s read once so far", busapi.MetricPromptTokens, name)
	}
	for _, f := range []struct {
		sig   autoscale.Signal
		field string
		v     float64
		// early says why a reported field makes no value yet.
		early string
	}{
		{autoscale.RPS, replica.MetricRPS, m.RPS, ""},
		{autoscale.InFlight, busapi.MetricInFlight, float64(m.InFlight), ""},
		{autoscale.QueueDepth, busapi.MetricQueueDepth, float64(m.QueueDepth), ""},
		{autoscale.BatchQueueMS, busapi.MetricBatchQueueMS, m.BatchQueueMS, ""},
		{autoscale.GPUUtil, busapi.MetricGPUUtil, m.GPUUtil, ""},
		{autoscale.KVCache, busapi.MetricKVUsedPct, m.KVUsedPct / 100, ""},
		{autoscale.TokensPerSecond, busapi.MetricTokensPerSecond, m.TokensPerSecond, ""},
		{autoscale.PromptTokensPerSecond, busapi.MetricPromptTokens, prompt, promptWhy},
	} {
		switch {
		case !m.Reports(f.field):
			why := fmt.Sprintf("%s not reported by replica %s", f.field, name)
			if m.Runtime != "" {
				why += " (" + m.Runtime + ")"
			}
			s.Missing(f.sig, why)
		case f.early != "":
			s.Missing(f.sig, f.early)
		default:
			s.Set(f.sig, f.v)
		}
	}
	return s
}

// windowRate is rates' measure over autoscale.RateWindow of replica name's
// counter field (a busapi.Metric* name), whose reading in m is n; false
// while rates cannot tell yet, or when this heartbeat did not report the
// counter, which then starts over.
func windowRate(rates *autoscale.Counters, name, field string, m replica.Metrics, n int64, now time.Time) (float64, bool) {
	key := name + "\x00" + field
	if !m.Reports(field) {
		rates.Reset(key, now)
		return 0, false
	}
	return rates.Rate(key, now, time.UnixMilli(m.ObservedAtMS), n)
}
