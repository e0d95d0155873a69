package handlers

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"modelplane/endpoint"
	"modelplane/registry"
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
