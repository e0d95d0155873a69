package handlers

import (
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBrowserEndpointSections: the endpoint page's section nav shows the
// chosen section alone (the autoscaling form without the settings form,
// and back), with no script of its own: the links are anchors.
func TestBrowserEndpointSections(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	b := newBrowser(t)
	b.do("sign in as risk admin and open the endpoint",
		chromedp.Navigate(e.URL+"/endpoints/risk-endpoint"),
		chromedp.Click(chromedp.CSS(`button[data-user="risk-admin@example.com"]`)),
		chromedp.WaitVisible(chromedp.ID("whoami")),
		chromedp.Navigate(e.URL+"/endpoints/risk-endpoint"),
		chromedp.WaitVisible(chromedp.ID("endpoint-sections")),
	)
	shown := func(id string) bool {
		return browserRun(b, "is "+id+" shown", chromedp.Evaluate[bool](`(() => { const el = document.getElementById('`+id+`'); return !!el && el.getClientRects().length > 0; })()`))
	}
	if !shown("settings-form") || !shown("autoscaling-form") || !shown("traffic") {
		t.Fatalf("before a section is chosen every section should show")
	}
	b.do("choose Autoscaling",
		chromedp.Click(chromedp.CSS(`#endpoint-sections a[href="#sec-autoscaling"]`)),
		chromedp.WaitNotVisible(chromedp.ID("settings-form")),
	)
	if !shown("autoscaling-form") || shown("traffic") || shown("try-it") {
		t.Errorf("autoscaling chosen: autoscaling %t, traffic %t, try it %t; want autoscaling alone",
			shown("autoscaling-form"), shown("traffic"), shown("try-it"))
	}
	b.do("choose Settings",
		chromedp.Click(chromedp.CSS(`#endpoint-sections a[href="#sec-settings"]`)),
		chromedp.WaitVisible(chromedp.ID("delete-form")),
		chromedp.WaitNotVisible(chromedp.ID("autoscaling-form")),
	)
}
