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
// sideways (measured in the page). Screenshots of every page go to the
// temporary directory as test artefacts.
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
	for _, c := range []struct {
		user  string
		pages []string
	}{
		{"risk-engineer@example.com", []string{"/endpoints", "/endpoints/risk-endpoint", "/models", "/models/risk-model", "/models/risk-model/versions/v2",
			"/rollouts", "/rollouts/" + strconv.FormatInt(ro.ID, 10), "/endpoints/risk-endpoint/drift"}},
		{"finance@example.com", []string{"/chargeback?period=last", "/chargeback?period=last&group_by=team&group_by=endpoint&group_by=version&group_by=gpu_type&group_by=allocation", "/cost-rates", "/team"}},
		{"admin@example.com", []string{"/fleet", "/audit", "/quotas", "/team"}},
	} {
		b := newBrowser(t)
		b.do("sign in as "+c.user,
			chromedp.Navigate(e.URL+c.pages[0]),
			chromedp.Click(chromedp.CSS(`button[data-user="`+c.user+`"]`)),
			chromedp.WaitVisible(chromedp.ID("whoami")),
		)
		for _, p := range c.pages {
			b.do("open "+p, chromedp.Navigate(e.URL+p), chromedp.WaitVisible(chromedp.CSS("main h1")))
			// What is folded (a replica's command line in "What runs") has
			// no box to measure until it is opened.
			browserRun(b, "open details of "+p, chromedp.Evaluate[int](`document.querySelectorAll('main details').forEach(d => d.open = true), 0`))
			if over := browserRun(b, "measure "+p, chromedp.Evaluate[[]string](overflowJS)); len(over) > 0 {
				t.Errorf("%s %s overflows at 1280 px:\n  %s", c.user, p, strings.Join(over, "\n  "))
			}
			name := strings.NewReplacer("/", "-", "?", "-", "&", "-", "=", "-").Replace(strings.TrimPrefix(p, "/"))
			shot(b, filepath.Join(os.TempDir(), "portal-"+strings.Split(c.user, "@")[0]+"-"+name[:min(len(name), 60)]+".png"))
		}
	}
}
