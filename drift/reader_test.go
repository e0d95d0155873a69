package drift_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"modelplane/drift"
	"modelplane/drift/stat"
	"modelplane/internal/chtest"
	"modelplane/internal/pgtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	chtest.Stop()
	pgtest.Stop()
	os.Exit(code)
}

var base = time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)

// sample is one row of prediction_samples.
type sample struct {
	at       time.Time
	version  string
	features []float64
	score    float64
	label    string
	tokens   uint32
	// strs are the features' string values, "" where a feature is a
	// number; nil for none.
	strs []string
}

var featureNames = []string{"amount", "age", "country"}

func insert(t *testing.T, ch driver.Conn, endpoint string, rows []sample) {
	t.Helper()
	insertID(t, ch, endpoint, 0, rows)
}

// insertID is insert for the endpoint of that id.
func insertID(t *testing.T, ch driver.Conn, endpoint string, id int64, rows []sample) {
	t.Helper()
	ctx := context.Background()
	batch, err := ch.PrepareBatch(ctx, "INSERT INTO prediction_samples (ts, ts_ms, endpoint, team, version, request_id, instance, "+
		"feature_names, feature_values, feature_strings, score, label, tokens, latency_ms, stream_seq, endpoint_id)")
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rows {
		names, strs := featureNames[:len(r.features)], make([]string, len(r.features))
		copy(strs, r.strs)
		if r.features == nil {
			r.features = []float64{}
		}
		if err := batch.Append(r.at, uint16(0), endpoint, "risk", r.version, fmt.Sprintf("%s-%d", r.version, i), uint32(0),
			names, r.features, strs, r.score, r.label, r.tokens, 1.0, uint64(i), id); err != nil {
			t.Fatal(err)
		}
	}
	if err := batch.Send(); err != nil {
		t.Fatal(err)
	}
}

// normal is n deterministic points of N(mean, sd²) (Box–Muller on a
// fixed lattice, so runs repeat).
func normal(n int, mean, sd float64, seed int) []float64 {
	out := make([]float64, n)
	for i := range out {
		u1 := (float64((i*7919+seed*104729)%n) + 0.5) / float64(n)
		u2 := (float64((i*6007+seed*1299709)%n) + 0.5) / float64(n)
		out[i] = mean + sd*math.Sqrt(-2*math.Log(u1))*math.Cos(2*math.Pi*u2)
	}
	return out
}

// rows makes n samples of version spread over [from, from+span), with
// features drawn around mean and scores from the given sample.
func rows(version string, from time.Time, span time.Duration, f0, f1, scores []float64) []sample {
	out := make([]sample, len(scores))
	for i := range out {
		at := from.Add(time.Duration(i) * span / time.Duration(len(scores)))
		out[i] = sample{at: at, version: version, features: []float64{f0[i], f1[i]}, score: scores[i]}
	}
	return out
}

func sorted(xs []float64) []float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s
}

// pure computes what the reader should from the same samples (fewer than
// ClickHouse's 8,192-value reservoir): interpolated deciles for bin edges
// and interpolated quantile grids for W1.
func purePSI(ref, cur []float64) float64 {
	s := sorted(ref)
	var qs []float64
	for _, l := range stat.DecileLevels() {
		qs = append(qs, stat.QuantileInterpolated(s, l))
	}
	e := stat.Edges(qs)
	return stat.PSI(stat.CountBins(e, ref), stat.CountBins(e, cur))
}

func pureW1(ref, cur []float64) float64 {
	sr, sc := sorted(ref), sorted(cur)
	var qr, qc []float64
	for _, l := range stat.W1Levels() {
		qr = append(qr, stat.QuantileInterpolated(sr, l))
		qc = append(qc, stat.QuantileInterpolated(sc, l))
	}
	_, sd := stat.MeanStd(ref)
	return stat.Normalised(stat.Wasserstein1Quantiles(qr, qc), sd)
}

