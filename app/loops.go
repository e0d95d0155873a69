package app

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"modelplane/agent/proto"
	"modelplane/auth"
	"modelplane/billing"
	"modelplane/bus"
	"modelplane/chargeback"
	"modelplane/db"
	"modelplane/drift"
	"modelplane/fleet"
	"modelplane/ingest"
	"modelplane/outbox"
	"modelplane/rollout"
	"modelplane/tenant"
	"modelplane/traffic"
)

// Advisory-lock ids of the loops that run once per control plane.
const (
	leadFleet       = 7_316_020_010
	leadOutbox      = 7_316_020_011
	leadUsageIngest = 7_316_020_012
	leadReqStats    = 7_316_020_013
	leadPredictions = 7_316_020_014
	leadIdentity    = 7_316_020_015
	leadBudgets     = 7_316_020_016
	leadSeal        = 7_316_020_017
	leadRollouts    = 7_316_020_020
	leadDrift       = 7_316_020_030
)

// identityInterval is how often the OIDC signing keys and the memberships
// are published to the gateways: a removed member's tokens stop working on
// every gateway within about this long.
const identityInterval = 3 * time.Second

// startLoops starts the control plane's background work: the JetStream
// buckets and streams, heartbeat intake (every replica), and the fleet
// reconciler, the outbox relay and the usage, request-statistics and
// prediction-sample ingests, and the drift check with sample retention
// (one leader each: an ingest's check-then-insert is exactly-once only with
// one consumer). The
// returned stop waits for all of it.
//
// rollouts is the Service the API uses; its changes wake the rollout
// controller. nil runs the controller without that (it still ticks every
// second).
func (cp controlPlane) startLoops(ctx context.Context, metrics prometheus.Registerer, rollouts *rollout.Service) (stop func(), err error) {
	js, err := jetstream.New(cp.NC)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	ectx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = bus.Ensure(ectx, js)
	cancel()
	if err != nil {
		return nil, err
	}
	// Gateways authenticate from mp_keys; keys made before it existed (or
	// whose entry was lost) are published again. The relay sends them.
	if _, err := tenant.New(cp.Pool, time.Now).PublishKeys(ctx); err != nil {
		return nil, fmt.Errorf("publish key digests: %w", err)
	}
	usage, err := ingest.NewUsage(ingest.UsageConfig{JS: js, CH: cp.CH, Log: cp.Log, Metrics: metrics,
		LoadRates: func(ctx context.Context) (ingest.Pricer, error) { return billing.LoadRates(ctx, db.New(cp.Pool)) }})
	if err != nil {
		return nil, err
	}
	reqstats, err := ingest.NewReqStats(ingest.ReqStatsConfig{JS: js, CH: cp.CH, Log: cp.Log})
	if err != nil {
		return nil, err
	}
	predictions, err := ingest.NewPredictions(ingest.PredictionsConfig{JS: js, CH: cp.CH, Log: cp.Log})
	if err != nil {
		return nil, err
	}
	// Alert events of the budget and drift checks are outbox rows; the
	// relay sends them, woken when a check wrote one.
	relay := outbox.NewRelay(cp.Pool, js, cp.Log)
	checker, err := drift.NewChecker(cp.Pool, drift.NewReader(cp.CH, drift.ReaderConfig{}), relay.Wake, cp.Log, time.Now, metrics, cp.Drift)
	if err != nil {
		return nil, err
	}
	retention := drift.NewRetention(cp.Pool, cp.CH, cp.Log, time.Now)
	ctx, cancel = context.WithCancel(ctx)
	f := fleet.New(cp.Pool, cp.Log, time.Now)
	f.SetWakeGrace(cp.WakeGrace)
	var intake *fleet.Intake
	ctl := fleet.NewController(f, cp.Log, time.Second, func() time.Time { return intake.ListeningSince() }, relay.Wake)
	intake = fleet.NewIntake(f, cp.NC, cp.Log, ctl.Wake)
	if err := intake.Start(ctx); err != nil {
		cancel()
		return nil, err
	}
	// The rollout controller writes routing entries in its own transactions
	// and wakes the relay, so a rollback leaves the candidate one relay hop
	// after it commits (docs/rollouts.md).
	// It gates classification and regression rollouts on output drift
	// (docs/rollouts.md).
	rctl := rollout.NewController(rollout.ControllerConfig{Pool: cp.Pool, Stats: traffic.NewReader(cp.CH, time.Now), Log: cp.Log,
		Drift: drift.NewGate(drift.NewReader(cp.CH, drift.ReaderConfig{})), Interval: time.Second, Published: relay.Wake})
	if rollouts != nil {
		rollouts.OnChange(rctl.Wake)
	}
	var wg sync.WaitGroup
	wg.Go(func() { db.Lead(ctx, cp.Pool, leadFleet, 2*time.Second, ctl.Run) })
	wg.Go(func() { db.Lead(ctx, cp.Pool, leadRollouts, 2*time.Second, rctl.Run) })
	wg.Go(func() {
		db.Lead(ctx, cp.Pool, leadOutbox, 2*time.Second, func(ctx context.Context) { relay.Run(ctx, 250*time.Millisecond) })
	})
	wg.Go(func() {
		db.Lead(ctx, cp.Pool, leadUsageIngest, 2*time.Second, func(ctx context.Context) {
			if err := usage.Run(ctx); err != nil && ctx.Err() == nil {
				cp.Log.Warn("usage ingest", slog.String("error", err.Error()))
			}
		})
	})
	wg.Go(func() {
		db.Lead(ctx, cp.Pool, leadReqStats, 2*time.Second, func(ctx context.Context) {
			if err := reqstats.Run(ctx); err != nil && ctx.Err() == nil {
				cp.Log.Warn("request statistics ingest", slog.String("error", err.Error()))
			}
		})
	})
	wg.Go(func() {
		db.Lead(ctx, cp.Pool, leadPredictions, 2*time.Second, func(ctx context.Context) {
			if err := predictions.Run(ctx); err != nil && ctx.Err() == nil {
				cp.Log.Warn("prediction samples ingest", slog.String("error", err.Error()))
			}
		})
	})
	if cp.OIDC != nil {
		pub := cp.OIDC.IdentityPublisher(cp.Pool)
		wg.Go(func() {
			db.Lead(ctx, cp.Pool, leadIdentity, 2*time.Second, func(ctx context.Context) { publishIdentity(ctx, js, pub, cp.Log) })
		})
	}
	// Budget alerts: one checker measures every budget each minute.
	budgets := chargeback.NewBudgets(cp.Pool, chargeback.New(cp.CH, db.New(cp.Pool), time.Now), relay.Wake, cp.Log, time.Now)
	wg.Go(func() {
		db.Lead(ctx, cp.Pool, leadBudgets, 2*time.Second, func(ctx context.Context) { budgets.Run(ctx, time.Minute) })
	})
	// Sealing days of the hourly rollup for month-long reports.
	sealer := chargeback.NewSealer(cp.CH, cp.Log, time.Now)
	wg.Go(func() {
		db.Lead(ctx, cp.Pool, leadSeal, 2*time.Second, func(ctx context.Context) { sealer.Run(ctx, 10*time.Minute) })
	})
	// The drift check and sample retention share one lease: both read
	// every endpoint and neither may run twice at once.
	wg.Go(func() {
		db.Lead(ctx, cp.Pool, leadDrift, 2*time.Second, func(ctx context.Context) {
			var both sync.WaitGroup
			both.Go(func() { checker.Run(ctx) })
			both.Go(func() { retention.Run(ctx, time.Hour) })
			both.Wait()
		})
	})
	return func() {
		cancel()
		intake.Stop()
		wg.Wait()
	}, nil
}

// publishIdentity publishes the OIDC signing keys and the memberships to
// mp_identity every identityInterval until ctx ends (one leadership term).
// It first forgets what it wrote in earlier terms and learns the keys
// already in the bucket, so that its first pass rewrites every entry and
// deletes those of users who lost their memberships while another control
// plane led or none ran.
func publishIdentity(ctx context.Context, js jetstream.JetStream, pub *auth.IdentityPublisher, log *slog.Logger) {
	var keys []string
	if kv, err := js.KeyValue(ctx, proto.BucketIdentity); err == nil {
		if lister, err := kv.ListKeys(ctx); err == nil {
			for k := range lister.Keys() {
				keys = append(keys, k)
			}
		}
	}
	// Each term starts from nothing remembered: another control plane may
	// have written different entries since this one last led.
	pub.BeginTerm(keys)
	t := time.NewTicker(identityInterval)
	defer t.Stop()
	failing := false
	for {
		if _, err := pub.Publish(ctx); err != nil && ctx.Err() == nil {
			if !failing {
				log.Warn("publish identity for the gateways", slog.String("error", err.Error()))
			}
			failing = true
		} else {
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
