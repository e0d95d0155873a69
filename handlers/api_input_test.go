package handlers

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/auth"
	"modelplane/tenant"
)

// TestAPIInput sends bad input and bad credentials: each must be refused
// with the right status, as application/problem+json, naming the field, and
// change nothing. Pagination walks every list to its end.
func TestAPIInput(t *testing.T) {
	t.Parallel()
	// Keys are checked on a clock the test moves, so that one can expire
	// while in use without the test waiting for it.
	clk := quartz.NewMock(t)
	clk.Set(time.Now())
	e := newTestEnvWith(t, envOptions{Deps: func(d *Deps, pool *pgxpool.Pool) { d.Keys = auth.NewKeys(pool, clk) }})
	admin := e.Keys["risk-admin"]
	before := e.snapshot(t)
	big := strings.Repeat("x", 1<<20) // MaxBodyBytes is 1 MiB
	validModel := func(name string) map[string]any {
		return map[string]any{"team": "risk", "name": name, "task": "classification"}
	}
	validEndpoint := func(name string) map[string]any {
		return map[string]any{"name": name, "model": "risk-model", "version": "v1", "runtime": "onnxruntime",
			"instance_profile": "mig-1g.10gb", "min_replicas": 1, "max_replicas": 2, "tier": "standard"}
	}
	raw := func(s string) *payload { return &payload{contentType: "application/json", body: []byte(s)} }

	t.Run("bad input", func(t *testing.T) {
		type tc struct {
			name         string
			method, path string
			body         *payload
			want         int
			location     string // an error must name this location ("" for none)
		}
		cases := []tc{
			{"malformed json", "POST", "/models", raw(`{"name": "x",`), 400, ""},
			{"malformed json put", "PUT", "/endpoints/risk-endpoint", raw(`not json`), 400, ""},
			{"malformed json upload route", "POST", "/models/risk-model/versions", raw(`{"metadata":`), 400, ""},
			{"wrong type string", "POST", "/models", jsonPayload(map[string]any{"team": "risk", "name": 5, "task": "classification"}), 400, "body.name"},
			{"wrong type integer", "PUT", "/endpoints/risk-endpoint", jsonPayload(map[string]any{"instance_profile": "mig-1g.10gb",
				"min_replicas": "two", "max_replicas": 2, "tier": "standard"}), 400, "body.min_replicas"},
			{"wrong type nested", "PUT", "/endpoints/risk-endpoint/traffic", jsonPayload(map[string]any{"weights": []any{
				map[string]any{"version": "v1", "weight": "100"}}}), 400, "body.weights[0].weight"},
			{"unknown field", "POST", "/models", jsonPayload(map[string]any{"team": "risk", "name": "unknown-field", "task": "llm", "colour": "red"}), 400, "body.colour"},
			{"unknown field upload route", "POST", "/models/risk-model/versions", raw(`{"metadata": {"name": "v7"}, "manifest": {}, "colour": "red"}`), 400, ""},
			{"enum", "POST", "/models", jsonPayload(map[string]any{"team": "risk", "name": "enum-model", "task": "clustering"}), 400, "body.task"},
			{"missing required", "POST", "/endpoints", jsonPayload(map[string]any{"name": "no-model"}), 400, ""},
			{"traffic not summing to 100", "PUT", "/endpoints/risk-endpoint/traffic", jsonPayload(map[string]any{"weights": []any{
				map[string]any{"version": "v1", "weight": 50}, map[string]any{"version": "v2", "weight": 40}}}), 400, "body.weights"},
			{"traffic over 100", "PUT", "/endpoints/risk-endpoint/traffic", jsonPayload(map[string]any{"weights": []any{
				map[string]any{"version": "v1", "weight": 60}, map[string]any{"version": "v2", "weight": 60}}}), 400, "body.weights"},
			{"traffic empty", "PUT", "/endpoints/risk-endpoint/traffic", jsonPayload(map[string]any{"weights": []any{}}), 400, "body.weights"},
			{"traffic unknown version", "PUT", "/endpoints/risk-endpoint/traffic", jsonPayload(map[string]any{"weights": []any{
				map[string]any{"version": "v1", "weight": 50}, map[string]any{"version": "v7", "weight": 50}}}), 400, "body.weights[1].version"},
			{"shadow on a served version", "PUT", "/endpoints/risk-endpoint/traffic", jsonPayload(map[string]any{"weights": []any{
				map[string]any{"version": "v1", "weight": 100, "shadow_percent": 10}}}), 400, "body.weights[0].shadow_percent"},
			{"shadow over 100", "PUT", "/endpoints/risk-endpoint/traffic", jsonPayload(map[string]any{"weights": []any{
				map[string]any{"version": "v1", "weight": 100}, map[string]any{"version": "v2", "weight": 0, "shadow_percent": 101}}}), 400, "body.weights[1].shadow_percent"},
			{"experiment shares not summing to 100", "PUT", "/endpoints/risk-endpoint/experiment", jsonPayload(map[string]any{"name": "ab", "arms": []any{
				map[string]any{"version": "v1", "share": 50}, map[string]any{"version": "v2", "share": 40}}}), 400, "body.arms"},
			{"negative endpoint timeout", "PUT", "/endpoints/risk-endpoint", jsonPayload(map[string]any{"instance_profile": "mig-1g.10gb",
				"min_replicas": 1, "max_replicas": 2, "tier": "standard", "timeout_ms": -5}), 400, "body.timeout_ms"},
			{"body over the limit", "POST", "/models", jsonPayload(map[string]any{"team": "risk", "name": "big-model", "task": "llm", "description": big}), 413, ""},
			{"body over the limit put", "PUT", "/endpoints/risk-endpoint/traffic", raw(`{"weights": [], "pad": "` + big + `"}`), 413, ""},
			{"body over the limit upload route json", "POST", "/models/risk-model/versions", raw(`{"metadata": {"name": "v7", "description": "` + big + `"}}`), 413, ""},
			{"bad cursor", "GET", "/models?cursor=!!!", nil, 400, "query.cursor"},
			{"limit zero", "GET", "/models?limit=0", nil, 400, "query.limit"},
			{"limit too big", "GET", "/models?limit=501", nil, 400, "query.limit"},
			{"limit not a number", "GET", "/models?limit=ten", nil, 400, "query.limit"},
		}
		// Endpoint and model names are DNS labels.
		for _, name := range []string{"Upper", "under_score", strings.Repeat("a", 64), "1leading-digit", "trailing-", "", "dot.ted", "spa ce"} {
			cases = append(cases,
				tc{"model name " + strconv.Quote(name), "POST", "/models", jsonPayload(validModel(name)), 400, "body.name"},
				tc{"endpoint name " + strconv.Quote(name), "POST", "/endpoints", jsonPayload(validEndpoint(name)), 400, "body.name"})
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				got := e.call(t, admin, c.method, c.path, c.body)
				doc := problem(t, c.method+" "+c.path, got, c.want)
				if c.location != "" && !doc.names(c.location) {
					t.Errorf("%s %s errors at %v; want %s", c.method, c.path, doc.locations(), c.location)
				}
			})
		}
	})

	// Nothing that was refused left a trace.
	e.unchanged(t, before)

	t.Run("good names", func(t *testing.T) {
		// The boundary of the name rule is accepted: 63 characters, digits
		// and inner hyphens.
		for _, name := range []string{strings.Repeat("a", 63), "a", "m-0-9"} {
			if got := e.call(t, admin, "POST", "/models", jsonPayload(validModel(name))); got.status != http.StatusCreated {
				t.Errorf("POST /models name %q = %d %s; want 201", name, got.status, got)
			}
		}
	})

	t.Run("credentials", func(t *testing.T) {
		ctx := context.Background()
		fresh := func(name string, exp *time.Time, svc *tenant.Service) (string, int64) {
			raw, k, err := svc.CreateKey(ctx, system, tenant.KeyRequest{Name: name, Team: "risk", Role: auth.RoleAdmin, ExpiresAt: exp})
			if err != nil {
				t.Fatal(err)
			}
			return raw, k.ID
		}
		queryKey, queryKeyID := fresh("in-query", nil, e.srv.Tenant)
		revoked, revokedID := fresh("revoked", nil, e.srv.Tenant)
		if got := e.call(t, admin, "DELETE", fmt.Sprintf("/api-keys/%d", revokedID), nil); got.status != http.StatusOK {
			t.Fatalf("revoke = %d %s; want 200", got.status, got)
		}
		// A tenant service whose clock is an hour behind issues a key that
		// expired half an hour ago by the server's clock.
		pastClk := quartz.NewMock(t)
		pastClk.Set(time.Now().Add(-time.Hour))
		past := tenant.New(e.pool, pastClk)
		expiredAt := time.Now().Add(-30 * time.Minute)
		expired, _ := fresh("expired", &expiredAt, past)
		soonAt := clk.Now().Add(time.Hour)
		soon, _ := fresh("expires-soon", &soonAt, e.srv.Tenant)
		if got := e.call(t, soon, "GET", "/me", nil); got.status != http.StatusOK {
			t.Fatalf("GET /me with a key not yet expired = %d %s; want 200", got.status, got)
		}
		clk.Advance(time.Hour) // the key's expiry: refused from now on

		for _, c := range []struct {
			name, path, authz string
			want              int
		}{
			{"key in query", "/me?api_key=" + url.QueryEscape(queryKey), "", 400},
			{"key in query with header", "/me?access_token=" + url.QueryEscape(queryKey), "Bearer " + admin, 400},
			{"token in query", "/models?token=x", "Bearer " + admin, 400},
			{"no authorization", "/me", "", 401},
			{"basic auth", "/me", "Basic " + base64.StdEncoding.EncodeToString([]byte("risk:"+admin)), 401},
			{"empty bearer", "/me", "Bearer ", 401},
			{"unknown key", "/me", "Bearer mpk_000000000000_" + strings.Repeat("A", 43), 401},
			{"malformed key", "/me", "Bearer mpk_nonsense", 401},
			{"right prefix wrong secret", "/me", "Bearer " + admin[:len(admin)-4] + "AAAA", 401},
			{"revoked key", "/me", "Bearer " + revoked, 401},
			{"expired key", "/me", "Bearer " + expired, 401},
			{"key expired while in use", "/me", "Bearer " + soon, 401},
			{"garbage bearer", "/me", "Bearer not-a-token", 401},
		} {
			t.Run(c.name, func(t *testing.T) {
				got := e.send(t, "GET", "/api/v1"+c.path, nil, func(r *http.Request) {
					if c.authz != "" {
						r.Header.Set("Authorization", c.authz)
					}
				})
				problem(t, c.name, got, c.want)
				if c.want == http.StatusUnauthorized && !strings.HasPrefix(got.header.Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("%s: WWW-Authenticate = %q; want a Bearer challenge", c.name, got.header.Get("WWW-Authenticate"))
				}
			})
		}

		// The refused query-string key was never authenticated: it has no
		// last-used time.
		var keys struct {
			Items []struct {
				ID         int64      `json:"id"`
				LastUsedAt *time.Time `json:"last_used_at"`
			} `json:"items"`
		}
		e.getJSON(t, admin, "/api-keys?limit=500", &keys)
		for _, k := range keys.Items {
			if k.ID == queryKeyID && k.LastUsedAt != nil {
				t.Errorf("key sent in a query string was used at %v; want never", k.LastUsedAt)
			}
		}
	})

	t.Run("org-wide key revocable", func(t *testing.T) {
		// A platform admin creates org-wide keys (finance, platform_admin),
		// so it must be able to revoke them too.
		pa := e.Keys["platform-admin"]
		got := e.call(t, pa, "POST", "/api-keys", jsonPayload(map[string]any{"name": "finance-2", "role": "finance"}))
		if got.status != http.StatusCreated {
			t.Fatalf("POST /api-keys finance = %d %s; want 201", got.status, got)
		}
		var k struct {
			ID  int64  `json:"id"`
			Key string `json:"key"`
		}
		if err := json.Unmarshal(got.body, &k); err != nil {
			t.Fatal(err)
		}
		if got := e.call(t, pa, "DELETE", fmt.Sprintf("/api-keys/%d", k.ID), nil); got.status != http.StatusOK {
			t.Errorf("platform admin DELETE /api-keys/%d (finance key) = %d %s; want 200", k.ID, got.status, got)
		}
		if got := e.call(t, k.Key, "GET", "/me", nil); got.status != http.StatusUnauthorized {
			t.Errorf("GET /me with the revoked finance key = %d %s; want 401", got.status, got)
		}
	})

	t.Run("portal form csrf field", func(t *testing.T) {
		// Pages work without JavaScript, so a plain form post carries the
		// CSRF token as the form field "csrf", with no X-CSRF-Token header.
		s := e.signIn(t, "risk-admin@example.com")
		for _, c := range []struct {
			csrf string
			want int
		}{{s.csrf, http.StatusSeeOther}, {"wrong", http.StatusForbidden}, {"", http.StatusForbidden}} {
			form := formPayload(url.Values{"csrf": {c.csrf}, "team": {"risk"}})
			got := e.send(t, "POST", "/team/switch", form, func(r *http.Request) {
				r.AddCookie(&http.Cookie{Name: auth.SessionCookie, Value: s.token})
			})
			if got.status != c.want {
				t.Errorf("POST /team/switch with form field csrf=%q = %d; want %d", c.csrf, got.status, c.want)
			}
		}
	})

	t.Run("pagination", func(t *testing.T) {
		// A team of its own, so the expected sets are exact.
		pa := e.Keys["platform-admin"]
		if got := e.call(t, pa, "POST", "/teams", jsonPayload(map[string]any{"name": "paging"})); got.status != http.StatusCreated {
			t.Fatalf("POST /teams = %d %s", got.status, got)
		}
		var created struct {
			ID  int64  `json:"id"`
			Key string `json:"key"`
		}
		got := e.call(t, pa, "POST", "/api-keys", jsonPayload(map[string]any{"name": "paging-admin", "team": "paging", "role": "admin"}))
		if err := json.Unmarshal(got.body, &created); err != nil || got.status != http.StatusCreated {
			t.Fatalf("POST /api-keys = %d %s", got.status, got)
		}
		key := created.Key
		want := map[string][]string{"/models": nil, "/models/paging-m1/versions": nil, "/endpoints": nil, "/api-keys": {strconv.FormatInt(created.ID, 10)}}
		post := func(path string, body *payload) []byte {
			got := e.call(t, key, "POST", path, body)
			if got.status != http.StatusCreated {
				t.Fatalf("POST %s = %d %s; want 201", path, got.status, got)
			}
			return got.body
		}
		for i := 1; i <= 7; i++ {
			name := fmt.Sprintf("paging-m%d", i)
			post("/models", jsonPayload(map[string]any{"name": name, "task": "regression"}))
			want["/models"] = append(want["/models"], name)
		}
		for i := 1; i <= 7; i++ {
			v := fmt.Sprintf("v%d", i)
			post("/models/paging-m1/versions", versionExternal(v))
			want["/models/paging-m1/versions"] = append(want["/models/paging-m1/versions"], v)
		}
		for i := 1; i <= 7; i++ {
			name := fmt.Sprintf("paging-e%d", i)
			post("/endpoints", jsonPayload(map[string]any{"name": name, "model": "paging-m1", "version": "v1", "runtime": "onnxruntime",
				"instance_profile": "mig-1g.10gb", "min_replicas": 0, "max_replicas": 1, "tier": "batch"}))
			want["/endpoints"] = append(want["/endpoints"], name)
		}
		for i := 1; i <= 6; i++ {
			var k struct {
				ID int64 `json:"id"`
			}
			_ = json.Unmarshal(post("/api-keys", jsonPayload(map[string]any{"name": fmt.Sprintf("paging-k%d", i), "role": "viewer", "team": "paging"})), &k)
			want["/api-keys"] = append(want["/api-keys"], strconv.FormatInt(k.ID, 10))
		}
		// More keys, straight through the service, so that the team's
		// audit log outgrows the 100 records audit.List falls back to.
		for i := 1; i <= 95; i++ {
			_, k, err := e.srv.Tenant.CreateKey(context.Background(), system, tenant.KeyRequest{Name: fmt.Sprintf("paging-s%d", i), Team: "paging", Role: auth.RoleViewer})
			if err != nil {
				t.Fatal(err)
			}
			want["/api-keys"] = append(want["/api-keys"], strconv.FormatInt(k.ID, 10))
		}
		// Lists whose content is only known by reading them: the audit log
		// (team.create, 1+6+95 api_key.create, 7 each of model.create,
		// version.register and endpoint.create) and the teams.
		want["/audit"] = walk(t, e, key, "/audit", 3)
		want["/teams"] = walk(t, e, pa, "/teams", 3)
		if n := len(want["/audit"]); n != 1+1+6+95+3*7 {
			t.Errorf("paging team has %d audit records; want %d", n, 1+1+6+95+3*7)
		}
		if got := want["/teams"]; !slices.Equal(got, []string{"risk", "search", "paging"}) {
			t.Errorf("teams = %v; want risk, search, paging", got)
		}
		for path, items := range want {
			t.Run(path, func(t *testing.T) {
				k := key
				if path == "/teams" {
					k = pa
				}
				for _, limit := range []int{1, 7, 8, 100, 500} {
					got := walk(t, e, k, path, limit)
					if !slices.Equal(got, items) {
						t.Errorf("GET %s by pages of %d = %s; want each of %d items once", path, limit, firstDiff(got, items), len(items))
					}
				}
				sep := "?"
				if strings.Contains(path, "?") {
					sep = "&"
				}
				for _, cursor := range []string{"!!!", "YWJj", base64.RawURLEncoding.EncodeToString([]byte("-5")), "MTIzNDU2Nzg5MDEyMzQ1Njc4OTAxMjM0NTY3ODkw"} {
					got := e.call(t, k, "GET", path+sep+"cursor="+url.QueryEscape(cursor), nil)
					if doc := problem(t, "GET "+path+" cursor "+cursor, got, http.StatusBadRequest); !doc.names("query.cursor") && got.status == 400 {
						t.Errorf("GET %s with cursor %q errors at %v; want query.cursor", path, cursor, doc.locations())
					}
				}
			})
		}
	})
}

