package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"modelplane/agent/proto"
	"modelplane/billing"
	"modelplane/controlplane"
	"modelplane/db"
	"modelplane/demo/backfill"
	"modelplane/ingest"
)

// The demo's past: `modelplane dev` backfills a week of usage, request
// statistics and prediction samples of the demo endpoints before its
// fleet starts (package demo/backfill builds the rows, package ingest
// stores them as it stores streamed ones). The week ends where the first
// run of a dev directory began, recorded in backfillFile, so later runs
// add nothing: each day of each table is stored once, and a run stopped
// halfway stores only the days still missing the next time.

// backfillFile records a dev directory's backfilled period.
const backfillFile = "demo-backfill.json"

// backfillDays is how much history the demo has: the drift reference's
// default window (seven days).
const backfillDays = 7

type backfillPeriod struct {
	To time.Time `json:"to"`
}

// backfillDemo stores whatever of the demo's week ClickHouse lacks.
func backfillDemo(ctx context.Context, cp *controlplane.ControlPlane, ch driver.Conn, dir string, now time.Time) error {
	path := filepath.Join(dir, backfillFile)
	var period backfillPeriod
	if b, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(b, &period); err != nil {
			return fmt.Errorf("%s: %w (delete it to backfill afresh)", path, err)
		}
	} else if errors.Is(err, os.ErrNotExist) {
		period.To = now.UTC().Truncate(time.Hour)
		b, _ := json.Marshal(period)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return err
		}
	} else {
		return err
	}
	plan, err := demoBackfillPlan(ctx, cp, period.To)
	if err != nil {
		return err
	}
	rates, err := billing.LoadRates(ctx, db.New(cp.Pool))
	if err != nil {
		return fmt.Errorf("cost rates: %w", err)
	}
	from := plan.Day(0)
	tables := []struct {
		query string
		store func(d int) error
	}{
		{`SELECT intDiv(toUInt32(ts) - ?, 86400) AS d FROM gpu_usage WHERE ts >= toDateTime(?) AND ts < toDateTime(?)
			AND batch_id LIKE 'demo-backfill/%' GROUP BY d`, func(d int) error {
			_, err := ingest.StoreUsage(ctx, ch, rates, plan.Usage(d))
			return err
		}},
		{`SELECT intDiv(toUInt32(window_start) - ?, 86400) AS d FROM request_stats WHERE window_start >= toDateTime(?)
			AND window_start < toDateTime(?) AND gateway = 'demo-backfill' GROUP BY d`, func(d int) error {
			return ingest.StoreReqStats(ctx, ch, plan.Stats(d))
		}},
		{`SELECT intDiv(toUInt32(ts) - ?, 86400) AS d FROM prediction_samples WHERE ts >= toDateTime(?) AND ts < toDateTime(?)
			AND request_id LIKE 'demo-backfill/%' GROUP BY d`, func(d int) error {
			return ingest.StorePredictionSamples(ctx, ch, plan.Samples(d))
		}},
	}
	for _, t := range tables {
		have, err := backfilledDays(ctx, ch, t.query, from, plan.To)
		if err != nil {
			return fmt.Errorf("demo backfill: %w", err)
		}
		for d := range plan.Days {
			if have[d] {
				continue
			}
			if err := t.store(d); err != nil {
				return fmt.Errorf("demo backfill: %w", err)
			}
		}
	}
	return nil
}

// backfilledDays runs a query of the days (since from) holding backfilled
// rows.
func backfilledDays(ctx context.Context, ch driver.Conn, q string, from, to time.Time) (map[int]bool, error) {
	rows, err := ch.Query(ctx, q, from.Unix(), from.Unix(), to.Unix())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	have := map[int]bool{}
	for rows.Next() {
		var d int64
		if err := rows.Scan(&d); err != nil {
			return nil, err
		}
		have[int(d)] = true
	}
	return have, rows.Err()
}

// demoBackfillPlan is the week of the demo endpoints as dev runs them: each
// at its minimum replicas, of its first version, on the nodes dev starts.
func demoBackfillPlan(ctx context.Context, cp *controlplane.ControlPlane, to time.Time) (backfill.Plan, error) {
	plan := backfill.Plan{To: to, Days: backfillDays, Seed: 14}
	for _, m := range demoModels {
		e, err := cp.Endpoints.Get(ctx, system, m.endpoint.Name)
		if err != nil {
			return plan, err
		}
		v := m.versions[0]
		be := backfill.Endpoint{ID: e.ID, Name: e.Name, Team: e.Team, Model: e.Model, Version: m.endpoint.Version,
			Chat: m.spec.Task == "llm"}
		switch m.endpoint.Name {
		case "fraud-scoring":
			be.PeakRPS, be.LatencyMS, be.SamplesPerHour = 6, 4, 20
			be.FeatureNames, be.Sample = demoFraudFeatures, demoFraudSample
		default:
			be.PeakRPS, be.LatencyMS, be.TPOTMS = 0.5, 180, 16
		}
		for i := range int(max(e.MinReplicas, 1)) {
			rep := backfill.Replica{Name: fmt.Sprintf("%s-backfill-%d", e.Name, i+1), Profile: e.InstanceProfile}
			if e.InstanceProfile == "cpu" {
				rep.Node, rep.GPUType, rep.Profile = cpuNodeName(i%2), proto.CPUType, proto.ProfileCPU
				rep.MemoryMB = int(max(v.Resources.MemoryMB, 512))
				for c := range int(max(v.Resources.CPUCores, 1)) {
					rep.Slots = append(rep.Slots, proto.Slot{Slice: c})
				}
			} else {
				// The MIG node of dev's fleet (gpu-node-04, H100s).
				rep.Node, rep.GPUType, rep.MemoryMB = "gpu-node-04", "H100-80GB", int(v.Resources.GPUMemoryMB)
				rep.Slots = []proto.Slot{{GPU: len(plan.Endpoints), Slice: i}}
			}
			be.Replicas = append(be.Replicas, rep)
		}
		plan.Endpoints = append(plan.Endpoints, be)
	}
	return plan, nil
}

// demoFraudFeatures and demoFraudSample draw the fraud endpoint's sampled
// predictions: the demo's transactions (the traffic generator's, before
// any drift), scored as the stable version does.
var demoFraudFeatures = []string{"amount", "merchant_category", "country"}

func demoFraudSample(r *rand.Rand) proto.SampleInstance {
	tx := demoTransaction(r, 0)
	amount, cat, country := tx["amount"].(float64), tx["merchant_category"].(string), tx["country"].(string)
	z := -3.2 + 0.8*math.Log1p(amount/100)
	if cat == "electronics" || cat == "gambling" {
		z += 1.2
	}
	score := 1 / (1 + math.Exp(-z-0.4*r.NormFloat64()))
	label := "legit"
	if score >= 0.5 {
		label = "fraud"
	}
	return proto.SampleInstance{Num: []float64{amount, 0, 0}, Str: []string{"", cat, country}, Score: score, Label: label}
}
