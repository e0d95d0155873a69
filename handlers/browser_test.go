package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"modelplane/auth"
)

// chromiumPath is where Debian installs Chromium; make test installs it.
const chromiumPath = "/usr/bin/chromium"

// browser is one headless Chromium with a fresh profile, driven over the
// DevTools protocol, that records what the page logs to its console.
type browser struct {
	t   *testing.T
	ctx context.Context

	mu      sync.Mutex
	console []chromedp.ConsoleMessage
}

// newBrowser starts Chromium. A missing Chromium fails the test: the
// browser tests are part of the suite, not optional.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("browser tests need Chromium at %s (make test installs it; on Debian: apt-get install chromium): %v", chromiumPath, err)
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000),
	)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(cancel)
	// The first Do starts the browser and binds it to ctx, which has no
	// deadline; each step gets its own below.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start Chromium at %s: %v", chromiumPath, err)
	}
	b := &browser{t: t, ctx: ctx}
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.console = append(b.console, m)
			b.mu.Unlock()
		}
	}()
	return b
}

// do runs steps with a deadline, failing the test with what step was meant.
// htmxSettled waits until the page has loaded and htmx has processed what
// it swapped in last: htmx marks new content htmx-added until its settle
// step (20 ms after the swap) has bound the content's hx- attributes, so a
// form clicked before then submits as a plain form and reloads the page.
func htmxSettled(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
	var none chromedp.Void
	loc, err := chromedp.Location()(ctx, t)
	if err != nil || loc == "about:blank" { // a new tab runs no script yet
		return none, err
	}
	return chromedp.Poll[chromedp.Void](`document.readyState === "complete" && !document.querySelector(".htmx-added, .htmx-settling, .htmx-swapping")`,
		chromedp.WithPollingInterval(10*time.Millisecond))(ctx, t)
}

// do runs steps once the page has settled (htmxSettled).
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, append([]chromedp.Action[chromedp.Void]{htmxSettled}, steps...)...); err != nil {
		b.t.Fatalf("%s: %v\nlocation: %s\nconsole:\n%s", what, err, b.location(), b.consoleText())
	}
}

// run is do for one action with a value.
func browserRun[T any](b *browser, what string, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		b.t.Fatalf("%s: %v\nlocation: %s\nconsole:\n%s", what, err, b.location(), b.consoleText())
	}
	return v
}

func (b *browser) location() string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	loc, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return loc
}

// text is the visible text of the first element sel matches, read in one
// evaluation in the page once one is shown. chromedp.Text finds the node
// first and reads it in a second call: when an htmx swap replaced the
// element in between (a live section fetches itself again on each of its
// events), it read the detached node, which it takes for hidden, as "".
func (b *browser) text(sel string) string {
	b.t.Helper()
	q, err := json.Marshal(sel)
	if err != nil {
		b.t.Fatal(err)
	}
	type shown struct {
		Text string `json:"text"`
	}
	expr := fmt.Sprintf(`(() => { const el = document.querySelector(%s); return el && el.getClientRects().length ? {text: el.innerText} : null })()`, q)
	return strings.TrimSpace(browserRun(b, "read "+sel, chromedp.Poll[shown](expr, chromedp.WithPollingInterval(10*time.Millisecond))).Text)
}

func (b *browser) consoleText() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var sb strings.Builder
	for _, m := range b.console {
		fmt.Fprintf(&sb, "  %s %s:%d %s\n", m.Type, m.URL, m.Line+1, m.Text)
	}
	return sb.String()
}

// problems returns console messages that mean the page is broken: uncaught
// exceptions, errors (CSP violations among them) and warnings from htmx.
func (b *browser) problems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, m := range b.console {
		if m.IsException() || m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleWarning ||
			strings.Contains(m.Text, "Content Security Policy") {
			out = append(out, fmt.Sprintf("%s %s:%d %s", m.Type, m.URL, m.Line+1, m.Text))
		}
	}
	return out
}