func TestReportEqualsPureMath(t *testing.T) {
	t.Parallel()
	ch := chtest.New(t)
	ctx := context.Background()
	const n = 3000
	refF0, refF1, refS := normal(n, 100, 20, 1), normal(n, 40, 10, 2), normal(n, 0.12, 0.18, 3)
	curF0, curF1, curS := normal(n/2, 130, 20, 4), normal(n/2, 40, 10, 5), normal(n/2, 0.49, 0.28, 6)
	insert(t, ch, "fraud", rows("v23", base, 7*24*time.Hour, refF0, refF1, refS))
	insert(t, ch, "fraud", rows("v24", base.Add(7*24*time.Hour), time.Hour, curF0, curF1, curS))
	// Another endpoint's samples in the same windows change nothing.
	insert(t, ch, "other", rows("v24", base.Add(7*24*time.Hour), time.Hour, refF0, refF0, refS))

	r := drift.NewReader(ch, drift.ReaderConfig{})
	ref := drift.Window{Version: "v23", From: base, To: base.Add(7 * 24 * time.Hour)}
	cur := drift.Window{Version: "v24", From: base.Add(7 * 24 * time.Hour), To: base.Add(7*24*time.Hour + time.Hour)}
	rep, err := r.Report(ctx, "fraud", 0, ref, cur)
	if err != nil {
		t.Fatal(err)
	}
	if rep.ReferenceSamples != n || rep.CurrentSamples != n/2 {
		t.Fatalf("samples = %d, %d; want %d, %d", rep.ReferenceSamples, rep.CurrentSamples, n, n/2)
	}
	if len(rep.Features) != 2 || rep.Features[0].Name != "amount" || rep.Features[1].Name != "age" {
		t.Fatalf("features = %+v", rep.Features)
	}
	for i, want := range []float64{purePSI(refF0, curF0), purePSI(refF1, curF1)} {
		if got := rep.Features[i].PSI; math.Abs(got-want) > 1e-9 {
			t.Errorf("%s PSI = %v, pure math %v", rep.Features[i].Name, got, want)
		}
	}
	if !rep.Features[0].Flagged || rep.Features[1].Flagged {
		t.Errorf("flags = %v, %v; want the shifted amount flagged, age not (PSI %v, %v)",
			rep.Features[0].Flagged, rep.Features[1].Flagged, rep.Features[0].PSI, rep.Features[1].PSI)
	}
	if rep.Output.Metric != stat.MetricW1 {
		t.Fatalf("metric = %s, want %s", rep.Output.Metric, stat.MetricW1)
	}
	if want := pureW1(refS, curS); math.Abs(rep.Output.Value-want) > 1e-9 {
		t.Errorf("normalised W1 = %v, pure math %v", rep.Output.Value, want)
	}
	// And within a percent of the exact distance over the exact spread.
	_, sd := stat.MeanStd(refS)
	if exact := stat.Wasserstein1(refS, curS) / sd; math.Abs(rep.Output.Value-exact) > 0.01*exact {
		t.Errorf("normalised W1 = %v, exact %v", rep.Output.Value, exact)
	}
	if !rep.Output.Drifting || rep.Verdict != drift.VerdictDrifting {
		t.Errorf("output drifting %v, verdict %s; want true, drifting", rep.Output.Drifting, rep.Verdict)
	}
	var hr, hc uint64
	for i := range rep.Output.Histogram.Reference {
		hr += rep.Output.Histogram.Reference[i]
		hc += rep.Output.Histogram.Current[i]
	}
	if hr != n || hc != n/2 {
		t.Errorf("output histogram totals %d, %d; want %d, %d", hr, hc, n, n/2)
	}
}

