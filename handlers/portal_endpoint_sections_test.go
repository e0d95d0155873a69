package handlers

import (
	"strings"

	"github.com/PuerkitoBio/goquery"
	"testing"
)

// TestPortalEndpointSections: the endpoint page is in four sections, each
// linked from the section nav, with the forms where a person looks for
// them; a viewer, who can change nothing, gets no settings section.
func TestPortalEndpointSections(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	admin := portalSignIn(t, e, "risk-admin@example.com")
	doc := admin.page("/endpoints/risk-endpoint")
	var links []string
	doc.Find("#endpoint-sections a").Each(func(_ int, a *goquery.Selection) {
		links = append(links, a.AttrOr("href", ""))
	})
	if got, want := strings.Join(links, " "), "#sec-overview #sec-traffic #sec-autoscaling #sec-settings"; got != want {
		t.Fatalf("section nav = %q, want %q", got, want)
	}
	for _, c := range []struct{ section, holds string }{
		{"#sec-overview", "#stats"},
		{"#sec-overview", "#try-it"},
		{"#sec-traffic", "#traffic"},
		{"#sec-traffic", "#set-traffic"},
		{"#sec-autoscaling", "#autoscaling-form"},
		{"#sec-settings", "#settings-form"},
		{"#sec-settings", "#delete-form"},
	} {
		if doc.Find(c.section+" "+c.holds).Length() != 1 {
			t.Errorf("%s does not hold %s", c.section, c.holds)
		}
	}
	if n := doc.Find("#sec-overview form#settings-form, #sec-traffic #autoscaling-form").Length(); n != 0 {
		t.Errorf("%d forms outside their section", n)
	}
	viewer := portalSignIn(t, e, "risk-viewer@example.com")
	vdoc := viewer.page("/endpoints/risk-endpoint")
	if vdoc.Find("#sec-settings").Length() != 0 || vdoc.Find(`#endpoint-sections a[href="#sec-settings"]`).Length() != 0 {
		t.Errorf("viewer gets a settings section")
	}
	if vdoc.Find("#sec-overview #stats").Length() != 1 {
		t.Errorf("viewer's overview lacks the traffic stats")
	}
}
