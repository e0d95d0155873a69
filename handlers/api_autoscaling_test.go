package handlers

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"modelplane/endpoint"
)

// autoscalingBody is a valid policy for the classification endpoint of the
// test environment, with mod applied.
func autoscalingBody(mod func(map[string]any)) *payload {
	b := map[string]any{"signals": []map[string]any{{"signal": "rps", "target": 100}, {"signal": "queue_depth", "target": 10}},
		"min_replicas": 1, "max_replicas": 5, "scale_up_stabilization_s": 0, "scale_down_stabilization_s": 60, "scale_down_basis": "peak", "scale_up_rate": 4,
		"scale_down_rate": 0.5, "tolerance": 0.1, "panic_threshold": 2, "scale_to_zero_grace_s": 900, "cold_start_budget_s": 30,
		"predictive": "off"}
	if mod != nil {
		mod(b)
	}
	return jsonPayload(b)
}

// TestAPIAutoscalingPolicy: an endpoint shows its task's defaults until a
// policy is set; PUT stores it and the endpoint's min/max_replicas with it
// (one source of truth); each bad field is a 400 naming it and changes
// nothing.
func TestAPIAutoscalingPolicy(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	admin := e.Keys["risk-admin"]
	get := func() endpoint.Autoscaling {
		t.Helper()
		r := e.call(t, admin, http.MethodGet, "/endpoints/risk-endpoint/autoscaling", nil)
		if r.status != http.StatusOK {
			t.Fatalf("GET autoscaling = %s", r)
		}
		var a endpoint.Autoscaling
		if err := json.Unmarshal(r.body, &a); err != nil {
			t.Fatal(err)
		}
		return a
	}
	if a := get(); !a.Default || len(a.Policy.Signals) != 2 || a.Policy.Signals[0].Signal != "rps" || a.Policy.Signals[0].Target != 5000 ||
		a.Policy.ScaleDownStabilizationS != 300 || a.Desired != nil {
		t.Fatalf("default policy = %+v, want the classic defaults (rps 5000, queue_depth), no decision", a)
	}
	if r := e.call(t, admin, http.MethodPut, "/endpoints/risk-endpoint/autoscaling", autoscalingBody(nil)); r.status != http.StatusOK {
		t.Fatalf("PUT = %s", r)
	}
	a := get()
	if a.Default || a.Policy.MaxReplicas != 5 || a.Policy.ScaleDownStabilizationS != 60 || a.Policy.Signals[0].Target != 100 {
		t.Fatalf("stored policy = %+v, want max 5, window 60 s, rps 100", a)
	}
	if ep, err := e.srv.Endpoints.Get(t.Context(), system, "risk-endpoint"); err != nil || ep.MaxReplicas != 5 || ep.MinReplicas != 1 {
		t.Errorf("endpoint bounds = %d–%d (%v), want 1–5 (the policy's)", ep.MinReplicas, ep.MaxReplicas, err)
	}
	for _, c := range []struct {
		name     string
		mod      func(map[string]any)
		location string
	}{
		{"non-positive target", func(b map[string]any) { b["signals"] = []map[string]any{{"signal": "rps", "target": 0}} }, "body.signals[0].target"},
		{"min above max", func(b map[string]any) { b["min_replicas"] = 6 }, "body.min_replicas"},
		{"up rate below 1", func(b map[string]any) { b["scale_up_rate"] = 0.5 }, "body.scale_up_rate"},
		{"down rate above 1", func(b map[string]any) { b["scale_down_rate"] = 1.5 }, "body.scale_down_rate"},
		{"unknown scale-down basis", func(b map[string]any) { b["scale_down_basis"] = "median" }, "body.scale_down_basis"},
		{"trend horizon past ten minutes", func(b map[string]any) { b["trend_horizon_s"] = 601 }, "body.trend_horizon_s"},
		{"unknown signal", func(b map[string]any) { b["signals"] = []map[string]any{{"signal": "vibes", "target": 1}} }, "body.signals[0].signal"},
		{"KV use on a classifier", func(b map[string]any) { b["signals"] = []map[string]any{{"signal": "kv_cache", "target": 0.8}} }, "body.signals[0].signal"},
		{"tokens/s on a classifier", func(b map[string]any) {
			b["signals"] = []map[string]any{{"signal": "rps", "target": 10}, {"signal": "tokens_per_s", "target": 10}}
		}, "body.signals[1].signal"},
	} {
		doc := problem(t, c.name, e.call(t, admin, http.MethodPut, "/endpoints/risk-endpoint/autoscaling", autoscalingBody(c.mod)), http.StatusBadRequest)
		if !doc.names(c.location) {
			t.Errorf("%s: errors at %v; want %s", c.name, doc.locations(), c.location)
		}
	}
	// prompt_tokens_per_s is a signal the API knows, refused here by the
	// task's rule (LLM endpoints only), not as an unknown name.
	prefill := autoscalingBody(func(b map[string]any) {
		b["signals"] = []map[string]any{{"signal": "prompt_tokens_per_s", "target": 12000}}
	})
	doc := problem(t, "prompt tokens/s on a classifier", e.call(t, admin, http.MethodPut, "/endpoints/risk-endpoint/autoscaling", prefill), http.StatusBadRequest)
	if len(doc.Errors) != 1 || doc.Errors[0].Location != "body.signals[0].signal" ||
		!strings.Contains(doc.Errors[0].Message, "a classification endpoint does not report prompt_tokens_per_s") {
		t.Errorf("prompt tokens/s on a classifier: errors %+v; want the task's rule at body.signals[0].signal", doc.Errors)
	}
	if a := get(); a.Policy.MaxReplicas != 5 || a.Policy.Signals[0].Target != 100 {
		t.Errorf("after refused updates = %+v, want the stored policy kept", a)
	}
	trend := autoscalingBody(func(b map[string]any) { b["trend_horizon_s"] = 45 })
	if r := e.call(t, admin, http.MethodPut, "/endpoints/risk-endpoint/autoscaling", trend); r.status != http.StatusOK {
		t.Fatalf("PUT with a trend horizon = %s", r)
	}
	if a := get(); a.Policy.TrendHorizonS != 45 {
		t.Errorf("trend_horizon_s = %v after a PUT of 45", a.Policy.TrendHorizonS)
	}
	if r := e.call(t, e.Keys["risk-viewer"], http.MethodPut, "/endpoints/risk-endpoint/autoscaling", autoscalingBody(nil)); r.status != http.StatusForbidden {
		t.Errorf("viewer PUT = %d, want 403", r.status)
	}
	r := e.call(t, admin, http.MethodGet, "/endpoints/risk-endpoint/autoscaling/decisions", nil)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"items":[]`) {
		t.Errorf("decisions before any = %s, want an empty list", r)
	}
}

// TestPortalAutoscalingSection: the endpoint page shows the policy and the
// form; a bad signal is shown next to its field, a good policy is saved.
func TestPortalAutoscalingSection(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	u := portalSignIn(t, e, "risk-admin@example.com")
	doc := u.page("/endpoints/risk-endpoint")
	if got := doc.Find("#autoscale-policy").Text(); !strings.Contains(got, "rps 5000 per replica") {
		t.Fatalf("policy line = %q, want the defaults", got)
	}
	post := func(sigs string) (int, *goquery.Document) {
		r := u.post("/endpoints/risk-endpoint/autoscaling", u.form("as_signals", sigs, "as_min_replicas", "1",
			"as_max_replicas", "3", "as_scale_down_s", "30", "as_grace_s", "900"))
		return r.StatusCode, r.doc(t)
	}
	status, doc := post("kv_cache=0.8")
	if status != http.StatusUnprocessableEntity || !strings.Contains(doc.Find(`[data-field="as_signals"]`).Text(), "kv_cache") {
		t.Fatalf("bad signal = %d, error %q; want 422 naming kv_cache", status, doc.Find(`[data-field="as_signals"]`).Text())
	}
	status, doc = post("rps=200")
	if status != http.StatusOK || doc.Find("#autoscaling-saved").Length() != 1 || !strings.Contains(doc.Find("#autoscale-policy").Text(), "rps 200 per replica") {
		t.Fatalf("good policy = %d, policy %q; want saved with rps 200", status, doc.Find("#autoscale-policy").Text())
	}
	// A trend horizon set through the API is shown, and a save from the
	// form, which has no field for it, keeps it.
	if r := e.call(t, e.Keys["risk-admin"], http.MethodPut, "/endpoints/risk-endpoint/autoscaling",
		autoscalingBody(func(b map[string]any) { b["trend_horizon_s"] = 45 })); r.status != http.StatusOK {
		t.Fatalf("PUT with a trend horizon = %s", r)
	}
	if got := u.page("/endpoints/risk-endpoint").Find("#autoscale-policy").Text(); !strings.Contains(got, "rate trend followed 45s ahead") {
		t.Errorf("policy line = %q, want the trend horizon", got)
	}
	if status, doc = post("rps=150"); status != http.StatusOK || !strings.Contains(doc.Find("#autoscale-policy").Text(), "rate trend followed 45s ahead") {
		t.Errorf("after a form save = %d, policy %q; want the trend horizon kept", status, doc.Find("#autoscale-policy").Text())
	}
}
