package handlers

import (
	"context"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"modelplane/endpoint"
	"modelplane/registry"
)

// TestPortalVersionComparesMetrics: a version's page shows its offline
// metrics beside its parent's and the serving versions' (the demo's v24,
// AUC 0.469, against v23, 0.911, its parent serving on fraud-scoring), a
// version without metrics beside the serving one's, and the rollout form's default
// candidate is the newest version not serving that can run, never the one
// already at 100 percent; an invalid version is offered disabled, with why.
func TestPortalVersionComparesMetrics(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	ctx := context.Background()
	for _, v := range []registry.VersionSpec{
		{Name: "v23", OfflineMetrics: map[string]float64{"auc": 0.911, "logloss": 0.21}},
		{Name: "v24", OfflineMetrics: map[string]float64{"auc": 0.469}, Lineage: registry.Lineage{ParentVersion: "v23"}},
		{Name: "v25"},
	} {
		v.Runtime, v.Resources = "onnxruntime", registry.Resources{CPUCores: 1, MemoryMB: 512}
		files := map[string][]byte{"model.safetensors": safetensorsFile("compare-" + v.Name)}
		if _, err := e.srv.Registry.RegisterVersion(ctx, system, "risk-model", v, manifestOf(files), filesOf(files)); err != nil {
			t.Fatal(err)
		}
	}
	// v25, the newest, failed its validation: it cannot run anywhere.
	if _, err := e.pool.Exec(ctx, `UPDATE model_versions SET status = 'invalid' WHERE name = 'v25'`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.srv.Endpoints.Create(ctx, system, endpoint.Spec{Name: "fraud-scoring", Model: "risk-model", Version: "v23",
		Settings: endpoint.Settings{MinReplicas: 1, MaxReplicas: 1, Tier: "standard", RetentionDays: 30}}); err != nil {
		t.Fatal(err)
	}
	u := portalSignIn(t, e, "risk-engineer@example.com")
	doc := u.page("/models/risk-model/versions/v24")
	portalCheckMarkup(t, "version page", doc)
	var cols []string
	doc.Find("#metrics thead th[data-version]").Each(func(_ int, th *goquery.Selection) {
		cols = append(cols, strings.Join(strings.Fields(th.Text()), " "))
	})
	if want := []string{"v24", "v23 parent; serving on fraud-scoring", "v1 serving on risk-endpoint"}; strings.Join(cols, "|") != strings.Join(want, "|") {
		t.Errorf("compared columns %q, want %q", cols, want)
	}
	row := func(doc *goquery.Document, metric string) string {
		var cells []string
		doc.Find(`#metrics tr[data-metric="` + metric + `"] td`).Each(func(_ int, td *goquery.Selection) { cells = append(cells, td.Text()) })
		return strings.Join(cells, " ")
	}
	if got := row(doc, "auc"); got != "auc 0.469 0.911 –" {
		t.Errorf("auc row %q, want v24 0.469 beside v23 0.911", got)
	}
	if got := row(doc, "logloss"); got != "logloss – 0.21 –" {
		t.Errorf("logloss row %q", got)
	}
	// A version without metrics of its own is still set beside the
	// serving version's.
	if got := row(u.page("/models/risk-model/versions/v1"), "auc"); got != "auc – 0.911" {
		t.Errorf("v1's auc row %q, want – beside the serving v23's 0.911", got)
	}
	// risk-endpoint serves v1 on a GPU: the CPU versions cannot join it, so
	// its default candidate is v2 (tested in TestPortalFormsOfferVersionsThatFit).
	for ep, want := range map[string]string{"fraud-scoring": "v24", "risk-endpoint": "v2"} {
		page := u.page("/endpoints/" + ep)
		if got := page.Find("#rollout-form select#version option[selected]").AttrOr("value", ""); got != want {
			t.Errorf("%s: default candidate %q, want %s (the newest not serving that can run)", ep, got, want)
		}
		bad := page.Find(`#rollout-form select#version option[value="v25"]`)
		if _, disabled := bad.Attr("disabled"); !disabled || !strings.Contains(bad.Text(), "cannot run: version v25 is invalid") {
			t.Errorf("%s: v25 offered as %q (disabled %v), want disabled with the reason", ep, bad.Text(), disabled)
		}
		if got := page.Find(`#traffic tr[data-version="v25"] .unroutable`).Text(); !strings.Contains(got, "v25 is invalid") {
			t.Errorf("%s: traffic form says %q of v25, want why it cannot take traffic", ep, got)
		}
	}
}
