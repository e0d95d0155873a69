package handlers

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/chromedp/chromedp"
	"github.com/coder/quartz"

	"modelplane/auth"
	"modelplane/busapi"
	"modelplane/endpoint"
	"modelplane/judge"
	"modelplane/rollout"
)

// noStats answers every window with nothing: the approval flow needs no
// verdict.
type noStats struct{}

func (noStats) Totals(context.Context, string, int64, time.Time, time.Time) (map[string]judge.Window, error) {
	return map[string]judge.Window{}, nil
}

func (noStats) Through(context.Context, string, int64, time.Time) (time.Time, error) {
	return time.Time{}, nil
}

// TestPortalRolloutApproveFlow drives a blue-green rollout from the portal:
// an engineer starts it, the page offers Approve only to a team admin who
// did not start it, the admin's "waiting for your approval" list names it,
// the approval (htmx, with a comment) is recorded, and the controller then
// switches the traffic. The page's event stream reports the change.
func TestPortalRolloutApproveFlow(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	ctx := context.Background()
	// A ready candidate replica (min_replicas 0 places none): the rollout
	// moves traffic only once one is ready.
	if _, err := e.srv.Endpoints.Create(ctx, system, endpoint.Spec{Name: "bg-endpoint", Model: "risk-model", Version: "v1", Runtime: "onnxruntime",
		Settings: endpoint.Settings{InstanceProfile: "mig-1g.10gb", MinReplicas: 0, MaxReplicas: 1, Tier: "batch", RetentionDays: 1}}); err != nil {
		t.Fatal(err)
	}
	readyReplica(t, e, "bg-endpoint", "v2")
	eng := portalSignIn(t, e, "risk-engineer@example.com")
	r := portalRequest(t, e, eng.token, http.MethodPost, "/endpoints/bg-endpoint/rollouts", "application/x-www-form-urlencoded",
		[]byte("csrf="+eng.csrf+"&version=v2&strategy=blue-green&steps=100&bake_minutes=10&interval_seconds=5"), nil)
	if r.StatusCode != http.StatusSeeOther || !strings.HasPrefix(r.Header.Get("Location"), "/rollouts/") {
		t.Fatalf("start from the portal = %d to %q, want 303 to the rollout page\n%.800s", r.StatusCode, r.Header.Get("Location"), r.Body)
	}
	page := r.Header.Get("Location")
	var id int64
	if _, err := fmt.Sscanf(page, "/rollouts/%d", &id); err != nil {
		t.Fatal(err)
	}
	ctl := rollout.NewController(rollout.ControllerConfig{Pool: e.pool, Stats: noStats{}})
	if err := ctl.Pass(ctx); err != nil {
		t.Fatal(err)
	}

	doc := eng.page(page)
	if doc.Find("#rollout-live[data-events]").AttrOr("data-events", "") != page+"/events" {
		t.Errorf("the live section does not name its event stream")
	}
	if js := eng.get("/static/live.js"); js.StatusCode != http.StatusOK || !strings.Contains(string(js.Body), "EventSource") {
		t.Errorf("GET /static/live.js = %d, want the script that follows the stream", js.StatusCode)
	}
	if got := doc.Find("#rollout-state").Text(); got != rollout.StateAwaitingApproval {
		t.Fatalf("state on the page = %q, want awaiting_approval", got)
	}
	if doc.Find("#rollout-approve").Length() != 0 {
		t.Errorf("the initiator is offered Approve")
	}
	if doc.Find("#rollout-rollback").Length() != 1 || doc.Find("#rollout-pause").Length() != 1 {
		t.Errorf("the engineer who may operate it is not offered Roll back and Pause")
	}
	viewer := portalSignIn(t, e, "risk-viewer@example.com")
	if d := viewer.page(page); d.Find("#rollout-actions button").Length() != 0 {
		t.Errorf("a viewer is offered %d buttons, want none", d.Find("#rollout-actions button").Length())
	}

	admin := portalSignIn(t, e, "risk-admin@example.com")
	list := admin.page("/endpoints")
	if list.Find(fmt.Sprintf("#awaiting-approval tr[data-rollout='%d']", id)).Length() != 1 {
		t.Errorf("the admin's endpoints page does not list rollout %d as waiting for approval", id)
	}
	if d := eng.page("/endpoints"); d.Find("#awaiting-approval").Length() != 0 {
		t.Errorf("the initiator's page lists rollouts waiting for their own approval")
	}
	doc = admin.page(page)
	if doc.Find("#rollout-approve").Length() != 1 || doc.Find("#rollout-reject").Length() != 1 {
		t.Fatalf("the admin is not offered Approve and Reject")
	}
	if !strings.Contains(doc.Find("#rollout-waiting").Text(), "other than") {
		t.Errorf("the page does not say who may approve: %q", doc.Find("#rollout-waiting").Text())
	}

	// Follow the page's event stream while the admin approves.
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(sctx, http.MethodGet, e.URL+page+"/events", nil)
	req.AddCookie(&http.Cookie{Name: auth.SessionCookie, Value: admin.token})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events = %d %s, want an event stream", resp.StatusCode, resp.Header.Get("Content-Type"))
	}

	r = portalRequest(t, e, admin.token, http.MethodPost, page+"/approve", "application/x-www-form-urlencoded",
		[]byte("comment=ship+it"), nil, "X-CSRF-Token", admin.csrf, "HX-Request", "true")
	if r.StatusCode != http.StatusOK {
		t.Fatalf("approve = %d\n%.800s", r.StatusCode, r.Body)
	}
	frag := r.doc(t)
	if !strings.Contains(frag.Find("#rollout-approvals").Text(), "ship it") {
		t.Errorf("the approval's comment is not shown: %q", frag.Find("#rollout-approvals").Text())
	}
	if frag.Find("#rollout-approve").Length() != 0 {
		t.Errorf("Approve still offered after the approval")
	}
	sc := bufio.NewScanner(resp.Body)
	gotEvent := false
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var ev struct{ Kind, Decision string }
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				t.Fatal(err)
			}
			if ev.Kind == "approval" && ev.Decision == "approve" {
				gotEvent = true
				break
			}
		}
	}
	if !gotEvent {
		t.Errorf("the event stream did not report the approval")
	}

	if err := ctl.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	live := admin.page(page + "/live")
	if got := live.Find("#rollout-state").Text(); got != rollout.StateProgressing {
		t.Errorf("after the controller's pass: state %q, want progressing (switched, in the rollback window)", got)
	}
	ep, err := e.srv.Endpoints.Get(ctx, system, "bg-endpoint")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ep.Traffic {
		if (w.Version == "v2") != (w.Weight == 100) {
			t.Errorf("traffic after the approval: %+v, want v2 at 100", ep.Traffic)
		}
	}
}

