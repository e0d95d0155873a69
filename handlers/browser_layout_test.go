package handlers

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"modelplane/busapi"
	"modelplane/rollout"
)

// overflowJS lists the elements whose content is wider than their box at
// the window's width (1280 px, newBrowser's), each as "tag#id.class:
// scrollWidth > clientWidth", and the page itself when it scrolls
// sideways. Elements meant to scroll (overflow-x auto or scroll) and
// boxless ones (clientWidth 0) are not overflows.
const overflowJS = `(() => {
	const out = [];
	if (document.documentElement.scrollWidth > window.innerWidth) {
		out.push('page: ' + document.documentElement.scrollWidth + ' > ' + window.innerWidth);
	}
	for (const el of document.querySelectorAll('main *')) {
		const ox = getComputedStyle(el).overflowX;
		if (ox === 'auto' || ox === 'scroll' || el.clientWidth === 0 || el.closest('svg')) continue;
		if (el.scrollWidth > el.clientWidth + 1) {
			out.push(el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + (el.className && typeof el.className === 'string' ? '.' + el.className.trim().split(/\s+/).join('.') : '') +
				': ' + el.scrollWidth + ' > ' + el.clientWidth);
		}
	}
	return out;
})()`

// TestBrowserNothingOverflowsAt1280: each role's main pages, at 1280 px,
// have no element whose content is wider than its box, and no page scrolls
// sideways (measured in the page), and each page has its heading.
// Full-page screenshots of every page, each role's landing page first,
// are kept as test artefacts in artefactsDir.
func TestBrowserNothingOverflowsAt1280(t *testing.T) {
	t.Parallel()
	e, _ := newChargebackEnvAt(t, time.Date(2026, 11, 3, 12, 0, 0, 0, time.UTC))
	// A replica on a node, with what it runs: long command lines and a
	// long path are what ran off the endpoint page's card.
	e.seedFleet(t)
	rep := e.replicas(t, "risk-endpoint")
	if len(rep) != 1 {
		t.Fatalf("risk-endpoint has %d replicas, want 1", len(rep))
	}
	long := "/var/lib/mp/" + rep[0].Name + ".d/repository/" + strings.Repeat("very-long-directory-name-", 8) + "model"
	e.heartbeat(t, "gpu-mig-01", busapi.ReplicaStatus{ID: rep[0].Name, State: busapi.StateReady, Addr: "10.0.0.7:9001", Launch: &busapi.Launch{
		Argv: []string{"tritonserver", "--model-repository=" + long, "--http-address=127.0.0.1", "--http-port=40123", "--allow-grpc=false",
			"--allow-metrics=true", "--strict-readiness=true", "--backend-config=onnxruntime,default-max-batch-size=8,enable-mem-arena=true"},
		Env:   []string{"CUDA_VISIBLE_DEVICES=MIG-" + strings.Repeat("0123456789abcdef", 4), "MP_ONNXRUNTIME_LIB=" + long + "/libonnxruntime.so"},
		Dir:   long,
		Files: []busapi.LaunchFile{{Path: "risk-model/config.pbtxt", Content: "name: \"risk-model\"\nparameters: " + strings.Repeat("x", 300) + "\n"}},
	}})
	ro, err := e.srv.Rollouts.Start(t.Context(), system, "risk-endpoint", rollout.Spec{Version: "v2"})
	if err != nil {
		t.Fatal(err)
	}
	dir := artefactsDir(t)
	rid := strconv.FormatInt(ro.ID, 10)
	for _, c := range []struct {
		user  string
		pages []string
	}{
		// Each demo role's landing page ("/" sends it there) first, then
		// its main pages.
		{"risk-engineer@example.com", []string{"/", "/endpoints", "/endpoints/risk-endpoint", "/models", "/models/risk-model", "/models/risk-model/versions/v2",
			"/rollouts", "/rollouts/" + rid, "/endpoints/risk-endpoint/drift"}},
		{"risk-admin@example.com", []string{"/", "/endpoints/risk-endpoint", "/rollouts", "/chargeback?period=last"}},
		{"risk-viewer@example.com", []string{"/", "/endpoints/risk-endpoint", "/rollouts"}},
		{"finance@example.com", []string{"/", "/chargeback?period=last", "/chargeback?period=last&group_by=team&group_by=endpoint&group_by=version&group_by=gpu_type&group_by=allocation", "/cost-rates", "/team"}},
		{"admin@example.com", []string{"/", "/endpoints/risk-endpoint", "/rollouts", "/chargeback?period=last", "/fleet", "/fleet/gpu-mig-01", "/audit", "/quotas", "/team"}},
	} {
		b := newBrowser(t)
		b.do("sign in as "+c.user,
			chromedp.Navigate(e.URL+c.pages[0]),
			chromedp.Click(chromedp.CSS(`button[data-user="`+c.user+`"]`)),
			chromedp.WaitVisible(chromedp.ID("whoami")),
		)
		for _, p := range c.pages {
			b.do("open "+p, chromedp.Navigate(e.URL+p), chromedp.WaitVisible(chromedp.CSS("main h1")))
			if h := strings.TrimSpace(browserRun(b, "heading of "+p, chromedp.Evaluate[string](`document.querySelector('main h1').textContent`))); h == "" {
				t.Errorf("%s %s: empty main heading", c.user, p)
			}
			// What is folded (a replica's command line in "What runs") has
			// no box to measure until it is opened.
			browserRun(b, "open details of "+p, chromedp.Evaluate[int](`document.querySelectorAll('main details').forEach(d => d.open = true), 0`))
			if over := browserRun(b, "measure "+p, chromedp.Evaluate[[]string](overflowJS)); len(over) > 0 {
				t.Errorf("%s %s overflows at 1280 px:\n  %s", c.user, p, strings.Join(over, "\n  "))
			}
			// The platform admin's links, team switch and name are wider
			// than 1280 px: the name's part wraps, the links stay a row.
			if rows := browserRun(b, "rows of the links of "+p, chromedp.Evaluate[int](`new Set([...document.querySelectorAll('header nav a')].map(a => a.getBoundingClientRect().top)).size`)); rows != 1 {
				t.Errorf("%s %s: the header's links run over %d rows at 1280 px; want one", c.user, p, rows)
			}
			name := strings.NewReplacer("/", "-", "?", "-", "&", "-", "=", "-").Replace(strings.Trim(p, "/"))
			if name == "" {
				name = "landing"
			}
			path := filepath.Join(dir, "portal-"+strings.Split(c.user, "@")[0]+"-"+name[:min(len(name), 60)]+".png")
			shot(b, path)
			if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
				t.Errorf("%s %s: no screenshot at %s: %v", c.user, p, path, err)
			}
		}
	}
}

// artefactsDir is where browser tests keep screenshots for a person to
// look at: $MP_TEST_ARTEFACTS when set (CI keeps it), otherwise a
// temporary directory the test names in its log.
func artefactsDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("MP_TEST_ARTEFACTS")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("MP_TEST_ARTEFACTS: %v", err)
	}
	t.Logf("screenshots in %s", dir)
	return dir
}
