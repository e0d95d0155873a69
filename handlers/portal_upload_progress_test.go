package handlers

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/auth"
)

// TestPortalUploadShowsProgressAndSurvivesASlowBody checks the version
// form is sent by htmx with a progress bar that upload.js (served, and
// loaded by every page) redraws from htmx:xhr:progress events, and that an
// upload whose body stalls for longer than the server's read timeout still
// registers the version. No clock is waited on: the body stalls until a
// form post begun after it, with the same read timeout, has been cut, so
// the upload's own connection has outlived the timeout too. htmx gets
// HX-Redirect to the version's page.
func TestPortalUploadShowsProgressAndSurvivesASlowBody(t *testing.T) {
	t.Parallel()
	// The read timeout is short enough for the stall below to outlast it
	// quickly, and long enough that the sign-in and page loads around it,
	// whose bodies arrive at once, are not cut on a loaded machine (50 ms
	// was: a request waited that long for a core between accept and read).
	e := newTestEnvWith(t, envOptions{Deps: func(d *Deps, _ *pgxpool.Pool) { d.ReadTimeout = time.Second }})
	u := portalSignIn(t, e, "risk-engineer@example.com")

	form := u.page("/models/risk-model/versions/new").Find("form#version-form")
	for attr, want := range map[string]string{"hx-post": "/models/risk-model/versions", "hx-encoding": "multipart/form-data", "hx-target": "#version-form"} {
		if got, _ := form.Attr(attr); got != want {
			t.Errorf("version form %s = %q; want %q", attr, got, want)
		}
	}
	if form.Find("progress#upload-progress").Length() != 1 || form.Find("#upload-status").Length() != 1 {
		t.Error("the version form has no progress bar and status line")
	}
	js := u.get("/static/upload.js")
	if js.StatusCode != http.StatusOK || !strings.Contains(string(js.Body), "htmx:xhr:progress") {
		t.Errorf("/static/upload.js = %d; want the script that follows htmx:xhr:progress", js.StatusCode)
	}
	if !strings.Contains(string(u.get("/models").Body), `src="/static/upload.js"`) {
		t.Error("pages do not load upload.js")
	}

	meta := `{"name": "v9", "runtime": "onnxruntime", "resources": {"gpu_count": 1, "gpu_memory_mb": 1024}}`
	ct, body := portalMultipart(t, portalPart{name: "metadata", content: []byte(meta)},
		portalPart{name: "files", filename: "model.safetensors", content: safetensorsFile("slow")})
	half := len(body) / 2
	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.URL+"/models/risk-model/versions", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(body))
	req.Header.Set("Content-Type", ct)
	req.Header.Set("X-CSRF-Token", u.csrf)
	req.Header.Set("HX-Request", "true")
	req.AddCookie(&http.Cookie{Name: auth.SessionCookie, Value: u.token})
	type answer struct {
		resp *http.Response
		err  error
	}
	answers := make(chan answer, 1)
	go func() {
		resp, err := portalNoRedirect.Do(req)
		answers <- answer{resp, err}
	}()
	if _, err := pw.Write(body[:half]); err != nil { // returns once the server has read it
		t.Fatal(err)
	}

	// A form post begun now whose body never comes is cut by the read
	// timeout; once it is, the upload has stalled longer than that.
	cpr, cpw := io.Pipe()
	defer cpw.Close()
	creq, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, e.URL+"/teams", cpr)
	creq.ContentLength = 100
	creq.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	creq.Header.Set("X-CSRF-Token", u.csrf)
	creq.AddCookie(&http.Cookie{Name: auth.SessionCookie, Value: u.token})
	if cresp, err := http.DefaultClient.Do(creq); err == nil {
		cresp.Body.Close()
		if cresp.StatusCode < 400 {
			t.Fatalf("the stalled form post = %d; want it cut", cresp.StatusCode)
		}
	}

	if _, err := pw.Write(body[half:]); err != nil {
		t.Fatalf("the rest of the slow upload was refused: %v", err)
	}
	pw.Close()
	a := <-answers
	if a.err != nil {
		t.Fatalf("slow upload: %v", a.err)
	}
	b, _ := io.ReadAll(a.resp.Body)
	a.resp.Body.Close()
	if a.resp.StatusCode != http.StatusOK || a.resp.Header.Get("HX-Redirect") != "/models/risk-model/versions/v9" {
		t.Fatalf("slow upload = %d HX-Redirect %q\n%s", a.resp.StatusCode, a.resp.Header.Get("HX-Redirect"), b)
	}
	if got := portalText(u.page("/models/risk-model/versions/v9").Find("main h1")); got != "risk-model / v9" {
		t.Errorf("version page heading = %q", got)
	}
}
