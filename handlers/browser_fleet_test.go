package handlers

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"modelplane/busapi"
	"modelplane/endpoint"
)

// TestBrowserFleet follows a platform admin in Chromium from an endpoint's
// live replicas to the node running one and to the fleet, with the page
// updating itself as the agents report, under the CSP.
func TestBrowserFleet(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	e.seedFleet(t)
	if _, err := e.srv.Endpoints.Create(context.Background(), system, endpoint.Spec{Name: "risk-h100", Model: "risk-model", Version: "v1",
		Runtime: "onnxruntime", Settings: endpoint.Settings{InstanceProfile: "gpu-h100-80gb", MinReplicas: 1, MaxReplicas: 1, Tier: "standard", RetentionDays: 30}}); err != nil {
		t.Fatal(err)
	}
	e.reconcile(t)
	rep := e.replicas(t, "risk-endpoint")[0]
	b := newBrowser(t)
	const user = "admin@example.com"

	b.do("sign in as "+user+" on the way to an endpoint",
		chromedp.Navigate(e.URL+"/endpoints/risk-endpoint"),
		chromedp.Click(chromedp.CSS(`button[data-user="`+user+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#replicas tr[data-replica="`+rep.Name+`"]`)),
	)
	row := `#replicas tr[data-replica="` + rep.Name + `"]`
	if got := b.text(row + " .pill"); got != rep.State {
		t.Errorf("replica state shown = %q, want %q", got, rep.State)
	}

	// The agent reports the replica ready; the section shows it without a reload.
	b.do("mark the page", chromedp.Evaluate[chromedp.Void](`window.mpMarker = "live"`))
	e.heartbeat(t, "gpu-mig-01", busapi.ReplicaStatus{ID: rep.Name, State: busapi.StateReady, Addr: "10.0.0.7:9001"})
	e.reconcile(t)
	b.do("wait for the replica to turn ready", chromedp.WaitVisible(chromedp.CSS(row+" .pill.ready")))
	if got := b.text(row); !strings.Contains(got, "10.0.0.7:9001") {
		t.Errorf("replica row = %q, want its address", got)
	}
	if got := b.text("#replicas-status"); got != "ready" {
		t.Errorf("endpoint status in the section = %q, want ready", got)
	}
	if marker := browserRun(b, "read marker", chromedp.Evaluate[string](`String(window.mpMarker)`)); marker != "live" {
		t.Errorf("the replicas section updated by reloading the page (marker %q)", marker)
	}

	b.do("open the node running it",
		chromedp.Click(chromedp.CSS(row+` a[href="/fleet/gpu-mig-01"]`)),
		chromedp.WaitVisible(chromedp.CSS(`.slice.used[title="`+rep.Name+`"]`)),
	)
	if got := b.text(`.slice.used[title="` + rep.Name + `"]`); !strings.Contains(got, "risk-endpoint") || !strings.Contains(got, "ready") {
		t.Errorf("slice of %s reads %q, want risk-endpoint, ready", rep.Name, got)
	}
	// Boxes are sized by profile: seven 1g slices share a GPU's width.
	widths := browserRun(b, "measure slices", chromedp.Evaluate[[]float64](
		`Array.from(document.querySelectorAll('.gpu[data-gpu="0"] .slice')).map(s => s.getBoundingClientRect().width)`))
	if len(widths) != 7 || widths[0] < 40 || widths[0]-widths[6] > 1 || widths[6]-widths[0] > 1 {
		t.Errorf("slice widths on GPU 0 = %v, want seven equal boxes", widths)
	}
	shot(b, "/tmp/portal-node.png")

	b.do("open the fleet",
		chromedp.Click(chromedp.CSS(`header nav a[href="/fleet"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#nodes tr[data-node="gpu-old-01"].lost`)),
		chromedp.Evaluate[chromedp.Void](`window.mpMarker = "fleet"`),
	)
	// A node registers: the table shows it within a refresh.
	if _, err := e.srv.Fleet.Observe(context.Background(), busapi.NodeStatus{Node: "gpu-new-01", BootID: "b1", LeaseSeconds: 15,
		GPUs: testGPUs(1, 0, 0)}); err != nil {
		t.Fatal(err)
	}
	b.do("wait for the new node", chromedp.WaitVisible(chromedp.CSS(`#nodes tr[data-node="gpu-new-01"]`)))
	if marker := browserRun(b, "read marker", chromedp.Evaluate[string](`String(window.mpMarker)`)); marker != "fleet" {
		t.Errorf("the fleet table updated by reloading the page (marker %q)", marker)
	}
	shot(b, "/tmp/portal-fleet.png")

	b.do("open an endpoint that cannot be placed",
		chromedp.Navigate(e.URL+"/endpoints/risk-h100"),
		chromedp.WaitVisible(chromedp.ID("placement-error")),
	)
	if got := b.text("#placement-error"); !strings.HasPrefix(got, "Cannot place: v1: ") {
		t.Errorf("placement error = %q", got)
	}
	shot(b, "/tmp/portal-unplaced.png")

	if p := b.problems(); len(p) > 0 {
		t.Errorf("the browser console reported problems:\n%s", strings.Join(p, "\n"))
	}
}

// shot saves a screenshot for a person to look at; failing to is no failure.
func shot(b *browser, path string) {
	png := browserRun(b, "screenshot", chromedp.FullScreenshot(100))
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Logf("screenshot not written: %v", err)
	}
}
