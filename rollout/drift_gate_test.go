package rollout_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"modelplane/drift"
	"modelplane/drift/stat"
	"modelplane/field"
	"modelplane/internal/chtest"
	"modelplane/judge"
	"modelplane/rollout"
)

// profile is a fraud model's output distribution, as the demo's sim
// profiles give it: a Beta score of this mean and spread, and the share
// of predictions labelled "fraud".
type profile struct{ mean, sd, fraud float64 }

var (
	v23 = profile{mean: 0.12, sd: 0.18, fraud: 0.03}
	v24 = profile{mean: 0.49, sd: 0.28, fraud: 0.40}
)

// gamma draws Gamma(a, 1) (Marsaglia and Tsang; a < 1 boosted by U^(1/a)).
func gamma(r *rand.Rand, a float64) float64 {
	if a < 1 {
		return gamma(r, a+1) * math.Pow(r.Float64(), 1/a)
	}
	d := a - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := r.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := r.Float64()
		if math.Log(u) < 0.5*x*x+d-d*v+d*math.Log(v) {
			return d * v
		}
	}
}

// draw is one prediction of p: a Beta score with p's mean and spread and
// a label.
func (p profile) draw(r *rand.Rand) (float64, string) {
	k := p.mean*(1-p.mean)/(p.sd*p.sd) - 1
	x, y := gamma(r, p.mean*k), gamma(r, (1-p.mean)*k)
	label := "legit"
	if r.Float64() < p.fraud {
		label = "fraud"
	}
	return x / (x + y), label
}

// sampleSeconds inserts perSecond samples of version drawn from p for
// every second of [from, to) into prediction_samples, as the ingest would.
func (f *fixture) sampleSeconds(t *testing.T, ch driver.Conn, version string, p profile, seed uint64, from, to time.Time, perSecond int) {
	t.Helper()
	var id int64
	if err := f.pool.QueryRow(t.Context(), "SELECT id FROM endpoints WHERE name = 'fraud-scoring'").Scan(&id); err != nil {
		t.Fatal(err)
	}
	batch, err := ch.PrepareBatch(t.Context(), "INSERT INTO prediction_samples (ts, ts_ms, endpoint, team, version, request_id, instance, "+
		"feature_names, feature_values, feature_strings, score, label, tokens, latency_ms, stream_seq, endpoint_id)")
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(seed, seed*7+1))
	i := 0
	for at := from; at.Before(to); at = at.Add(time.Second) {
		for range perSecond {
			score, label := p.draw(r)
			if err := batch.Append(at, uint16(0), "fraud-scoring", "risk", version, fmt.Sprintf("%s-%d", version, i), uint32(0),
				[]string{}, []float64{}, []string{}, score, label, uint32(0), 8.0, uint64(i), id); err != nil {
				t.Fatal(err)
			}
			i++
		}
	}
	if err := batch.Send(); err != nil {
		t.Fatal(err)
	}
}

// gated makes f's Service and controller measure drift in ch, and turns
// sampling on for fraud-scoring.
func (f *fixture) gated(t *testing.T, ch driver.Conn) {
	t.Helper()
	gate := drift.NewGate(drift.NewReader(ch, drift.ReaderConfig{}))
	f.svc, f.drift = rollout.New(f.pool, f.clock, gate), gate
	if _, err := f.pool.Exec(t.Context(), `UPDATE endpoints SET sampling_rate = 0.5 WHERE name = 'fraud-scoring'`); err != nil {
		t.Fatal(err)
	}
}