// TestBrowserRolloutApproval is the approve flow in Chromium: a team admin
// finds the rollout in "waiting for your approval", approves it with a
// comment (htmx swaps the live section), and when the controller switches
// the traffic the page shows it by itself, over server-sent events.
func TestBrowserRolloutApproval(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	ctx := context.Background()
	if _, err := e.srv.Endpoints.Create(ctx, system, endpoint.Spec{Name: "bg-endpoint", Model: "risk-model", Version: "v1", Runtime: "onnxruntime",
		Settings: endpoint.Settings{InstanceProfile: "mig-1g.10gb", MinReplicas: 0, MaxReplicas: 1, Tier: "batch", RetentionDays: 1}}); err != nil {
		t.Fatal(err)
	}
	readyReplica(t, e, "bg-endpoint", "v2")
	got := e.call(t, e.Keys["risk-engineer"], http.MethodPost, "/endpoints/bg-endpoint/rollouts",
		jsonPayload(map[string]any{"version": "v2", "strategy": "blue-green"}))
	if got.status != http.StatusCreated {
		t.Fatalf("start = %d %s", got.status, got)
	}
	var ro struct{ ID int64 }
	if err := json.Unmarshal(got.body, &ro); err != nil {
		t.Fatal(err)
	}
	ctl := rollout.NewController(rollout.ControllerConfig{Pool: e.pool, Stats: noStats{}})
	if err := ctl.Pass(ctx); err != nil {
		t.Fatal(err)
	}

	b := newBrowser(t)
	const admin = "risk-admin@example.com"
	b.do("sign in as "+admin,
		chromedp.Navigate(e.URL),
		chromedp.WaitVisible(chromedp.CSS(`button[data-user="`+admin+`"]`)),
		chromedp.Click(chromedp.CSS(`button[data-user="`+admin+`"]`)),
		chromedp.WaitVisible(chromedp.ID("whoami")),
	)
	row := fmt.Sprintf(`#awaiting-approval tr[data-rollout="%d"] a`, ro.ID)
	b.do("open the rollout from the approval list",
		chromedp.Navigate(e.URL+"/endpoints"),
		chromedp.WaitVisible(chromedp.CSS(row)),
		chromedp.Click(chromedp.CSS(row)),
		chromedp.WaitVisible(chromedp.ID("rollout-approve")),
	)
	b.do("approve with a comment",
		chromedp.SendKeys(chromedp.CSS(`input[aria-label="Approve comment"]`), "numbers look right"),
		chromedp.Click(chromedp.ID("rollout-approve")),
		chromedp.WaitVisible(chromedp.ID("rollout-approvals")),
	)
	if got := b.text("#rollout-approvals"); !strings.Contains(got, "numbers look right") || !strings.Contains(got, admin) {
		t.Errorf("approvals = %q, want the admin's comment", got)
	}
	// The controller switches; the page learns of it from the event stream.
	if err := ctl.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	b.do("see the switch without reloading",
		chromedp.WaitVisible(chromedp.CSS(`#rollout-state.progressing`)),
	)
	if got := b.text("#rollout-reason"); !strings.Contains(got, "serves 100 percent") {
		t.Errorf("reason after the switch = %q", got)
	}
	png := browserRun(b, "screenshot", chromedp.FullScreenshot(100))
	if err := os.WriteFile("/tmp/portal-rollout.png", png, 0o644); err != nil {
		t.Logf("screenshot not written: %v", err)
	}
	if p := b.problems(); len(p) > 0 {
		t.Errorf("the browser console reported problems:\n%s", strings.Join(p, "\n"))
	}
}

