package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"modelplane/drift"
	"modelplane/drift/stat"
	"modelplane/internal/chtest"
)

// newDriftEnv is a test env whose Drift reads a fresh ClickHouse holding
// risk-endpoint's samples: v1 (the stable version) a minute apart over the
// 17 hours before the last two, scores around 0.1; and v2 over the 50
// minutes before the last one (a sample stamped in the second of the
// request would fall outside a window ending then), scores around 0.5 and
// the feature "amount" shifted.
func newDriftEnv(t *testing.T) *testEnv {
	t.Helper()
	ch := chtest.New(t)
	ctx := context.Background()
	e := newTestEnvWith(t, envOptions{CH: ch})
	var id int64
	if err := e.pool.QueryRow(ctx, "SELECT id FROM endpoints WHERE name = 'risk-endpoint'").Scan(&id); err != nil {
		t.Fatal(err)
	}
	batch, err := ch.PrepareBatch(ctx, "INSERT INTO prediction_samples (ts, ts_ms, endpoint, team, version, request_id, instance, "+
		"feature_names, feature_values, feature_strings, score, label, tokens, latency_ms, stream_seq, endpoint_id)")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	for i := range 1000 {
		u := (float64(i) + 0.5) / 1000
		for _, s := range []struct {
			version       string
			at            time.Time
			amount, score float64
		}{
			{"v1", now.Add(-2*time.Hour - time.Duration(i)*time.Minute), 100 * u, 0.2 * u},
			{"v2", now.Add(-time.Minute - time.Duration(i)*3*time.Second), 50 + 100*u, 0.3 + 0.4*u},
		} {
			if err := batch.Append(s.at, uint16(0), "risk-endpoint", "risk", s.version, fmt.Sprintf("%s-%d", s.version, i), uint32(0),
				[]string{"amount", "age"}, []float64{s.amount, math.Mod(float64(i)*7, 60)}, []string{"", ""}, s.score, "", uint32(0), 1.0, uint64(i), id); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := batch.Send(); err != nil {
		t.Fatal(err)
	}
	// The samples are older than the endpoint the env just created, and
	// drift reads none from before its endpoint existed: date it back.
	if _, err := e.pool.Exec(ctx, `UPDATE endpoints SET created_at = now() - interval '30 days' WHERE name = 'risk-endpoint'`); err != nil {
		t.Fatal(err)
	}
	return e
}

func TestAPIDrift(t *testing.T) {
	t.Parallel()
	e := newDriftEnv(t)
	status, body := e.api(e.Keys["risk-viewer"], http.MethodGet, "/endpoints/risk-endpoint/drift?version=v2", nil)
	if status != http.StatusOK {
		t.Fatalf("GET drift = %d, want 200\n%s", status, body)
	}
	var got struct {
		Available bool `json:"available"`
		drift.Report
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if !got.Available || got.Reference.Version != "v1" || got.Current.Version != "v2" || got.Verdict != drift.VerdictDrifting {
		t.Errorf("report: available %v, reference %s, current %s, verdict %s; want true, v1, v2, drifting",
			got.Available, got.Reference.Version, got.Current.Version, got.Verdict)
	}
	if got.ReferenceSamples != 1000 || got.CurrentSamples != 1000 {
		t.Errorf("samples %d, %d; want 1000, 1000", got.ReferenceSamples, got.CurrentSamples)
	}
	if len(got.Features) != 2 || !got.Features[0].Flagged || got.Features[1].Flagged {
		t.Errorf("features = %+v; want amount flagged, age not", got.Features)
	}
	if got.Output.Metric != stat.MetricW1 || !got.Output.Drifting {
		t.Errorf("output = %+v; want w1_norm drifting", got.Output)
	}
	// The stable version against its own past, by default, has no current
	// samples: not enough data.
	status, body = e.api(e.Keys["risk-viewer"], http.MethodGet, "/endpoints/risk-endpoint/drift", nil)
	if err := json.Unmarshal(body, &got); status != http.StatusOK || err != nil || got.Verdict != drift.VerdictNotEnough {
		t.Errorf("default report = %d %s; want not_enough_data", status, body)
	}
	status, body = e.api(e.Keys["risk-viewer"], http.MethodGet, "/endpoints/risk-endpoint/drift?reference=v1@sometime", nil)
	if status != http.StatusBadRequest {
		t.Errorf("bad reference = %d, want 400\n%s", status, body)
	}
	if status, _ := e.api(e.Keys["search-admin"], http.MethodGet, "/endpoints/risk-endpoint/drift?version=v2", nil); status != http.StatusNotFound {
		t.Errorf("another team = %d, want 404", status)
	}
}

func TestPortalDrift(t *testing.T) {
	t.Parallel()
	e := newDriftEnv(t)
	// The endpoint samples (its samples are written here directly): the
	// page links its drift dashboard. With sampling off it shows the empty
	// state instead (TestPortalDriftSaysWhatIsMissing).
	if _, err := e.pool.Exec(t.Context(), `UPDATE endpoints SET sampling_rate = 1 WHERE name = 'risk-endpoint'`); err != nil {
		t.Fatal(err)
	}
	u := portalSignIn(t, e, "risk-viewer@example.com")
	if href := u.page("/endpoints/risk-endpoint").Find("a#drift-link").AttrOr("href", ""); href != "/endpoints/risk-endpoint/drift" {
		t.Errorf("endpoint page drift link = %q", href)
	}
	path := "/endpoints/risk-endpoint/drift?version=v2"
	doc := u.page(path)
	portalCheckMarkup(t, path, doc)
	if got := doc.Find("#drift-verdict").Text(); got != drift.VerdictDrifting {
		t.Errorf("verdict = %q, want drifting", got)
	}
	if n := doc.Find("#psi-bars rect[data-feature]").Length(); n != 2 {
		t.Errorf("%d PSI bars, want 2", n)
	}
	if fill := doc.Find(`#psi-bars rect[data-feature="amount"]`).AttrOr("fill", ""); fill != "#d9480f" {
		t.Errorf("amount's bar fill %q, want the flagged colour", fill)
	}
	// With no feature chosen the most drifted one is shown: ten decile
	// bins, a reference and a current bar each.
	if got := doc.Find("#feature-histogram figcaption").Text(); got == "" || got[:len("Feature amount")] != "Feature amount" {
		t.Errorf("feature histogram caption %q, want amount's", got)
	}
	for _, id := range []string{"#feature-histogram", "#output-histogram"} {
		ref, cur := doc.Find(id+` rect[data-series="reference"]`).Length(), doc.Find(id+` rect[data-series="current"]`).Length()
		if ref != 10 || cur != 10 {
			t.Errorf("%s: %d reference and %d current bars, want 10 and 10", id, ref, cur)
		}
		// Each bin is labelled under its bars, its upper edge.
		labels := doc.Find(id + " text.bin-label")
		if first, last := labels.First().Contents().Last().Text(), labels.Last().Contents().Last().Text(); labels.Length() != 10 ||
			!strings.HasPrefix(first, "≤ ") || !strings.HasPrefix(last, "> ") {
			t.Errorf("%s: %d bin labels, first %q, last %q; want 10, from ≤ e₀ to > e₈", id, labels.Length(), first, last)
		}
	}
	doc = u.page(path + "&feature=age")
	if got := doc.Find("#feature-histogram figcaption").Text(); len(got) < len("Feature age") || got[:len("Feature age")] != "Feature age" {
		t.Errorf("chosen feature histogram caption %q, want age's", got)
	}
	doc = u.page("/endpoints/risk-endpoint/drift?current=soon")
	if doc.Find("#drift-error").Length() != 1 {
		t.Errorf("a bad window shows no error")
	}
	s := portalSignIn(t, e, "search-admin@example.com")
	if r := s.get(path); r.StatusCode != http.StatusNotFound {
		t.Errorf("GET %s as search-admin = %d, want 404", path, r.StatusCode)
	}
}
