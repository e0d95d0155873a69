package drift_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/coder/quartz"
	"github.com/prometheus/client_golang/prometheus"

	"modelplane/auth"
	"modelplane/busapi"
	"modelplane/drift"
	"modelplane/drift/stat"
	"modelplane/internal/chtest"
	"modelplane/internal/eventtest"
	"modelplane/internal/pgtest"
)

// TestCheckerKeepsFiredAlertsWithoutData: a fired alert is not "resolved"
// by a gap in the samples (not enough data says nothing); it resolves,
// with an event saying why, when its version leaves the endpoint.
func TestCheckerKeepsFiredAlertsWithoutData(t *testing.T) {
	t.Parallel()
	pool, ch := pgtest.New(t), chtest.New(t)
	ctx := context.Background()
	seed(t, pool, "fraud")
	t0 := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	garbage(t, ch, "fraud", endpointID(t, pool, "fraud"), t0, 1000)
	events := eventtest.New(t, pool, busapi.EventsSubject("risk"))
	clk := quartz.NewMock(t)
	clk.Set(t0)
	c, err := drift.NewChecker(pool, drift.NewReader(ch, drift.ReaderConfig{}), nil, quiet, clk, prometheus.NewRegistry(),
		drift.CheckerConfig{AlertAfter: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []time.Duration{0, 10 * time.Minute} {
		clk.Set(t0.Add(step))
		if err := c.Check(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if evs := events.Next(t); len(evs) != 1 || evs[0].Type != "alert" {
		t.Fatalf("events = %+v, want the alert", evs)
	}

	// Three hours on, no sample is in the current window.
	clk.Set(t0.Add(3 * time.Hour))
	if err := c.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if evs := events.Next(t); len(evs) != 0 {
		t.Errorf("events without data = %+v, want none (not enough data resolves nothing)", evs)
	}
	admin := &auth.Principal{Name: "admin", PlatformRole: auth.RolePlatformAdmin}
	svc := drift.NewService(pool, drift.NewReader(ch, drift.ReaderConfig{}), clk)
	if _, alerts, err := svc.History(ctx, admin, "fraud", t0); err != nil || len(alerts) != 1 || alerts[0].FiredAt == nil {
		t.Errorf("alerts without data = %+v (%v), want v24's still fired", alerts, err)
	}

	// v24 leaves the endpoint: its fired alert resolves, saying why.
	if _, err := pool.Exec(ctx, `UPDATE routing_rules SET weight = CASE WHEN weight = 5 THEN 0 ELSE 100 END`); err != nil {
		t.Fatal(err)
	}
	if err := c.Check(ctx); err != nil {
		t.Fatal(err)
	}
	evs := events.Next(t)
	if len(evs) != 1 || evs[0].Type != "resolved" || evs[0].State != "v24 "+stat.MetricW1 || !strings.Contains(evs[0].Message, "no longer serves") {
		t.Errorf("events after v24 left = %+v, want its alert resolved because it no longer serves", evs)
	}
	if _, alerts, err := svc.History(ctx, admin, "fraud", t0); err != nil || len(alerts) != 0 {
		t.Errorf("alerts after v24 left = %+v (%v), want none", alerts, err)
	}
	var audits int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE action = 'drift.resolved'`).Scan(&audits); err != nil || audits != 1 {
		t.Errorf("%d drift.resolved audit entries (%v), want 1", audits, err)
	}
}

// TestDriftIgnoresSamplesBeforeTheEndpoint: an endpoint created under the
// name of a deleted one does not inherit its samples: reports and the
// scheduled check read nothing from before its created_at.
func TestDriftIgnoresSamplesBeforeTheEndpoint(t *testing.T) {
	t.Parallel()
	pool, ch := pgtest.New(t), chtest.New(t)
	ctx := context.Background()
	seed(t, pool, "fraud")
	t0 := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	// The deleted namesake's samples, under the id they would have had
	// (the same as the endpoint's here: only created_at keeps them out).
	garbage(t, ch, "fraud", endpointID(t, pool, "fraud"), t0, 1000)
	admin := &auth.Principal{Name: "admin", PlatformRole: auth.RolePlatformAdmin}
	clk := quartz.NewMock(t)
	clk.Set(t0)
	svc := drift.NewService(pool, drift.NewReader(ch, drift.ReaderConfig{}), clk)
	rep, err := svc.Report(ctx, admin, "fraud", drift.Query{Version: "v24"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Verdict != drift.VerdictDrifting || rep.CurrentSamples != 1000 {
		t.Fatalf("before: verdict %s with %d current samples, want drifting on 1000", rep.Verdict, rep.CurrentSamples)
	}

	// The endpoint is (re)created after all of them.
	created := t0.Add(-100 * time.Millisecond)
	if _, err := pool.Exec(ctx, `UPDATE endpoints SET created_at = $1 WHERE name = 'fraud'`, created); err != nil {
		t.Fatal(err)
	}
	rep, err = svc.Report(ctx, admin, "fraud", drift.Query{Version: "v24"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Verdict != drift.VerdictNotEnough || rep.CurrentSamples != 0 || rep.ReferenceSamples != 0 || rep.Current.From.Before(created) {
		t.Errorf("after: verdict %s, samples %d/%d, current from %s; want not_enough_data on none, from no earlier than %s",
			rep.Verdict, rep.ReferenceSamples, rep.CurrentSamples, rep.Current.From, created)
	}
	// A pinned period before the endpoint existed is empty too.
	rep, err = svc.Report(ctx, admin, "fraud", drift.Query{Version: "v24",
		Current: t0.Add(-40*time.Minute).Format(time.RFC3339) + "/" + t0.Add(-30*time.Minute).Format(time.RFC3339)})
	if err != nil || rep.CurrentSamples != 0 {
		t.Errorf("pinned period before creation: %d samples (%v), want 0", rep.CurrentSamples, err)
	}

	c, err := drift.NewChecker(pool, drift.NewReader(ch, drift.ReaderConfig{}), nil, quiet, clk, prometheus.NewRegistry(),
		drift.CheckerConfig{AlertAfter: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []time.Duration{0, 5 * time.Minute} {
		clk.Set(t0.Add(step))
		if err := c.Check(ctx); err != nil {
			t.Fatal(err)
		}
	}
	scores, alerts, err := svc.History(ctx, admin, "fraud", t0)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range scores {
		if s.Enough || s.CurrentSamples != 0 || s.ReferenceSamples != 0 {
			t.Errorf("stored score %+v, want no samples of the deleted namesake", s)
			break
		}
	}
	if len(scores) == 0 || len(alerts) != 0 {
		t.Errorf("%d scores and alerts %+v; want scores stored without data and no alert", len(scores), alerts)
	}
}