// fixedStats serves the same windows every time.
type fixedStats map[string]judge.Window

func (f fixedStats) Totals(context.Context, string, int64, time.Time, time.Time) (map[string]judge.Window, error) {
	return f, nil
}

func (fixedStats) Through(context.Context, string, int64, time.Time) (time.Time, error) {
	return time.Time{}, nil
}

func latencyWindow(n uint64, bucket int) judge.Window {
	h := make([]uint64, busapi.LatencyBuckets)
	h[bucket] = n
	return judge.Window{Requests: n, Latency: h}
}

// TestPortalRolloutVerdictCharts: the rollout page draws every judged metric
// against its threshold, shows both versions' latest window, and lists
// every verdict in the timeline.
func TestPortalRolloutVerdictCharts(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	ctx := context.Background()
	if _, err := e.srv.Endpoints.Create(ctx, system, endpoint.Spec{Name: "canary-endpoint", Model: "risk-model", Version: "v1", Runtime: "onnxruntime",
		Settings: endpoint.Settings{InstanceProfile: "mig-1g.10gb", MinReplicas: 0, MaxReplicas: 1, Tier: "batch", RetentionDays: 1}}); err != nil {
		t.Fatal(err)
	}
	readyReplica(t, e, "canary-endpoint", "v2")
	ro, err := e.srv.Rollouts.Start(ctx, system, "canary-endpoint", rollout.Spec{Version: "v2", EvaluationInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	clock := quartz.NewMock(t)
	clock.Set(time.Now())
	// Too few candidate requests for three evaluations, then a candidate
	// 10 buckets slower than the incumbent: rolled back.
	stats := fixedStats{"v1": latencyWindow(500, 10), "v2": latencyWindow(20, 20)}
	for i := range 5 {
		if i == 4 {
			stats["v2"] = latencyWindow(500, 20)
		}
		ctl := rollout.NewController(rollout.ControllerConfig{Pool: e.pool, Stats: stats, Clock: clock})
		if err := ctl.Pass(ctx); err != nil {
			t.Fatal(err)
		}
		clock.Set(clock.Now().Add(time.Second))
	}
	admin := portalSignIn(t, e, "risk-admin@example.com")
	doc := admin.page(fmt.Sprintf("/rollouts/%d", ro.ID))
	if got := doc.Find("#rollout-state").Text(); got != rollout.StateRolledBack {
		t.Fatalf("state %q, want rolled_back", got)
	}
	fig := doc.Find(`#rollout-checks figure[data-chart="check-p99_latency_ms_regression"]`)
	if fig.Length() != 1 {
		t.Fatalf("no chart of the p99 regression check; charts: %v", doc.Find("#rollout-checks figure").Map(func(_ int, s *goquery.Selection) string {
			return s.AttrOr("data-chart", "")
		}))
	}
	for _, line := range []string{"candidate", "threshold", "incumbent"} {
		if fig.Find(`polyline[data-line="`+line+`"]`).Length() != 1 {
			t.Errorf("the regression chart has no %s line", line)
		}
	}
	if doc.Find(`#rollout-checks figure[data-chart="check-requests"]`).Length() != 1 {
		t.Errorf("no chart of the request counts")
	}
	if rows := doc.Find("#rollout-window tbody tr"); rows.Length() != 2 || !strings.Contains(rows.First().Text(), "500") {
		t.Errorf("latest window = %q, want both versions with 500 requests", rows.Text())
	}
	if n := doc.Find("#rollout-events tr.verdict").Length(); n != 4 {
		t.Errorf("%d verdicts in the timeline, want 4 (three holds, one rollback)", n)
	}
	if doc.Find("#rollout-actions button").Length() != 0 {
		t.Errorf("buttons offered on a finished rollout")
	}
}

// fixedDrift measures the same drift every time.
type fixedDrift struct{ d judge.Drift }

func (f *fixedDrift) Drift(context.Context, string, int64, string, string, time.Time, time.Time) (*judge.Drift, error) {
	d := f.d
	return &d, nil
}

// TestPortalRolloutDriftCheck: a drift-gated rollout's page charts the
// drift check against its threshold, shows the latest window's output
// agreement, and links both to the endpoint's drift dashboard.
func TestPortalRolloutDriftCheck(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	ctx := context.Background()
	if _, err := e.srv.Endpoints.Create(ctx, system, endpoint.Spec{Name: "drift-endpoint", Model: "risk-model", Version: "v1", Runtime: "onnxruntime",
		Settings: endpoint.Settings{InstanceProfile: "mig-1g.10gb", MinReplicas: 0, MaxReplicas: 1, Tier: "batch", SamplingRate: 1, RetentionDays: 1}}); err != nil {
		t.Fatal(err)
	}
	readyReplica(t, e, "drift-endpoint", "v2")
	measured := &fixedDrift{judge.Drift{Metric: "w1_norm", Value: 0.05, Threshold: 0.2, Enough: true, CandidateSamples: 400, IncumbentSamples: 8000}}
	on := true
	// The test server measures no drift (no ClickHouse), so it refuses a
	// drift gate; a Service with the measurer starts the rollout.
	ro, err := rollout.New(e.pool, nil, measured).Start(ctx, system, "drift-endpoint", rollout.Spec{Version: "v2", EvaluationInterval: time.Second,
		Criteria: rollout.CriteriaSpec{Drift: &on}})
	if err != nil {
		t.Fatal(err)
	}
	clock := quartz.NewMock(t)
	clock.Set(time.Now())
	stats := fixedStats{"v1": latencyWindow(500, 10), "v2": latencyWindow(500, 10)}
	pass := func() {
		t.Helper()
		ctl := rollout.NewController(rollout.ControllerConfig{Pool: e.pool, Stats: stats, Drift: measured, Clock: clock})
		if err := ctl.Pass(ctx); err != nil {
			t.Fatal(err)
		}
		clock.Set(clock.Now().Add(time.Second))
	}
	for range 3 {
		pass()
	}
	admin := portalSignIn(t, e, "risk-admin@example.com")
	doc := admin.page(fmt.Sprintf("/rollouts/%d", ro.ID))
	if got := doc.Find("#rollout-agreement").AttrOr("data-status", ""); got != "agrees" {
		t.Fatalf("output agreement %q while the drift is within its threshold, want agrees (state %s)", got, doc.Find("#rollout-state").Text())
	}
	measured.d.Value = 2.3
	pass()
	doc = admin.page(fmt.Sprintf("/rollouts/%d", ro.ID))
	if got := doc.Find("#rollout-state").Text(); got != rollout.StateRolledBack {
		t.Fatalf("state %q after a drifting window, want rolled_back", got)
	}
	fig := doc.Find(`#rollout-checks figure[data-chart="check-drift"]`)
	if fig.Length() != 1 {
		t.Fatalf("no chart of the drift check")
	}
	for _, line := range []string{"candidate", "threshold"} {
		if fig.Find(`polyline[data-line="`+line+`"]`).Length() != 1 {
			t.Errorf("the drift chart has no %s line", line)
		}
	}
	agreement := doc.Find("#rollout-agreement")
	if agreement.AttrOr("data-status", "") != "drifting" || !strings.Contains(agreement.Text(), "2.3000") || !strings.Contains(agreement.Text(), "400 / 8000") {
		t.Errorf("output agreement = %q (%s), want drifting with 2.3000 and the sample counts", agreement.Text(), agreement.AttrOr("data-status", ""))
	}
	for _, sel := range []string{"#rollout-drift-link a", "#rollout-agreement a"} {
		if href := doc.Find(sel).AttrOr("href", ""); href != "/endpoints/drift-endpoint/drift" {
			t.Errorf("%s links to %q, want the endpoint's drift dashboard", sel, href)
		}
	}
}

// readyReplica marks a ready replica of version on the endpoint, as the
// fleet would once an agent reported it: a rollout moves no traffic before
// its candidate has one.
func readyReplica(t *testing.T, e *testEnv, endpointName, version string) {
	t.Helper()
	ctx := t.Context()
	if _, err := e.pool.Exec(ctx, `INSERT INTO nodes (name, lease_seconds, last_heartbeat) VALUES ('rollout-node', 15, now()) ON CONFLICT DO NOTHING`); err != nil {
		t.Fatal(err)
	}
	tag, err := e.pool.Exec(ctx, `INSERT INTO replicas (name, team_id, endpoint_id, version_id, node_id, gpu_type, profile, state, addr)
		SELECT e.name || '-' || v.name, e.team_id, e.id, v.id, (SELECT id FROM nodes WHERE name = 'rollout-node'), 'H100-80GB', 'full', 'ready', '127.0.0.1:1'
		FROM endpoints e JOIN model_versions v ON v.model_id = e.model_id WHERE e.name = $1 AND v.name = $2`, endpointName, version)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("ready replica of %s %s: %v (%d rows)", endpointName, version, err, tag.RowsAffected())
	}
}
