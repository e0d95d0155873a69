package bench

import (
	"context"
	"fmt"
	"io"
	"time"

	"modelplane/drift"
)

// DriftResult is what `modelplane bench drift` prints.
type DriftResult struct {
	Name string `json:"name"`
	// ReportMS is the wall time of one full drift report (every feature's
	// PSI and the output's normalised Wasserstein-1) of the last hour of
	// the candidate against the stable version's last 7 days.
	ReportMS float64 `json:"report_ms"`
	// Samples is the rows in prediction_samples; ReferenceSamples and
	// CurrentSamples the ones the report judged (the reference capped at
	// drift.DefaultMaxReference, its most recent samples).
	Samples          uint64 `json:"samples"`
	ReferenceSamples uint64 `json:"reference_samples"`
	CurrentSamples   uint64 `json:"current_samples"`
	Features         int    `json:"features"`
	// StringFeatures of them carry strings (a category of 40 each), scored
	// by PSI over their values' shares; StringFeaturesScored is how many
	// the report scored so (it must be all).
	StringFeatures       int `json:"string_features"`
	StringFeaturesScored int `json:"string_features_scored"`
	// UncappedReportMS is the same report with no cap on the reference:
	// every one of its samples binned.
	UncappedReportMS float64 `json:"uncapped_report_ms"`
	UncappedSamples  uint64  `json:"uncapped_reference_samples"`
	GenerateS        float64 `json:"generate_s"`
	Verdict          string  `json:"verdict"`
	TargetMet        bool    `json:"target_met"`
}

const (
	driftSamples  = 10_000_000
	driftFeatures = 20
	// driftStrings is how many of the features, the last ones, are
	// strings, as a merchant category or a country is.
	driftStrings = 4
	// driftTargetMS is issue 8's target for one report.
	driftTargetMS = 2000
)

func runDrift(ctx context.Context, cfg Config, out io.Writer) error {
	res, err := measureDrift(ctx)
	if err != nil {
		return err
	}
	return emit(out, cfg.JSON, res, "drift: report in %.0f ms over %d samples (%d reference, %d current, %d features, %d of them strings); uncapped %.0f ms over %d reference samples\n",
		res.ReportMS, res.Samples, res.ReferenceSamples, res.CurrentSamples, res.Features, res.StringFeatures, res.UncappedReportMS, res.UncappedSamples)
}

// measureDrift starts a private ClickHouse, generates 10 million samples
// of one endpoint with 20 features inside ClickHouse (INSERT … SELECT from
// numbers(), so the generator is not what is timed): 7 days of the stable
// version v23 (90 percent) and the candidate v24 (10 percent, shifted),
// and times drift reports of v24's last hour against v23's 7 days.
func measureDrift(ctx context.Context) (DriftResult, error) {
	res := DriftResult{Name: "drift", Features: driftFeatures, StringFeatures: driftStrings}
	s, err := newScratch("mp-bench-drift-")
	if err != nil {
		return res, err
	}
	defer s.close()
	ch, err := s.clickhouse(ctx)
	if err != nil {
		return res, err
	}
	end := time.Now().UTC().Truncate(time.Hour)
	start := end.Add(-7 * 24 * time.Hour)
	t0 := time.Now()
	if err := ch.Exec(ctx, driftSamplesSQL(start, end)); err != nil {
		return res, fmt.Errorf("generate samples: %w", err)
	}
	res.GenerateS = time.Since(t0).Seconds()
	if err := ch.QueryRow(ctx, "SELECT count() FROM prediction_samples").Scan(&res.Samples); err != nil {
		return res, err
	}
	ref := drift.Window{Version: "v23", From: start, To: end}
	cur := drift.Window{Version: "v24", From: end.Add(-time.Hour), To: end}
	// One warm-up report loads the parts' marks; then the timed one.
	capped := drift.NewReader(ch, drift.ReaderConfig{})
	if _, err := capped.Report(ctx, "fraud", 0, ref, cur); err != nil {
		return res, err
	}
	t0 = time.Now()
	rep, err := capped.Report(ctx, "fraud", 0, ref, cur)
	if err != nil {
		return res, err
	}
	res.ReportMS = ms(time.Since(t0))
	res.ReferenceSamples, res.CurrentSamples, res.Verdict = rep.ReferenceSamples, rep.CurrentSamples, rep.Verdict
	for _, f := range rep.Features {
		if len(f.Histogram.Classes) > 0 {
			res.StringFeaturesScored++
		}
	}
	if res.StringFeaturesScored != driftStrings {
		return res, fmt.Errorf("bench drift: the report scored %d features by category, want the %d string features", res.StringFeaturesScored, driftStrings)
	}
	res.TargetMet = res.ReportMS <= driftTargetMS
	t0 = time.Now()
	rep, err = drift.NewReader(ch, drift.ReaderConfig{MaxReference: -1}).Report(ctx, "fraud", 0, ref, cur)
	if err != nil {
		return res, err
	}
	res.UncappedReportMS = ms(time.Since(t0))
	res.UncappedSamples = rep.ReferenceSamples
	return res, nil
}

// driftSamplesSQL generates the samples over [start, end). Row k lies at
// start + k·span/N; every tenth row is v24, whose numeric features are
// shifted by 1.5, whose string features draw from categories shifted by 5
// of 40, and whose scores are uniform, where v23 scores mostly low (score
// = u², u uniform). A string feature's value is 0, as the gateway samples
// them.
func driftSamplesSQL(start, end time.Time) string {
	return fmt.Sprintf(`INSERT INTO prediction_samples (ts, ts_ms, endpoint, team, version, request_id, instance,
		feature_names, feature_values, feature_strings, score, label, tokens, latency_ms, stream_seq)
		SELECT toDateTime(%[1]d + intDiv(number * %[2]d, %[3]d)), 0, 'fraud', 'risk', if(number %% 10 = 0, 'v24', 'v23'),
			toString(number), 0,
			arrayMap(i -> concat('f', toString(i)), range(%[4]d)),
			arrayMap(i -> if(i >= %[5]d, 0., (cityHash64(number, i) %% 10000) / 1000. + if(number %% 10 = 0, 1.5, 0.)), range(%[4]d)),
			arrayMap(i -> if(i >= %[5]d, concat('c', toString(cityHash64(number, i) %% 40 + if(number %% 10 = 0, 5, 0))), ''), range(%[4]d)),
			if(number %% 10 = 0, (cityHash64(number) %% 1000) / 1000., pow((cityHash64(number) %% 1000) / 1000., 2)),
			'', 0, 1.0, number
		FROM numbers(%[3]d)`, start.Unix(), int64(end.Sub(start)/time.Second), driftSamples,
		driftFeatures, driftFeatures-driftStrings)
}
