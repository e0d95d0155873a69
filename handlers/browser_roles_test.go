package handlers

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"modelplane/rollout"
)

// TestBrowserFinanceLandsOnChargeback: finance opening the portal signs in
// and lands on chargeback, where its work is, not on an empty endpoints
// list; a risk engineer still lands on the endpoints. Finance reads the
// cost rates without a form, and a rate it posts anyway from the page (with
// its session and CSRF token) is refused by the server.
func TestBrowserFinanceLandsOnChargeback(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	for user, want := range map[string]string{"finance@example.com": "/chargeback", "risk-engineer@example.com": "/endpoints"} {
		b := newBrowser(t)
		b.do("open the portal and sign in as "+user,
			chromedp.Navigate(e.URL),
			chromedp.Click(chromedp.CSS(`button[data-user="`+user+`"]`)),
			chromedp.WaitVisible(chromedp.ID("whoami")),
		)
		if loc := b.location(); loc != e.URL+want {
			t.Errorf("%s landed on %s, want %s", user, loc, e.URL+want)
		}
		if user != "finance@example.com" {
			continue
		}
		b.do("open the cost rates as finance",
			chromedp.Navigate(e.URL+"/cost-rates"),
			chromedp.WaitVisible(chromedp.ID("rates-read-only")),
		)
		if n := browserRun(b, "count rate forms", chromedp.Evaluate[int](`document.querySelectorAll('#rate-form').length`)); n != 0 {
			t.Errorf("finance sees %d rate forms, want none", n)
		}
		shot(b, filepath.Join(os.TempDir(), "portal-finance-cost-rates.png"))
		status := browserRun(b, "post a rate as finance", chromedp.Evaluate[int](`fetch('/cost-rates', {method: 'POST', body: new URLSearchParams({
			csrf: document.querySelector('meta[name="csrf-token"]').content, gpu_type: 'A100-80GB', profile: 'full',
			usd_per_hour: '0.01', effective_from: '2099-01-01T00:00:00Z'})}).then(r => r.status)`, chromedp.EvalAwaitPromise))
		if status != http.StatusForbidden {
			t.Errorf("finance's rate change answered %d, want 403", status)
		}
	}
}

