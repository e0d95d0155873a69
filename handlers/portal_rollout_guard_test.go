package handlers

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"modelplane/endpoint"
	"modelplane/registry"
	"modelplane/rollout"
)

// registerCPUVersions registers CPU versions of risk-model with offline
// metrics and starts fraud-scoring on v23, as the demo's fraud model: v24,
// v23's child, scores AUC 0.469 against v23's 0.911.
func registerCPUVersions(t *testing.T, e *testEnv) {
	t.Helper()
	ctx := context.Background()
	for _, v := range []registry.VersionSpec{
		{Name: "v23", OfflineMetrics: map[string]float64{"auc": 0.911, "logloss": 0.21}},
		{Name: "v24", OfflineMetrics: map[string]float64{"auc": 0.469, "logloss": 0.19}, Lineage: registry.Lineage{ParentVersion: "v23"}},
	} {
		v.Runtime, v.Resources = "onnxruntime", registry.Resources{CPUCores: 1, MemoryMB: 512}
		files := map[string][]byte{"model.safetensors": safetensorsFile("guard-" + v.Name)}
		if _, err := e.srv.Registry.RegisterVersion(ctx, system, "risk-model", v, manifestOf(files), filesOf(files)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.srv.Endpoints.Create(ctx, system, endpoint.Spec{Name: "fraud-scoring", Model: "risk-model", Version: "v23",
		Settings: endpoint.Settings{MinReplicas: 1, MaxReplicas: 1, Tier: "standard", RetentionDays: 30}}); err != nil {
		t.Fatal(err)
	}
}

// TestPortalFormsOfferVersionsThatFit: risk-endpoint serves v1 on a GPU, so
// its rollout and traffic forms offer the CPU versions disabled with why,
// and the server refuses them anyway (rollout start and traffic, from the
// API and the portal); fraud-scoring, whose v23 runs on CPU, offers its
// CPU sibling and refuses the GPU versions the same way.
func TestPortalFormsOfferVersionsThatFit(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	registerCPUVersions(t, e)
	u := portalSignIn(t, e, "risk-engineer@example.com")
	for _, c := range []struct{ endpoint, unfit, fit, why string }{
		{"risk-endpoint", "v24", "v2", "version v24 runs on CPU (gpu_count 0), and this endpoint serves v1 on GPUs"},
		{"fraud-scoring", "v2", "v24", "version v2 needs 1 GPU(s), and this endpoint serves v23 on CPU"},
	} {
		page := u.page("/endpoints/" + c.endpoint)
		bad := page.Find(`#rollout-form select#version option[value="` + c.unfit + `"]`)
		if _, disabled := bad.Attr("disabled"); !disabled || !strings.Contains(bad.Text(), c.why) {
			t.Errorf("%s: %s offered as %q (disabled %v), want disabled with %q", c.endpoint, c.unfit, bad.Text(), disabled, c.why)
		}
		good := page.Find(`#rollout-form select#version option[value="` + c.fit + `"]`)
		if _, disabled := good.Attr("disabled"); disabled || good.Length() != 1 {
			t.Errorf("%s: %s offered disabled (%q), want it offered", c.endpoint, c.fit, good.Text())
		}
		if got := page.Find(`#traffic tr[data-version="` + c.unfit + `"] .unroutable`).Text(); !strings.Contains(got, c.why) {
			t.Errorf("%s: traffic form says %q of %s, want %q", c.endpoint, got, c.unfit, c.why)
		}

		start := problem(t, c.endpoint+": API rollout of "+c.unfit, e.call(t, e.Keys["risk-admin"], http.MethodPost, "/endpoints/"+c.endpoint+"/rollouts",
			jsonPayload(map[string]any{"version": c.unfit})), http.StatusBadRequest)
		if !start.names("body.version") || !strings.Contains(string(mustJSON(t, start)), c.why) {
			t.Errorf("%s: rollout of %s refused at %v (%s), want body.version saying %q", c.endpoint, c.unfit, start.locations(), start.Detail, c.why)
		}
		traffic := problem(t, c.endpoint+": API traffic to "+c.unfit, e.call(t, e.Keys["risk-admin"], http.MethodPut, "/endpoints/"+c.endpoint+"/traffic",
			jsonPayload(map[string]any{"weights": []map[string]any{{"version": c.unfit, "weight": 100}}})), http.StatusBadRequest)
		if !strings.Contains(string(mustJSON(t, traffic)), c.why) {
			t.Errorf("%s: traffic to %s refused with %s, want %q", c.endpoint, c.unfit, mustJSON(t, traffic), c.why)
		}
		r := u.post("/endpoints/"+c.endpoint+"/rollouts", u.form("version", c.unfit, "strategy", "canary", "steps", "10, 100",
			"bake_minutes", "1", "interval_seconds", "30"))
		if r.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(r.doc(t).Find(`[data-field="version"]`).Text(), c.why) {
			t.Errorf("%s: portal rollout of %s = %d, want 422 saying %q at the version", c.endpoint, c.unfit, r.StatusCode, c.why)
		}
	}
	if rs, err := e.srv.Rollouts.List(context.Background(), system, "risk-endpoint", 10); err != nil || len(rs) != 0 {
		t.Errorf("rollouts after the refusals: %v, %v; want none", rs, err)
	}
}

// TestPortalRolloutOfWorseCandidateAsksFirst: starting a rollout of v24,
// whose AUC is worse than the serving v23's, is not done on the first post:
// the form comes back with why and a box to confirm (the API answers 409
// naming the metric); with the box ticked the rollout starts. A better
// metric (logloss) is not listed.
func TestPortalRolloutOfWorseCandidateAsksFirst(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	registerCPUVersions(t, e)
	const why = "than v23: auc 0.469 < 0.911 (higher is better)"

	api := problem(t, "API rollout of v24", e.call(t, e.Keys["risk-admin"], http.MethodPost, "/endpoints/fraud-scoring/rollouts",
		jsonPayload(map[string]any{"version": "v24"})), http.StatusConflict)
	if !strings.Contains(api.Detail, why) || !strings.Contains(api.Detail, "accept_worse_metrics") || strings.Contains(api.Detail, "logloss") {
		t.Errorf("API refusal says %q, want %q and how to confirm, not logloss", api.Detail, why)
	}

	u := portalSignIn(t, e, "risk-engineer@example.com")
	form := u.form("version", "v24", "strategy", "canary", "steps", "10, 100", "bake_minutes", "1", "interval_seconds", "30")
	r := u.post("/endpoints/fraud-scoring/rollouts", form)
	doc := r.doc(t)
	warning := strings.Join(strings.Fields(doc.Find("#rollout-worse").Text()), " ")
	if r.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(warning, why) || doc.Find(`#rollout-worse input[name="accept_worse_metrics"]`).Length() != 1 {
		t.Fatalf("first post = %d with warning %q; want 422 saying %q with a box to confirm", r.StatusCode, warning, why)
	}
	if got := doc.Find("#rollout-form select#version option[selected]").AttrOr("value", ""); got != "v24" {
		t.Errorf("the form came back with candidate %q, want v24 as posted", got)
	}
	if rs, err := e.srv.Rollouts.List(context.Background(), system, "fraud-scoring", 10); err != nil || len(rs) != 0 {
		t.Fatalf("rollouts before confirming: %v, %v; want none", rs, err)
	}
	form.Set("accept_worse_metrics", "yes")
	r = u.post("/endpoints/fraud-scoring/rollouts", form)
	if loc := r.Header.Get("Location"); r.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/rollouts/") {
		t.Fatalf("confirmed post = %d to %q, want 303 to the rollout", r.StatusCode, loc)
	}
	rs, err := e.srv.Rollouts.List(context.Background(), system, "fraud-scoring", 10)
	if err != nil || len(rs) != 1 || rs[0].ToVersion != "v24" || rs[0].FromVersion != "v23" {
		t.Errorf("rollouts after confirming: %+v, %v; want one from v23 to v24", rs, err)
	}
}

// TestPortalVersionComparesAnswers: v24's page sets its validation inputs
// (the demo's fraud samples, the last one obvious fraud) beside its answers
// and beside v23's stored answers to the same inputs, v23 being its parent
// and serving fraud-scoring: the obvious fraud is "legit 0.23" for v24 and
// "fraud 0.97" for v23, marked, and the disagreement rate counts it. v1,
// validated on other inputs, is not compared on these.
func TestPortalVersionComparesAnswers(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	registerCPUVersions(t, e)
	inputs := `[{"amount":42.5,"country":"US","merchant_category":"grocery"},{"amount":18,"country":"CA","merchant_category":"travel"},` +
		`{"amount":1250,"country":"NG","merchant_category":"electronics"}]`
	// The validator's outcome, as it writes it (package versioncheck runs
	// the real runtime; TestDemoV24CanaryRolledBackByDriftGate reads the
	// demo's real answers).
	for v, outputs := range map[string]string{
		"v23": `[{"label":"legit","score":0.02},{"label":"legit","score":0.05},{"label":"fraud","score":0.97}]`,
		"v24": `[{"label":"legit","score":0.41},{"label":"legit","score":0.38},{"label":"legit","score":0.23}]`,
		"v1":  `[{"label":"legit","score":0.5}]`,
	} {
		in := inputs
		if v == "v1" {
			in = `[{"amount":1}]`
		}
		if _, err := e.pool.Exec(t.Context(), `
			WITH v AS (SELECT v.id, v.team_id FROM model_versions v JOIN models m ON m.id = v.model_id WHERE m.name = 'risk-model' AND v.name = $1)
			INSERT INTO model_version_validations (version_id, team_id, state, inputs, outputs, finished_at)
			SELECT id, team_id, 'validated', $2, $3, now() FROM v
			ON CONFLICT (version_id) DO UPDATE SET state = 'validated', inputs = $2, outputs = $3, finished_at = now()`, v, in, outputs); err != nil {
			t.Fatal(err)
		}
	}
	doc := portalSignIn(t, e, "risk-engineer@example.com").page("/models/risk-model/versions/v24")
	portalCheckMarkup(t, "version page", doc)
	var cols []string
	doc.Find("#answers thead th[data-version]").Each(func(_ int, th *goquery.Selection) { cols = append(cols, th.AttrOr("data-version", "")) })
	if got, want := strings.Join(cols, ","), "v24,v23,v1"; got != want {
		t.Fatalf("answers compared for %s, want %s (the version, its parent serving fraud-scoring, v1 serving risk-endpoint)", got, want)
	}
	var rows [][]string
	doc.Find("#answers tbody tr").Each(func(_ int, tr *goquery.Selection) {
		var cells []string
		tr.Find("td").Each(func(_ int, td *goquery.Selection) { cells = append(cells, portalText(td)) })
		rows = append(rows, cells)
	})
	want := [][]string{
		{"amount=42.5, country=US, merchant_category=grocery", "legit 0.41", "legit 0.02", "–"},
		{"amount=18, country=CA, merchant_category=travel", "legit 0.38", "legit 0.05", "–"},
		{"amount=1250, country=NG, merchant_category=electronics", "legit 0.23", "fraud 0.97", "–"},
	}
	if fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Errorf("answers rows\n%q\nwant\n%q", rows, want)
	}
	if got := doc.Find("#answers tbody tr").Eq(2).Find("td.differs").Length(); got != 1 {
		t.Errorf("the obvious fraud has %d answers marked as differing, want v23's", got)
	}
	if got := portalText(doc.Find(`#disagreement td[data-version="v23"]`)); got != "1 of 3 inputs (33%)" {
		t.Errorf("disagreement with v23 = %q, want 1 of 3 inputs (33%%)", got)
	}
	if got := portalText(doc.Find(`#disagreement td[data-version="v1"]`)); !strings.Contains(got, "not compared") {
		t.Errorf("disagreement with v1 = %q, want not compared (other inputs)", got)
	}
}