// TestDriftGateHealthyTwinNeverTrips: a candidate with v23's output
// distribution (independent draws, real ClickHouse samples, the real drift
// reader) passes the drift check at every evaluation of every step and
// waits for approval before 100 percent; a candidate with v24's is rolled
// back by it at its first evaluation, with latency and errors passing.
func TestDriftGateHealthyTwinNeverTrips(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		candidate profile
		want      string
	}{{"twin", v23, rollout.StateAwaitingApproval}, {"garbage", v24, rollout.StateRolledBack}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			ch := chtest.New(t)
			f.gated(t, ch)
			good := window(500, 0, 10)
			f.stats.set("v1", good)
			f.stats.set("v2", good)
			start := f.clock.Now()
			// Ten minutes of samples, 30 a second per side: 300 per side
			// in the first 10-second evaluation.
			f.sampleSeconds(t, ch, "v1", v23, 1, start, start.Add(10*time.Minute), 30)
			f.sampleSeconds(t, ch, "v2", tc.candidate, 2, start, start.Add(10*time.Minute), 30)
			r := f.canary(t)
			if !r.Criteria.Drift {
				t.Fatalf("criteria %+v; want the drift gate on by default for a classifier whose endpoint samples", r.Criteria)
			}
			f.pass(t)
			f.ready(t, "fraud-scoring", "v2")
			f.pass(t)
			for range 20 {
				if got := f.get(t, r.ID); got.State != rollout.StateProgressing {
					break
				}
				f.clock.Advance(10 * time.Second)
				f.pass(t)
			}
			got := f.get(t, r.ID)
			if got.State != tc.want {
				t.Fatalf("state %s (%s), want %s", got.State, got.Reason, tc.want)
			}
			verdicts := 0
			for _, e := range got.Events {
				if e.Kind != "verdict" {
					continue
				}
				verdicts++
				var d *judge.Check
				for i, c := range e.Verdict.Checks {
					if c.Name == "drift" {
						d = &e.Verdict.Checks[i]
					}
				}
				if d == nil || e.Windows == nil || e.Windows.Drift == nil || !e.Windows.Drift.Enough {
					t.Fatalf("verdict %d lacks a measured drift check: %+v", verdicts, e.Verdict)
				}
				want := judge.Pass
				if tc.name == "garbage" {
					want = judge.Fail
				}
				if d.Outcome != want {
					t.Errorf("verdict %d: drift %s (%s), want %s", verdicts, d.Outcome, d.Detail, want)
				}
				for _, c := range e.Verdict.Checks {
					if c.Name != "drift" && c.Outcome != judge.Pass {
						t.Errorf("verdict %d: %s %s (%s), want pass", verdicts, c.Name, c.Outcome, c.Detail)
					}
				}
			}
			switch {
			case tc.name == "twin" && verdicts < 12:
				t.Errorf("the twin was judged %d times, want every evaluation of two baked steps (12)", verdicts)
			case tc.name == "garbage" && (verdicts != 1 || !strings.HasPrefix(got.Reason, "judge: drift: ")):
				t.Errorf("garbage rolled back after %d verdicts (%s), want at the first, by the drift check", verdicts, got.Reason)
			}
		})
	}
}