// walk follows next_cursor from the first page to the last and returns the
// items' ids (name, or id where there is none) in order.
func walk(t *testing.T, e *testEnv, key, path string, limit int) []string {
	t.Helper()
	var out []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatalf("GET %s: more than 1000 pages", path)
		}
		q := url.Values{"limit": {strconv.Itoa(limit)}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page struct {
			Items      []map[string]any `json:"items"`
			NextCursor string           `json:"next_cursor"`
		}
		e.getJSON(t, key, path+"?"+q.Encode(), &page)
		if len(page.Items) > limit {
			t.Fatalf("GET %s limit %d returned %d items", path, limit, len(page.Items))
		}
		for _, it := range page.Items {
			id, ok := it["name"]
			if path == "/audit" || path == "/api-keys" || !ok {
				id = it["id"]
			}
			out = append(out, fmt.Sprint(id))
		}
		if page.NextCursor == "" {
			return out
		}
		if len(page.Items) == 0 {
			t.Fatalf("GET %s: an empty page with a next cursor", path)
		}
		cursor = page.NextCursor
	}
}

// firstDiff describes how got differs from want, briefly.
func firstDiff(got, want []string) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("%d items, item %d is %s where %s was expected", len(got), i, got[i], want[i])
		}
	}
	return fmt.Sprintf("%d items, ending after %v", len(got), got[max(0, len(got)-3):])
}
