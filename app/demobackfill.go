package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"modelplane/billing"
	"modelplane/busapi"
	"modelplane/controlplane"
	"modelplane/db"
	"modelplane/demo/backfill"
	"modelplane/demo/fraud"
	"modelplane/endpoint"
	"modelplane/ingest"
	"modelplane/registry"
	"modelplane/runtime/xgboost"
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
	// The demo's endpoints have served the week: drift reads no sample
	// from before an endpoint's creation (docs/drift.md), which would
	// leave the backfilled samples out of every reference window.
	q := db.New(cp.Pool)
	for _, e := range plan.Endpoints {
		if _, err := q.EndpointBackdate(ctx, db.EndpointBackdateParams{ID: e.ID, CreatedAt: plan.Day(0)}); err != nil {
			return fmt.Errorf("demo backfill: %w", err)
		}
	}
	rates, err := billing.LoadRates(ctx, q)
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
	models, err := demoModels()
	if err != nil {
		return plan, err
	}
	for _, m := range models {
		if m.live {
			continue
		}
		e, err := cp.Endpoints.Get(ctx, system, m.endpoint.Name)
		if err != nil {
			return plan, err
		}
		v := m.versions[0].spec
		be := backfill.Endpoint{ID: e.ID, Name: e.Name, Team: e.Team, Model: e.Model, Version: m.endpoint.Version,
			Chat: m.spec.Task == registry.TaskLLM}
		switch m.endpoint.Name {
		case "fraud-scoring":
			score, err := demoFraudScorer()
			if err != nil {
				return plan, err
			}
			be.PeakRPS, be.LatencyMS, be.SamplesPerHour = 6, 4, 20
			be.FeatureNames = fraud.FeatureNames()
			be.Sample = func(r *rand.Rand) busapi.SampleInstance {
				return score(fraud.NewGenerator(r.Uint64()).Next(0).Instance)
			}
		default:
			be.PeakRPS, be.LatencyMS, be.TPOTMS = 0.5, 180, 16
		}
		for i := range int(max(e.MinReplicas, 1)) {
			rep := backfill.Replica{Name: fmt.Sprintf("%s-backfill-%d", e.Name, i+1), Profile: e.InstanceProfile}
			if e.InstanceProfile == endpoint.ProfileCPU {
				rep.Node, rep.GPUType, rep.Profile = cpuNodeName(i%2), busapi.CPUType, busapi.ProfileCPU
				rep.MemoryMB = int(max(v.Resources.MemoryMB, 512))
				for c := range int(max(v.Resources.CPUCores, 1)) {
					rep.Slots = append(rep.Slots, busapi.Slot{Slice: c})
				}
			} else {
				// The MIG node of dev's fleet (gpu-node-04, H100s).
				rep.Node, rep.GPUType, rep.MemoryMB = "gpu-node-04", "H100-80GB", int(v.Resources.GPUMemoryMB)
				rep.Slots = []busapi.Slot{{GPU: len(plan.Endpoints), Slice: i}}
			}
			be.Replicas = append(be.Replicas, rep)
		}
		plan.Endpoints = append(plan.Endpoints, be)
	}
	return plan, nil
}

// demoFraudScorer scores a payment with v23 as the built-in runtime does
// (runtime/xgboost on the version's file, the features encoded natively),
// into a sample of its features and answer.
func demoFraudScorer() (func(instance map[string]any) busapi.SampleInstance, error) {
	fv, err := demoFraud()
	if err != nil {
		return nil, err
	}
	v23 := fv[0]
	dir, err := os.MkdirTemp("", "modelplane-demo-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, v23.File)
	if err := os.WriteFile(path, v23.Data, 0o600); err != nil {
		return nil, err
	}
	m, err := xgboost.Load(path)
	if err != nil {
		return nil, err
	}
	names := fraud.FeatureNames()
	threshold := v23.Serving.Output.Threshold
	return func(instance map[string]any) busapi.SampleInstance {
		in := busapi.SampleInstance{Num: make([]float64, len(names)), Str: make([]string, len(names)), Label: fraud.LabelLegit}
		for i, n := range names {
			switch v := instance[n].(type) {
			case float64:
				in.Num[i] = v
			case string:
				in.Str[i] = v
			}
		}
		row, err := fraud.Encode(instance, fraud.EncodingNative)
		if err != nil {
			return in
		}
		out, err := m.Predict([][]float32{row})
		if err != nil || len(out) != 1 || len(out[0]) != 1 {
			return in
		}
		in.Score = float64(out[0][0])
		if in.Score >= threshold {
			in.Label = fraud.LabelFraud
		}
		return in
	}, nil
}
