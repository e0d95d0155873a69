package handlers

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
)

// TestPortalFrameLoadedOncePerRequest holds a portal request to one page
// frame, loaded by the session middleware, and to at most one team list,
// loaded only when the page renders the frame: a version upload that
// succeeds redirects and loads none.
func TestPortalFrameLoadedOncePerRequest(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	admin := portalSignIn(t, e, "admin@example.com")
	engineer := portalSignIn(t, e, "risk-engineer@example.com")
	meta := func(name string) string {
		return `{"name": "` + name + `", "runtime": "onnxruntime", "resources": {"gpu_count": 1, "gpu_memory_mb": 1024}}`
	}
	upload := func(u *portalUser, metadata string) func() portalResponse {
		return func() portalResponse {
			ct, body := portalMultipart(t, portalPart{name: "csrf", content: []byte(u.csrf)}, portalPart{name: "metadata", content: []byte(metadata)},
				portalPart{name: "files", filename: "model.safetensors", content: safetensorsFile(fmt.Sprint(len(metadata)))})
			return portalRequest(t, e, u.token, http.MethodPost, "/models/risk-model/versions", ct, body, nil)
		}
	}
	for _, tc := range []struct {
		name       string
		do         func() portalResponse
		wantStatus int
		wantTeams  int64 // team lists loaded: a platform admin's is a query
	}{
		{"an admin's upload that succeeds renders no frame", upload(admin, meta("v7")), http.StatusSeeOther, 0},
		{"an admin's upload that fails renders the form in the frame", upload(admin, `{"name": "v8",`), http.StatusUnprocessableEntity, 1},
		{"an engineer's upload that succeeds", upload(engineer, meta("v9")), http.StatusSeeOther, 0},
		{"an engineer's upload that fails", upload(engineer, `{"name": "v10",`), http.StatusUnprocessableEntity, 0},
		{"an admin's endpoint page", func() portalResponse { return admin.get("/endpoints/risk-endpoint") }, http.StatusOK, 1},
		{"an admin's not-found page", func() portalResponse { return admin.get("/endpoints/nope") }, http.StatusNotFound, 1},
		{"an admin's fragment without the frame", func() portalResponse { return admin.get("/endpoints/risk-endpoint/replicas") }, http.StatusOK, 0},
		{"a form post that redirects", func() portalResponse {
			return engineer.post("/team/switch", engineer.form("team", "risk"))
		}, http.StatusSeeOther, 0},
	} {
		frames, teams := e.srv.frameLoads.Load(), e.srv.teamListLoads.Load()
		r := tc.do()
		if r.StatusCode != tc.wantStatus {
			t.Fatalf("%s: status = %d, want %d\n%.300s", tc.name, r.StatusCode, tc.wantStatus, r.Body)
		}
		if got := e.srv.frameLoads.Load() - frames; got != 1 {
			t.Errorf("%s: page frames loaded = %d, want 1", tc.name, got)
		}
		if got := e.srv.teamListLoads.Load() - teams; got != tc.wantTeams {
			t.Errorf("%s: team lists loaded = %d, want %d", tc.name, got, tc.wantTeams)
		}
	}
}

// TestPortalParamsScopedToTeam checks the parameter middleware: an
// {endpoint}, {model} or {rollout} of another team is the same 404 as one
// that does not exist, on pages, fragments and forms alike, and a forged
// form is refused for its CSRF token before anything is looked up.
func TestPortalParamsScopedToTeam(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	rollout := e.riskRollout(t)
	search := portalSignIn(t, e, "search-admin@example.com")
	risk := portalSignIn(t, e, "risk-admin@example.com")
	paths := []string{
		"/endpoints/risk-endpoint", "/endpoints/risk-endpoint/replicas", "/endpoints/risk-endpoint/stats", "/endpoints/risk-endpoint/drift",
		"/models/risk-model", "/models/risk-model/versions/new", "/models/risk-model/versions/v1",
		fmt.Sprintf("/rollouts/%d", rollout), fmt.Sprintf("/rollouts/%d/live", rollout),
	}
	for _, path := range paths {
		if r := risk.get(path); r.StatusCode != http.StatusOK {
			t.Errorf("GET %s as its team = %d, want 200", path, r.StatusCode)
		}
		if r := search.get(path); r.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s as another team = %d, want 404", path, r.StatusCode)
		}
	}
	for _, path := range []string{"/endpoints/nope", "/models/nope", "/rollouts/999999", "/rollouts/x", "/rollouts/0"} {
		if r := risk.get(path); r.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s = %d, want 404", path, r.StatusCode)
		}
	}
	posts := []string{"/endpoints/risk-endpoint/delete", "/endpoints/risk-endpoint/settings", "/endpoints/risk-endpoint/traffic",
		"/endpoints/risk-endpoint/rollouts", "/endpoints/risk-endpoint/try", "/endpoints/risk-endpoint/autoscaling",
		fmt.Sprintf("/rollouts/%d/pause", rollout)}
	for _, path := range posts {
		if r := search.post(path, search.form("confirm", "risk-endpoint")); r.StatusCode != http.StatusNotFound {
			t.Errorf("POST %s as another team = %d, want 404", path, r.StatusCode)
		}
		if r := search.post(path, url.Values{"csrf": {"forged"}}); r.StatusCode != http.StatusForbidden {
			t.Errorf("forged POST %s = %d, want 403", path, r.StatusCode)
		}
	}
}

// TestPortalParamRoutesAreExtracted walks the route tree: every portal
// route with an {endpoint}, {model} or {rollout} answers 404 for one that
// does not exist, which it can only do through the extract middleware (a
// handler reading a parameter its route did not extract panics, a 500).
// A new route joins the middleware or fails here.
func TestPortalParamRoutesAreExtracted(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	u := portalSignIn(t, e, "risk-admin@example.com")
	fill := strings.NewReplacer("{endpoint}", "nope", "{model}", "nope", "{rollout}", "999999", "{version}", "v1", "{action}", "pause")
	walked := 0
	err := chi.Walk(e.srv.Handler().(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if strings.HasPrefix(route, "/api/") || !strings.ContainsAny(route, "{") ||
			!(strings.Contains(route, "{endpoint}") || strings.Contains(route, "{model}") || strings.Contains(route, "{rollout}")) {
			return nil
		}
		walked++
		path := fill.Replace(route)
		var r portalResponse
		switch method {
		case http.MethodGet:
			r = u.get(path)
		case http.MethodPost:
			r = u.post(path, u.form())
		default:
			t.Errorf("%s %s: no request for this method", method, route)
			return nil
		}
		if r.StatusCode != http.StatusNotFound {
			t.Errorf("%s %s = %d, want 404", method, path, r.StatusCode)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if walked < 18 {
		t.Errorf("walked %d routes with a parameter, want the portal's 18 or more", walked)
	}
}