func TestIdenticalAndTooFewNeverFlag(t *testing.T) {
	t.Parallel()
	ch := chtest.New(t)
	ctx := context.Background()
	const n = 2000
	f0, f1, s := normal(n, 100, 20, 1), normal(n, 40, 10, 2), normal(n, 0.12, 0.18, 3)
	// The same samples in both versions over the same hour.
	insert(t, ch, "same", rows("v1", base, time.Hour, f0, f1, s))
	insert(t, ch, "same", rows("v2", base, time.Hour, f0, f1, s))
	// A wildly different version with too few samples.
	g0, g1, gs := normal(50, 900, 1, 4), normal(50, -40, 1, 5), normal(50, 5, 1, 6)
	insert(t, ch, "same", rows("v3", base, time.Hour, g0, g1, gs))

	r := drift.NewReader(ch, drift.ReaderConfig{})
	w := func(v string) drift.Window { return drift.Window{Version: v, From: base, To: base.Add(time.Hour)} }
	rep, err := r.Report(ctx, "same", 0, w("v1"), w("v2"))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Verdict != drift.VerdictOK || rep.Output.Value > 1e-12 {
		t.Errorf("identical: verdict %s, output %v; want ok, 0", rep.Verdict, rep.Output.Value)
	}
	for _, f := range rep.Features {
		if f.PSI > 1e-12 || f.Flagged {
			t.Errorf("identical: %s PSI %v flagged %v", f.Name, f.PSI, f.Flagged)
		}
	}
	rep, err = r.Report(ctx, "same", 0, w("v1"), w("v3"))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Verdict != drift.VerdictNotEnough || rep.Output.Drifting || rep.Output.Enough {
		t.Errorf("too few: verdict %s, drifting %v, enough %v; want not_enough_data, false, false", rep.Verdict, rep.Output.Drifting, rep.Output.Enough)
	}
	for _, f := range rep.Features {
		if f.Flagged {
			t.Errorf("too few: %s flagged (PSI %v)", f.Name, f.PSI)
		}
	}
	if rep.Output.Value <= stat.W1Threshold {
		t.Errorf("too few: value %v should still be reported past the threshold", rep.Output.Value)
	}
	d, err := r.Compare(ctx, "same", 0, "v3", "v1", base, base.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if d.Drifting || d.Enough || d.CurrentSamples != 50 {
		t.Errorf("compare with too few: %+v", d)
	}
}

func TestCompareClassesAndCompletionLengths(t *testing.T) {
	t.Parallel()
	ch := chtest.New(t)
	ctx := context.Background()
	var rs []sample
	// v1 predicts "fraud" 10 percent of the time, v2 30 percent.
	for i := range 1000 {
		at := base.Add(time.Duration(i) * time.Second)
		l1, l2 := "ok", "ok"
		if i%10 == 0 {
			l1 = "fraud"
		}
		if i%10 < 3 {
			l2 = "fraud"
		}
		rs = append(rs, sample{at: at, version: "v1", label: l1}, sample{at: at, version: "v2", label: l2})
	}
	insert(t, ch, "cls", rs)
	r := drift.NewReader(ch, drift.ReaderConfig{})
	d, err := r.Compare(ctx, "cls", 0, "v2", "v1", base, base.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	want := stat.KL([]uint64{100, 900}, []uint64{300, 700})
	if d.Metric != stat.MetricKL || math.Abs(d.Value-want) > 1e-12 || !d.Drifting || !d.Enough {
		t.Errorf("classes: %+v; want kl %v drifting", d, want)
	}
	if !slices.Equal(d.Histogram.Classes, []string{"fraud", "ok"}) {
		t.Errorf("classes = %v", d.Histogram.Classes)
	}

	// LLM: completion lengths 100 ± 10 against 100 ± 10 and 300 ± 10.
	rs = nil
	for i := range 600 {
		at := base.Add(time.Duration(i) * time.Second)
		rs = append(rs, sample{at: at, version: "a", tokens: uint32(90 + i%21)}, sample{at: at, version: "b", tokens: uint32(90 + i%21)},
			sample{at: at, version: "c", tokens: uint32(290 + i%21)})
	}
	insert(t, ch, "llm", rs)
	d, err = r.Compare(ctx, "llm", 0, "b", "a", base, base.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if d.Metric != stat.MetricLength || d.Value != 0 || d.Drifting {
		t.Errorf("same lengths: %+v", d)
	}
	d, err = r.Compare(ctx, "llm", 0, "c", "a", base, base.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if d.Metric != stat.MetricLength || math.Abs(d.W1-200) > 1e-9 || !d.Drifting {
		t.Errorf("longer completions: %+v; want W1 200, drifting", d)
	}
}

func TestReferenceIsCappedToItsMostRecentHours(t *testing.T) {
	t.Parallel()
	ch := chtest.New(t)
	ctx := context.Background()
	// 60 samples an hour over 50 hours, then the current hour.
	const n = 3000
	insert(t, ch, "capped", rows("v1", base, 50*time.Hour, normal(n, 0, 1, 1), normal(n, 0, 1, 2), normal(n, 0, 1, 3)))
	insert(t, ch, "capped", rows("v2", base.Add(50*time.Hour), time.Hour, normal(n, 0, 1, 4), normal(n, 0, 1, 5), normal(n, 0, 1, 6)))
	ref := drift.Window{Version: "v1", From: base, To: base.Add(50 * time.Hour)}
	cur := drift.Window{Version: "v2", From: base.Add(50 * time.Hour), To: base.Add(51 * time.Hour)}
	rep, err := drift.NewReader(ch, drift.ReaderConfig{MaxReference: 1000}).Report(ctx, "capped", 0, ref, cur)
	if err != nil {
		t.Fatal(err)
	}
	// 16 whole hours (960 samples) fit under 1,000; 17 would not.
	if want := base.Add(34 * time.Hour); !rep.Reference.From.Equal(want) || rep.ReferenceSamples != 960 {
		t.Errorf("capped reference from %s with %d samples; want from %s with 960", rep.Reference.From, rep.ReferenceSamples, want)
	}
	// A cap past the last day's 1,440 samples reads on into the days before:
	// 33 hours (1,980) fit under 2,000.
	rep, err = drift.NewReader(ch, drift.ReaderConfig{MaxReference: 2000}).Report(ctx, "capped", 0, ref, cur)
	if err != nil {
		t.Fatal(err)
	}
	if want := base.Add(17 * time.Hour); !rep.Reference.From.Equal(want) || rep.ReferenceSamples != 1980 {
		t.Errorf("capped at 2,000: from %s with %d samples; want from %s with 1980", rep.Reference.From, rep.ReferenceSamples, want)
	}
	rep, err = drift.NewReader(ch, drift.ReaderConfig{MaxReference: -1}).Report(ctx, "capped", 0, ref, cur)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Reference.From.Equal(base) || rep.ReferenceSamples != n {
		t.Errorf("uncapped reference from %s with %d samples; want the whole window", rep.Reference.From, rep.ReferenceSamples)
	}
	// A cap above the window's samples keeps the whole window.
	rep, err = drift.NewReader(ch, drift.ReaderConfig{MaxReference: 5000}).Report(ctx, "capped", 0, ref, cur)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Reference.From.Equal(base) || rep.ReferenceSamples != n {
		t.Errorf("cap above the window: from %s with %d samples; want the whole window", rep.Reference.From, rep.ReferenceSamples)
	}
}