// TestBrowserRolloutsList: the rollouts list shows every rollout the user
// may see and filters by state; a member of search sees none of risk's;
// an unknown state is a 400 and an unknown page a styled 404.
func TestBrowserRolloutsList(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	ctx := t.Context()
	active, err := e.srv.Rollouts.Start(ctx, system, "risk-endpoint", rollout.Spec{Version: "v2"})
	if err != nil {
		t.Fatal(err)
	}
	back, err := e.srv.Rollouts.Start(ctx, system, "search-endpoint", rollout.Spec{Version: "v2"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.srv.Rollouts.Rollback(ctx, system, back.ID, "test"); err != nil {
		t.Fatal(err)
	}

	b := newBrowser(t)
	b.do("sign in as the platform admin on the way to the rollouts",
		chromedp.Navigate(e.URL+"/rollouts"),
		chromedp.Click(chromedp.CSS(`button[data-user="admin@example.com"]`)),
		chromedp.WaitVisible(chromedp.ID("rollouts-list")),
	)
	ids := func(what string) string {
		return browserRun(b, what, chromedp.Evaluate[string](
			`[...document.querySelectorAll('#rollouts-list tr[data-rollout]')].map(tr => tr.dataset.rollout).join(',')`))
	}
	if got, want := ids("read every rollout"), fmt.Sprintf("%d,%d", back.ID, active.ID); got != want {
		t.Errorf("rollouts listed = %s, want %s (newest first)", got, want)
	}
	b.do("filter by rolled back",
		chromedp.Click(chromedp.CSS(`#rollouts-filter input[value="rolled_back"]`)),
		chromedp.Click(chromedp.CSS(`#rollouts-filter button`)),
		chromedp.WaitVisible(chromedp.CSS(`#rollouts-filter a[href="/rollouts"]`)),
	)
	if got, want := ids("read the rolled back rollouts"), fmt.Sprint(back.ID); got != want {
		t.Errorf("rolled back rollouts = %s, want %s", got, want)
	}
	if loc := b.location(); !strings.HasSuffix(loc, "/rollouts?state=rolled_back") {
		t.Errorf("filtered list at %s, want /rollouts?state=rolled_back", loc)
	}
	b.do("filter by completed",
		chromedp.Navigate(e.URL+"/rollouts?state=completed"),
		chromedp.WaitVisible(chromedp.ID("rollouts-empty")),
	)
	if got := b.text("#rollouts-empty"); got != "No rollouts in these states." {
		t.Errorf("empty filter says %q", got)
	}
	if p := b.problems(); len(p) > 0 {
		t.Errorf("the browser console reported problems:\n%s", strings.Join(p, "\n"))
	}

	search := e.signIn(t, "search-admin@example.com")
	if r := e.portal(t, search, http.MethodGet, "/rollouts", nil); r.status != http.StatusOK || strings.Contains(r.String(), "risk-endpoint") ||
		!strings.Contains(r.String(), "search-endpoint") {
		t.Errorf("search admin's rollouts = %d, want search's alone:\n%s", r.status, r)
	}
	if r := e.portal(t, search, http.MethodGet, "/rollouts?state=nonsense", nil); r.status != http.StatusBadRequest {
		t.Errorf("unknown state = %d, want 400", r.status)
	}
	r := e.send(t, http.MethodGet, "/no/such/page", nil, nil)
	if r.status != http.StatusNotFound || !strings.Contains(r.String(), `href="/static/app.css"`) ||
		!strings.Contains(r.String(), "404 · no such page") {
		t.Errorf("unknown page = %d, want the styled 404:\n%s", r.status, r)
	}
	if r := e.call(t, e.Keys["risk-admin"], http.MethodGet, "/no/such/thing", nil); r.status != http.StatusNotFound || strings.Contains(r.String(), "<html") {
		t.Errorf("unknown API path = %d, want a plain 404:\n%s", r.status, r)
	}
}

// TestBrowserRolloutOfWorseCandidateAsksFirst: a risk engineer starting a
// rollout of v24 on fraud-scoring from the endpoint's page (v24, the
// default candidate, has a worse AUC than the serving v23) gets the form
// back with why and a box to tick; ticked, the rollout starts and its page
// opens.
func TestBrowserRolloutOfWorseCandidateAsksFirst(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	registerCPUVersions(t, e)
	b := newBrowser(t)
	b.do("sign in as the risk engineer on the way to fraud-scoring",
		chromedp.Navigate(e.URL+"/endpoints/fraud-scoring"),
		chromedp.Click(chromedp.CSS(`button[data-user="risk-engineer@example.com"]`)),
		chromedp.WaitVisible(chromedp.ID("rollout-form")),
	)
	b.do("start a rollout of the default candidate",
		chromedp.Click(chromedp.ID("start-rollout")),
		chromedp.WaitVisible(chromedp.ID("rollout-worse")),
	)
	if got := b.text("#rollout-worse"); !strings.Contains(got, "than v23: auc 0.469 < 0.911") {
		t.Errorf("the warning says %q, want v23's better auc", got)
	}
	shot(b, filepath.Join(os.TempDir(), "portal-risk-engineer-rollout-worse.png"))
	b.do("confirm and start",
		chromedp.Click(chromedp.ID("accept-worse")),
		chromedp.Click(chromedp.ID("start-rollout")),
		chromedp.WaitVisible(chromedp.ID("rollout-state")),
	)
	if loc := b.location(); !strings.Contains(loc, "/rollouts/") {
		t.Errorf("after confirming the browser is at %s, want the rollout's page", loc)
	}
	if h := b.text("h1"); !strings.Contains(h, "v23 → v24") {
		t.Errorf("rollout page heading %q, want v23 → v24", h)
	}
}
