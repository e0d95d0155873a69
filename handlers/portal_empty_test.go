package handlers

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"modelplane/registry"
)

// TestPortalSaysWhatIsEmpty: pages that have nothing to list say so (no
// quotas, a model without versions, finance's team and endpoints pages),
// and the rates the migration entered read "default rate" rather than the
// epoch and an author called "default".
func TestPortalSaysWhatIsEmpty(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	if _, err := e.srv.Registry.CreateModel(t.Context(), system, registry.ModelSpec{Team: "risk", Name: "empty-model", Task: registry.TaskClassification,
		InputSchema: json.RawMessage(`{"type":"object"}`), FeatureNames: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	doc := func(user, path string) *goquery.Document {
		t.Helper()
		r := e.portal(t, e.signIn(t, user), http.MethodGet, path, nil)
		if r.status != http.StatusOK {
			t.Fatalf("%s %s = %d:\n%s", user, path, r.status, r)
		}
		d, err := goquery.NewDocumentFromReader(strings.NewReader(r.String()))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for _, c := range []struct{ user, path, sel, want string }{
		{"risk-admin@example.com", "/quotas", "#quotas-empty", "No quotas set"},
		{"risk-admin@example.com", "/models/empty-model", "#versions-empty", "No versions yet"},
		{"finance@example.com", "/team", "#no-team", "You are in no team"},
		{"finance@example.com", "/endpoints", "#endpoints-no-team", "You are in no team"},
	} {
		if got := doc(c.user, c.path).Find(c.sel).Text(); !strings.Contains(got, c.want) {
			t.Errorf("%s %s: %s = %q, want %q", c.user, c.path, c.sel, got, c.want)
		}
	}
	if got := doc("risk-admin@example.com", "/models/risk-model").Find("#versions-empty").Length(); got != 0 {
		t.Errorf("a model with versions says it has none")
	}

	rates := doc("finance@example.com", "/cost-rates")
	rows := rates.Find("#rates tbody tr")
	if rows.Length() != 13 {
		t.Fatalf("%d rates, want the 13 defaults", rows.Length())
	}
	rows.Each(func(_ int, tr *goquery.Selection) {
		cells := tr.Find("td")
		if from, by := cells.Eq(3).Text(), cells.Eq(4).Text(); from != "default rate" || by != "–" {
			t.Errorf("rate %s: effective %q, entered by %q; want default rate, –", tr.AttrOr("data-rate", "?"), from, by)
		}
	})
	if strings.Contains(rates.Text(), "1970") {
		t.Errorf("the rates page shows the epoch")
	}
}
