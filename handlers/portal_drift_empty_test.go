package handlers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"modelplane/drift"
	"modelplane/internal/chtest"
)

// TestPortalDriftSaysWhatIsMissing: an endpoint forty minutes old, younger
// than the default current window, with sampling off. Its default
// reference is the first half of its life and holds its samples (it was
// zero-length: "20:25:49 – 20:25:49, 0 samples"); the endpoint page offers
// no drift link but the empty state (sampling is off, turn it on), the drift
// page says sampling is off, says how many of the samples it needs each window holds, and
// shows no score it did not compute; with no check run yet, the alerts
// section does not claim that no score is past its threshold.
func TestPortalDriftSaysWhatIsMissing(t *testing.T) {
	t.Parallel()
	ch := chtest.New(t)
	ctx := context.Background()
	e := newTestEnvWith(t, envOptions{CH: ch})
	var id int64
	if err := e.pool.QueryRow(ctx, `UPDATE endpoints SET created_at = now() - interval '40 minutes' WHERE name = 'risk-endpoint'
		RETURNING id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	var created time.Time
	if err := e.pool.QueryRow(ctx, `SELECT created_at FROM endpoints WHERE id = $1`, id).Scan(&created); err != nil {
		t.Fatal(err)
	}
	batch, err := ch.PrepareBatch(ctx, "INSERT INTO prediction_samples (ts, ts_ms, endpoint, team, version, request_id, instance, "+
		"feature_names, feature_values, feature_strings, score, label, tokens, latency_ms, stream_seq, endpoint_id)")
	if err != nil {
		t.Fatal(err)
	}
	// 30 samples in the first quarter hour of its life, 12 in its last six
	// minutes: either side of the middle of its 40 minutes.
	var at []time.Time
	for i := range 30 {
		at = append(at, created.Add(time.Duration(i+1)*30*time.Second))
	}
	for i := range 12 {
		at = append(at, created.Add(33*time.Minute+time.Duration(i)*30*time.Second))
	}
	for i, ts := range at {
		if err := batch.Append(ts.UTC(), uint16(0), "risk-endpoint", "risk", "v1", fmt.Sprintf("r-%d", i), uint32(0),
			[]string{"amount"}, []float64{float64(i)}, []string{""}, 0.5, "", uint32(0), 1.0, uint64(i), id); err != nil {
			t.Fatal(err)
		}
	}
	if err := batch.Send(); err != nil {
		t.Fatal(err)
	}

	u := portalSignIn(t, e, "risk-viewer@example.com")
	ep := u.page("/endpoints/risk-endpoint")
	if got := ep.Find("#drift-sampling-off").Text(); !strings.Contains(got, "sampling is off") || !strings.Contains(got, "Turn it on") {
		t.Errorf("endpoint page's drift line: %q, want the sampling-off empty state", got)
	}
	if n := ep.Find("a#drift-link").Length(); n != 0 {
		t.Errorf("sampling off, the endpoint page still offers the drift page as if it worked")
	}
	doc := u.page("/endpoints/risk-endpoint/drift")
	portalCheckMarkup(t, "drift page", doc)
	if got := doc.Find("#drift-verdict").Text(); got != drift.VerdictNotEnough {
		t.Errorf("verdict %q, want %s", got, drift.VerdictNotEnough)
	}
	if got := doc.Find("#drift-sampling-off").Text(); !strings.Contains(got, "Sampling is off") || !strings.Contains(got, "Turn it on") {
		t.Errorf("sampling note %q, want it to say sampling is off and to turn it on", got)
	}
	missing := doc.Find("#drift-missing").Text()
	if !strings.Contains(missing, "the reference window holds 30 of ") || !strings.Contains(missing, "the current window holds 12 of ") {
		t.Errorf("missing = %q, want 30 reference and 12 current samples of the minimum", missing)
	}
	if n := doc.Find("#drift-output, #psi-bars, #output-histogram, #feature-histogram").Length(); n != 0 {
		t.Errorf("%d scores or charts shown that were not computed", n)
	}
	if got := doc.Find("#drift-alerts-empty").Text(); strings.Contains(got, "past its threshold") || !strings.Contains(got, "no scheduled check") {
		t.Errorf("alerts section %q, want it to say no check scored the endpoint yet", got)
	}

	if _, err := e.pool.Exec(ctx, `UPDATE endpoints SET sampling_rate = 0.5 WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if n := u.page("/endpoints/risk-endpoint/drift").Find("#drift-sampling-off").Length(); n != 0 {
		t.Errorf("sampling on, the page still says it is off")
	}
	if href := u.page("/endpoints/risk-endpoint").Find("a#drift-link").AttrOr("href", ""); href != "/endpoints/risk-endpoint/drift" {
		t.Errorf("sampling on, the drift link is %q, want the drift page", href)
	}
}
