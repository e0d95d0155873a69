package chargeback_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/coder/quartz"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/auth"
	"modelplane/billing"
	"modelplane/bus"
	"modelplane/busapi"
	"modelplane/chargeback"
	"modelplane/db"
	"modelplane/ingest"
	"modelplane/internal/chtest"
	"modelplane/internal/natstest"
	"modelplane/internal/pgtest"
	"modelplane/internal/wait"
)

// TestBookedRateNeverRepricesStoredSeconds goes through the real stamping
// path: rates are booked with billing.Book.Create, usage goes through
// MP_USAGE and the ingest consumer (which prices each second with
// billing.LoadRates as the control plane configures it), and reports read
// ClickHouse. A minute priced at $3.60/h keeps its cost after a $7.20/h
// rate is booked; a rate effective at a second already metered is refused;
// seconds after the new rate's start are priced at it.
func TestBookedRateNeverRepricesStoredSeconds(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, ch := pgtest.New(t), chtest.New(t)
	_, nc := natstest.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Ensure(ctx, js); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	clk := quartz.NewMock(t)
	clk.Set(t0.Add(-billing.RateLead - time.Hour))
	admin := &auth.Principal{Name: "ops", PlatformRole: auth.RolePlatformAdmin}
	book := billing.NewBook(pool, clk)
	if _, err := book.Create(ctx, admin, billing.Rate{GPUType: "A100-80GB", Profile: busapi.ProfileFull, UUSDPerHour: 3_600_000, EffectiveFrom: t0}); err != nil {
		t.Fatal(err)
	}

	// The replica the agent meters, as placement would have recorded it.
	if err := billing.RecordAllocations(ctx, db.New(pool), []ingest.Allocation{{Node: "n1", Replica: "r1", GPUType: "A100-80GB",
		Profile: busapi.ProfileFull, Team: "risk", Endpoint: "fraud", Model: "m", Version: "v1", From: t0.Add(-24 * time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	// ingestMinute runs a fresh consumer (it loads the rate table before its
	// first message, as after a control plane start) over 60 seconds from
	// start and waits until ClickHouse holds want raw rows.
	ingestMinute := func(start time.Time, want uint64) {
		t.Helper()
		u, err := ingest.NewUsage(ingest.UsageConfig{JS: js, CH: ch, Log: slog.New(slog.DiscardHandler),
			LoadRates:       func(ctx context.Context) (ingest.Pricer, error) { return billing.LoadRates(ctx, db.New(pool)) },
			LoadAllocations: billing.LoadAllocations(db.New(pool)), FlushInterval: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := u.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		defer u.Stop()
		for s := range int64(60) {
			ts := start.Unix() + s
			b := busapi.UsageBatch{ID: fmt.Sprintf("n1-%d-0", ts), Node: "n1", Records: []busapi.Usage{{Time: ts, Node: "n1", GPU: 0,
				GPUType: "A100-80GB", Profile: busapi.ProfileFull, Team: "risk", Endpoint: "fraud", Model: "m", Version: "v1", Replica: "r1"}}}
			data, err := json.Marshal(b)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := js.Publish(ctx, busapi.UsageSubject("n1"), data, jetstream.WithMsgID(b.ID)); err != nil {
				t.Fatal(err)
			}
		}
		var n uint64
		wait.Eventually(t, 30*time.Second, func() bool {
			if err := ch.QueryRow(ctx, "SELECT count() FROM gpu_usage").Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n == want
		}, "gpu_usage holds %v rows, want %d", wait.Show(func() any { return n }), want)
	}
	svc := chargeback.New(ch, db.New(pool), clk)
	cost := func(from, to time.Time) int64 {
		t.Helper()
		rep, err := svc.Report(ctx, admin, chargeback.Query{From: from, To: to})
		if err != nil {
			t.Fatal(err)
		}
		return rep.Total.CostMicroUSD
	}

	ingestMinute(t0, 60)
	first := t0.Add(time.Minute)
	clk.Set(t0.Add(2 * time.Minute))
	if got := cost(t0, first); got != 60_000 { // 60 s at $3.60/h = $0.001/s
		t.Fatalf("first minute = %d micro-USD, want 60,000", got)
	}
	// A rate from a metered second is refused; a rate booked now starts
	// RateLead ahead.
	if _, err := book.Create(ctx, admin, billing.Rate{GPUType: "A100-80GB", Profile: busapi.ProfileFull, UUSDPerHour: 7_200_000,
		EffectiveFrom: t0.Add(30 * time.Second)}); err == nil {
		t.Fatal("a rate effective at a metered second was booked")
	}
	next := clk.Now().Add(billing.RateLead)
	if _, err := book.Create(ctx, admin, billing.Rate{GPUType: "A100-80GB", Profile: busapi.ProfileFull, UUSDPerHour: 7_200_000,
		EffectiveFrom: next}); err != nil {
		t.Fatal(err)
	}
	if got := cost(t0, first); got != 60_000 {
		t.Errorf("first minute after booking $7.20/h = %d micro-USD, want 60,000 (stored seconds are never repriced)", got)
	}
	ingestMinute(next, 120)
	clk.Set(next.Add(time.Hour))
	if got := cost(t0, first); got != 60_000 {
		t.Errorf("first minute after seconds at the new rate = %d micro-USD, want 60,000", got)
	}
	if got := cost(t0, next.Add(time.Minute)); got != 60_000+120_000 {
		t.Errorf("both minutes = %d micro-USD, want 180,000 (60 s at $3.60/h, 60 s at $7.20/h)", got)
	}
}