// TestPortalRolloutShowsCanaryCost: the rollout page shows what the
// candidate has cost since the rollout started (chargeback's metered
// seconds of v2 on risk-endpoint, priced at the rates stamped on them),
// the incumbent's cost over the same time, and the monthly change of
// promoting: v2 on a MIG slice at $0.50/h for 30 min and v1 on a whole
// A100 at $3.50/h for 90 min, over the 2.5 h since the start, are $0.1/h
// against $2.1/h, so promoting saves (2.1 − 0.1) × 730.5 = $1,461 a month.
func TestPortalRolloutShowsCanaryCost(t *testing.T) {
	t.Parallel()
	e, ch := newChargebackEnv(t)
	ctx := t.Context()
	ro, err := e.srv.Rollouts.Start(ctx, system, "risk-endpoint", rollout.Spec{Version: "v2"})
	if err != nil {
		t.Fatal(err)
	}
	start := cbDay.Add(10 * time.Hour)
	if _, err := e.pool.Exec(ctx, `UPDATE rollouts SET created_at = $1 WHERE id = $2`, start, ro.ID); err != nil {
		t.Fatal(err)
	}
	b, err := ch.PrepareBatch(ctx, "INSERT INTO gpu_usage (ts, node, gpu, gpu_type, profile, team, endpoint, model, version, requests, rate_uusd_per_hour, batch_id, row_idx)")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1800 {
		if err := b.Append(start.Add(time.Duration(i)*time.Second), "n1", uint16(3), "A100-80GB", "mig-1g.10gb", "risk", "risk-endpoint", "risk-model", "v2",
			uint64(1), uint64(500_000), "canary", uint32(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	doc := portalSignIn(t, e, "risk-engineer@example.com").page(fmt.Sprintf("/rollouts/%d", ro.ID))
	portalCheckMarkup(t, "rollout page", doc)
	if got := portalText(doc.Find("#canary-cost")); !strings.Contains(got, "cost $0.25 so far (v2, since 2026-10-07 10:00:00)") ||
		!strings.Contains(got, "v1 cost $5.25 over the same time") {
		t.Errorf("canary cost %q, want v2's $0.25 since the start beside v1's $5.25", got)
	}
	if got := portalText(doc.Find("#promotion-cost")); !strings.Contains(got, "Promoting v2: −$1,461.00 per month") ||
		!strings.Contains(got, "v2 at $0.1000/h against v1 at $2.1000/h") {
		t.Errorf("promotion cost %q, want −$1,461.00 a month from $0.1000/h against $2.1000/h", got)
	}
	for v, want := range map[string]string{"v2": "v2 0.50 0.00 $0.25 $0.1000", "v1": "v1 1.50 0.00 $5.25 $2.1000"} {
		var cells []string
		doc.Find(`#rollout-cost-rates tr[data-version="` + v + `"] td`).Each(func(_ int, td *goquery.Selection) { cells = append(cells, portalText(td)) })
		if got := strings.Join(cells, " "); got != want {
			t.Errorf("%s cost row %q, want %q", v, got, want)
		}
	}
}