// TestDriftGateNeedsSampling: on an endpoint that samples nothing the
// default drift gate is off and the start event says why; asking for it is
// a field error that names the way out.
func TestDriftGateNeedsSampling(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.gated(t, chtest.New(t))
	if _, err := f.pool.Exec(t.Context(), `UPDATE endpoints SET sampling_rate = 0 WHERE name = 'fraud-scoring'`); err != nil {
		t.Fatal(err)
	}
	on := true
	_, err := f.svc.Start(t.Context(), f.eng, "fraud-scoring", rollout.Spec{Version: "v2", Criteria: rollout.CriteriaSpec{Drift: &on}})
	var verr field.Errors
	if !errors.As(err, &verr) || len(verr) != 1 || verr[0].Field != "criteria.drift" || !strings.Contains(verr[0].Message, "sampling_rate") ||
		!strings.Contains(verr[0].Message, "drift: false") {
		t.Fatalf("explicit drift gate without sampling: %v; want a criteria.drift error naming sampling_rate and drift: false", err)
	}
	r, err := f.svc.Start(t.Context(), f.eng, "fraud-scoring", rollout.Spec{Version: "v2"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Criteria.Drift {
		t.Errorf("default criteria %+v; want the drift gate off without samples", r.Criteria)
	}
	if len(r.Events) == 0 || !strings.Contains(r.Events[0].Message, rollout.DriftSamplingOff) {
		t.Errorf("start event %+v; want it to say %q", r.Events, rollout.DriftSamplingOff)
	}

	// A blue-green with samples: the candidate serves alone after the
	// switch, so the default gate is off and says why.
	if _, err := f.svc.Rollback(t.Context(), f.eng, r.ID, "next"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(t.Context(), `UPDATE endpoints SET sampling_rate = 0.5 WHERE name = 'fraud-scoring'`); err != nil {
		t.Fatal(err)
	}
	bg, err := f.svc.Start(t.Context(), f.eng, "fraud-scoring", rollout.Spec{Version: "v2", Strategy: rollout.BlueGreen})
	if err != nil {
		t.Fatal(err)
	}
	if bg.Criteria.Drift || len(bg.Events) == 0 || !strings.Contains(bg.Events[0].Message, rollout.DriftBlueGreenOff) {
		t.Errorf("blue-green default criteria %+v, events %+v; want the gate off and the start event saying %q", bg.Criteria, bg.Events, rollout.DriftBlueGreenOff)
	}
}

// TestDriftGateWaitsForRequestsAndShadowAgreement: drift is measured only
// once the candidate has the judge's minimum requests (before that a
// garbage candidate holds, never rolls back on half the evidence), and a
// shadow with the gate off still records its output agreement in every
// verdict's window.
func TestDriftGateWaitsForRequestsAndShadowAgreement(t *testing.T) {
	t.Parallel()
	t.Run("canary", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		ch := chtest.New(t)
		f.gated(t, ch)
		start := f.clock.Now()
		f.sampleSeconds(t, ch, "v1", v23, 1, start, start.Add(2*time.Minute), 30)
		f.sampleSeconds(t, ch, "v2", v24, 2, start, start.Add(2*time.Minute), 30)
		f.stats.set("v1", window(500, 0, 10))
		f.stats.set("v2", window(50, 0, 10)) // below min_requests (100)
		r := f.canary(t)
		f.pass(t)
		f.ready(t, "fraud-scoring", "v2")
		f.pass(t)
		f.clock.Advance(10 * time.Second)
		f.pass(t)
		got := f.get(t, r.ID)
		if got.State != rollout.StateProgressing || !strings.HasPrefix(got.Reason, "hold: requests: ") {
			t.Fatalf("too few candidate requests: %s (%s), want a hold on the request count", got.State, got.Reason)
		}
		last := got.Events[len(got.Events)-1]
		if last.Windows == nil || last.Windows.Drift != nil {
			t.Errorf("drift measured before the candidate had its minimum requests: %+v", last.Windows)
		}
		f.stats.set("v2", window(500, 0, 10))
		f.clock.Advance(10 * time.Second)
		f.pass(t)
		if got := f.get(t, r.ID); got.State != rollout.StateRolledBack || !strings.HasPrefix(got.Reason, "judge: drift: kl ") {
			t.Fatalf("with enough requests: %s (%s), want rolled back by the drift check", got.State, got.Reason)
		}
	})
	t.Run("shadow", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		ch := chtest.New(t)
		f.gated(t, ch)
		start := f.clock.Now()
		f.sampleSeconds(t, ch, "v1", v23, 1, start, start.Add(2*time.Minute), 30)
		f.sampleSeconds(t, ch, "v2", v24, 2, start, start.Add(2*time.Minute), 30)
		f.stats.set("v1", window(500, 0, 10))
		f.stats.set("v2", window(500, 0, 10))
		off := false
		r, err := f.svc.Start(t.Context(), f.eng, "fraud-scoring", rollout.Spec{Version: "v2", Strategy: rollout.Shadow,
			EvaluationInterval: 10 * time.Second, Criteria: rollout.CriteriaSpec{Drift: &off}})
		if err != nil {
			t.Fatal(err)
		}
		f.pass(t)
		f.ready(t, "fraud-scoring", "v2")
		f.pass(t)
		for range 2 {
			f.clock.Advance(10 * time.Second)
			f.pass(t)
		}
		got := f.get(t, r.ID)
		if got.State != rollout.StateProgressing {
			t.Fatalf("shadow with the gate off: %s (%s), want still shadowing", got.State, got.Reason)
		}
		measured := 0
		for _, e := range got.Events {
			if e.Kind != "verdict" {
				continue
			}
			for _, c := range e.Verdict.Checks {
				if c.Name == "drift" {
					t.Errorf("a drift check in a verdict of a rollout without the gate: %+v", c)
				}
			}
			if d := e.Windows.Drift; d != nil && d.Enough && d.Metric == stat.MetricKL && d.Value > d.Threshold {
				measured++
			}
		}
		if measured == 0 {
			t.Errorf("no verdict window records the shadow's output agreement (v24 against v23 drifts)")
		}
	})
}