// cookie returns the browser's cookie of that name for the portal's URL.
func (b *browser) cookie(base, name string) *network.Cookie {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	res, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{base + "/"}})
	if err != nil {
		b.t.Fatalf("read cookies: %v", err)
	}
	for _, c := range res.Cookies {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// TestBrowserPortal walks what a person does in the portal, in Chromium:
// sign in through the development IdP (OIDC code flow with PKCE), create a
// model, register two versions by upload, create an endpoint, see it
// listed, split its traffic, and sign out.
func TestBrowserPortal(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	b := newBrowser(t)
	const user = "risk-engineer@example.com"

	// Not signed in: the portal sends the browser to the sign-in page,
	// which lists the demo users.
	b.do("open the portal",
		chromedp.Navigate(e.URL),
		chromedp.WaitVisible(chromedp.CSS(`button[data-user="`+user+`"]`)),
	)
	if loc := b.location(); !strings.HasPrefix(loc, e.URL+"/login") {
		t.Fatalf("not signed in, the portal went to %s, want %s/login", loc, e.URL)
	}

	// Picking a demo user runs the real code flow: /login → IdP authorize
	// (PKCE S256, login_hint) → /auth/callback → the page asked for.
	b.do("sign in as "+user,
		chromedp.Click(chromedp.CSS(`button[data-user="`+user+`"]`)),
		chromedp.WaitVisible(chromedp.ID("whoami")),
	)
	if got := b.text("#whoami"); got != user {
		t.Errorf("#whoami = %q, want %q", got, user)
	}
	if loc := b.location(); loc != e.URL+"/endpoints" {
		t.Errorf("after sign-in the browser is at %s, want %s/endpoints", loc, e.URL)
	}
	// The __Host- session cookie is Secure; Chromium takes it from
	// http://127.0.0.1 because loopback is a secure context.
	sc := b.cookie(e.URL, auth.SessionCookie)
	if sc == nil {
		t.Fatalf("Chromium holds no %s cookie after sign-in: a Secure __Host- cookie from %s was refused", auth.SessionCookie, e.URL)
	}
	if !sc.Secure || !sc.HTTPOnly || sc.SameSite != network.CookieSameSiteLax || sc.Path != "/" || sc.Domain != "127.0.0.1" {
		t.Errorf("session cookie = secure %v, httponly %v, samesite %q, path %q, domain %q; want Secure, HttpOnly, Lax, /, host-only 127.0.0.1",
			sc.Secure, sc.HTTPOnly, sc.SameSite, sc.Path, sc.Domain)
	}
	if lc := b.cookie(e.URL, auth.LoginCookie); lc != nil {
		t.Errorf("the sign-in cookie %s outlived the callback", auth.LoginCookie)
	}
	oldSession := sc.Value

	// htmx runs under the CSP: following a nav link is a boosted request
	// that swaps the body and keeps the window (and this marker) alive.
	b.do("go to Models",
		chromedp.Evaluate[chromedp.Void](`window.mpMarker = "boosted"`),
		chromedp.Click(chromedp.CSS(`header nav a[href="/models"]`)),
		chromedp.WaitVisible(chromedp.ID("new-model")),
	)
	if marker := browserRun(b, "read marker", chromedp.Evaluate[string](`String(window.mpMarker)`)); marker != "boosted" {
		t.Errorf("following a nav link reloaded the page (marker %q): htmx did not boost it", marker)
	}

	// Create a model.
	b.do("create a model",
		chromedp.Click(chromedp.ID("new-model")),
		chromedp.WaitVisible(chromedp.ID("model-form")),
		chromedp.SendKeys(chromedp.ID("name"), "fraud-model"),
		chromedp.SendKeys(chromedp.ID("description"), "Scores card payments for fraud"),
		chromedp.SendKeys(chromedp.ID("feature_names"), "amount, country"),
		chromedp.Click(chromedp.ID("create-model")),
		chromedp.WaitVisible(chromedp.ID("new-version")),
	)
	if got := b.text("main h1"); !strings.HasPrefix(got, "fraud-model") {
		t.Errorf("model page heading = %q, want fraud-model", got)
	}
	if got := b.text(".flash"); got != "Model fraud-model created." {
		t.Errorf("flash = %q, want the model created", got)
	}

	// Register two versions by upload through the browser form: a real
	// safetensors file from disk, metadata typed into the textarea.
	dir := t.TempDir()
	for i, v := range []string{"v1", "v2"} {
		file := filepath.Join(dir, v, "model.safetensors")
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, safetensorsFile("browser-"+v), 0o644); err != nil {
			t.Fatal(err)
		}
		parent := ""
		if i > 0 {
			parent = "v1"
		}
		meta := fmt.Sprintf(`{"name": %q, "runtime": "onnxruntime", "resources": {"gpu_count": 1, "gpu_memory_mb": 2048},
 "sla": {"p99_latency_ms": 40}, "lineage": {"parent_version": %q, "training_job": "job-%d", "dataset": "payments-2026"}}`, v, parent, i+1)
		b.do("open the register-version form for "+v,
			chromedp.Click(chromedp.ID("new-version")),
			chromedp.WaitVisible(chromedp.ID("version-form")),
		)
		// The form goes through htmx, which reports the upload's progress
		// (upload.js draws it); the page records the last report where
		// the next page can read it.
		browserRun(b, "follow the upload's progress", chromedp.Evaluate[bool](`sessionStorage.removeItem("progress");
			document.addEventListener("htmx:xhr:progress", function (e) {
				sessionStorage.setItem("progress", e.detail.loaded + "/" + e.detail.total + " " + document.getElementById("upload-status").textContent);
			}); true`))
		b.do("register version "+v,
			chromedp.SetValue(chromedp.ID("metadata"), meta),
			chromedp.SetUploadFiles(chromedp.ID("files"), []string{file}),
			chromedp.Click(chromedp.ID("register-version")),
			chromedp.WaitVisible(chromedp.CSS(`main h1 a[href="/models/fraud-model"]`)),
		)
		progress := browserRun(b, "read the upload's progress", chromedp.Evaluate[string](`sessionStorage.getItem("progress") || ""`))
		if !strings.Contains(progress, " of ") {
			t.Errorf("upload progress seen %q; want htmx's progress events drawn as bytes of a total", progress)
		}
		if got := b.text("main h1"); got != "fraud-model / "+v {
			t.Errorf("version page heading = %q, want %q", got, "fraud-model / "+v)
		}
		if got := b.text(".flash"); got != "Version "+v+" registered." {
			t.Errorf("flash = %q, want version %s registered", got, v)
		}
		if got := b.text("main .card p"); !strings.Contains(got, "safetensors") || !strings.Contains(got, "onnxruntime") {
			t.Errorf("version summary = %q, want format safetensors and runtime onnxruntime", got)
		}
		b.do("back to the model",
			chromedp.Click(chromedp.CSS(`main h1 a[href="/models/fraud-model"]`)),
			chromedp.WaitVisible(chromedp.CSS(`#versions tr[data-version="`+v+`"]`)),
		)
	}
	if n := len(browserRun(b, "read lineage", chromedp.Nodes(chromedp.CSSAll(`svg.lineage line`)))); n != 1 {
		t.Errorf("lineage graph has %d links, want 1 (v1 → v2)", n)
	}

	// Create an endpoint serving v1.
	b.do("create an endpoint",
		chromedp.Click(chromedp.CSS(`header nav a[href="/endpoints"]`)),
		chromedp.WaitVisible(chromedp.ID("new-endpoint")),
		chromedp.Click(chromedp.ID("new-endpoint")),
		chromedp.WaitVisible(chromedp.ID("endpoint-form")),
		chromedp.SendKeys(chromedp.ID("name"), "fraud-scoring"),
		chromedp.SetValue(chromedp.ID("model"), "fraud-model"),
		chromedp.SendKeys(chromedp.ID("version"), "v1"),
		chromedp.SetValue(chromedp.ID("instance_profile"), "mig-2g.20gb"),
		chromedp.Click(chromedp.ID("create-endpoint")),
		chromedp.WaitVisible(chromedp.ID("set-traffic")),
	)
	if got := b.text("main h1"); !strings.HasPrefix(got, "fraud-scoring") {
		t.Errorf("endpoint page heading = %q, want fraud-scoring", got)
	}

	// See it listed.
	b.do("list endpoints",
		chromedp.Click(chromedp.CSS(`header nav a[href="/endpoints"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#endpoints tr[data-endpoint="fraud-scoring"]`)),
	)
	row := b.text(`#endpoints tr[data-endpoint="fraud-scoring"]`)
	for _, want := range []string{"fraud-model", "v1 100%", "mig-2g.20gb", "pending"} {
		if !strings.Contains(row, want) {
			t.Errorf("endpoints row = %q, want it to show %q", row, want)
		}
	}

	// Open it and split the traffic 50/50; htmx swaps the traffic section.
	b.do("open the endpoint",
		chromedp.Click(chromedp.CSS(`#endpoints tr[data-endpoint="fraud-scoring"] a`)),
		chromedp.WaitVisible(chromedp.ID("set-traffic")),
	)
	if got := browserRun(b, "read v1 weight", chromedp.Value(chromedp.CSS(`input[name="w_v1"]`))); got != "100" {
		t.Errorf("v1 weight before = %q, want 100", got)
	}
	b.do("set traffic 50/50",
		chromedp.Evaluate[chromedp.Void](`window.mpMarker = "swapped"; document.getElementById("traffic").dataset.stale = "1"`),
		chromedp.SetValue(chromedp.CSS(`input[name="w_v1"]`), "50"),
		chromedp.SetValue(chromedp.CSS(`input[name="w_v2"]`), "50"),
		chromedp.Click(chromedp.ID("set-traffic")),
		chromedp.WaitVisible(chromedp.CSS(`#traffic:not([data-stale])`)),
	)
	if msgs := browserRun(b, "read traffic errors", chromedp.Nodes(chromedp.CSSAll(`#traffic .err`), chromedp.AtLeast(0))); len(msgs) > 0 {
		t.Errorf("setting traffic 50/50 showed an error: %s", b.text("#traffic .err"))
	}
	if marker := browserRun(b, "read marker", chromedp.Evaluate[string](`String(window.mpMarker)`)); marker != "swapped" {
		t.Errorf("setting traffic reloaded the page (marker %q): htmx did not swap the traffic section", marker)
	}
	for _, v := range []string{"v1", "v2"} {
		if got := browserRun(b, "read "+v+" weight", chromedp.Value(chromedp.CSS(`input[name="w_`+v+`"]`))); got != "50" {
			t.Errorf("%s weight after the swap = %q, want 50", v, got)
		}
	}
	ep, err := e.srv.Endpoints.Get(context.Background(), system, "fraud-scoring")
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(ep.Traffic); got != "[{v1 50 0} {v2 50 0}]" {
		t.Errorf("stored traffic = %s, want v1 50, v2 50", got)
	}

	// A fresh load of the page shows the new split too; the lead looks at it.
	b.do("reload the endpoint page",
		chromedp.Navigate(e.URL+"/endpoints/fraud-scoring"),
		chromedp.WaitVisible(chromedp.ID("set-traffic")),
	)
	if got := browserRun(b, "read v2 weight", chromedp.Value(chromedp.CSS(`input[name="w_v2"]`))); got != "50" {
		t.Errorf("v2 weight after reload = %q, want 50", got)
	}
	png := browserRun(b, "screenshot", chromedp.FullScreenshot(100))
	if err := os.WriteFile("/tmp/portal-endpoint.png", png, 0o644); err != nil {
		t.Logf("screenshot not written: %v", err)
	}

	// Sign out: back at the sign-in page, and the old session is dead.
	b.do("sign out",
		chromedp.Click(chromedp.ID("signout")),
		chromedp.WaitVisible(chromedp.CSS(`button[data-user]`)),
	)
	if loc := b.location(); loc != e.URL+"/login" {
		t.Errorf("after sign-out the browser is at %s, want %s/login", loc, e.URL)
	}
	if c := b.cookie(e.URL, auth.SessionCookie); c != nil {
		t.Errorf("Chromium still holds %s after sign-out", auth.SessionCookie)
	}
	req, _ := http.NewRequest(http.MethodGet, e.URL+"/endpoints", nil)
	req.AddCookie(&http.Cookie{Name: auth.SessionCookie, Value: oldSession})
	resp, err := portalNoRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/login") {
		t.Errorf("GET /endpoints with the signed-out session = %d to %q, want 303 to /login", resp.StatusCode, resp.Header.Get("Location"))
	}

	if p := b.problems(); len(p) > 0 {
		t.Errorf("the browser console reported problems:\n%s", strings.Join(p, "\n"))
	}
}
