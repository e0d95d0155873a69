package handlers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"modelplane/auth"
	"modelplane/busapi"
	"modelplane/db"
	"modelplane/endpoint"
	"modelplane/enrollment"
	"modelplane/grant"
	"modelplane/graph"
	"modelplane/notify"
	"modelplane/outbox"
	"modelplane/rollout"
	"modelplane/tenant"
)

// portalWrite is one state-changing portal route with a request that
// changes something when it carries the right CSRF token. Variant i (0 or 1)
// of a write changes something different, so both can succeed in turn.
type portalWrite struct {
	route string // the chi pattern
	path  func(i int) string
	// body returns the request; csrf is put in the form as its first field,
	// or left out when "".
	body      func(i int, csrf string) (contentType string, body []byte)
	status    int                                                 // on success
	check     func(t *testing.T, r portalResponse, u *portalUser) // what success did, when not a stored change
	viewerMay bool                                                // a viewer may do it too
	user      string                                              // who acts; "" is the risk admin
}

// portalUnchecked are the non-GET routes outside the portal's session, and why
// they need no CSRF token.
var portalUnchecked = map[string]string{
	"/login":         "starts a sign-in: there is no session yet, and the state cookie binds the callback",
	"/auth/callback": "the OIDC callback: state and its cookie are checked instead",
	"/static/*":      "read-only files",
}

// portalURLEncoded returns a form body with the csrf field first.
func portalURLEncoded(csrf string, pairs ...string) (string, []byte) {
	var b strings.Builder
	if csrf != "" {
		b.WriteString("csrf=" + url.QueryEscape(csrf))
	}
	for i := 0; i+1 < len(pairs); i += 2 {
		if b.Len() > 0 {
			b.WriteByte('&')
		}
		b.WriteString(url.QueryEscape(pairs[i]) + "=" + url.QueryEscape(pairs[i+1]))
	}
	return "application/x-www-form-urlencoded", []byte(b.String())
}

// portalWrites returns a write for every state-changing portal route, acting
// as an admin of team risk, with what they need created in e.
func portalWrites(t *testing.T, e *testEnv) []portalWrite {
	t.Helper()
	ctx := context.Background()
	var keyIDs []int64
	for i := range 2 {
		enrollNode(t, e, fmt.Sprintf("csrf-node-%d", i))
		name := fmt.Sprintf("csrf-del-%d", i)
		if _, err := e.srv.Endpoints.Create(ctx, system, endpoint.Spec{Name: name, Model: "risk-model", Version: "v1", Runtime: "onnxruntime",
			Settings: endpoint.Settings{InstanceProfile: "mig-1g.10gb", MinReplicas: 1, MaxReplicas: 1, Tier: "batch", RetentionDays: 1}}); err != nil {
			t.Fatal(err)
		}
		_, k, err := e.srv.Tenant.CreateKey(ctx, system, tenant.KeyRequest{Name: fmt.Sprintf("csrf-revoke-%d", i), Team: "risk", Role: auth.RoleViewer})
		if err != nil {
			t.Fatal(err)
		}
		keyIDs = append(keyIDs, k.ID)
		if _, err := e.srv.Endpoints.Create(ctx, system, endpoint.Spec{Name: fmt.Sprintf("csrf-ro-%d", i), Model: "risk-model", Version: "v1", Runtime: "onnxruntime",
			Settings: endpoint.Settings{InstanceProfile: "mig-1g.10gb", MinReplicas: 1, MaxReplicas: 1, Tier: "batch", RetentionDays: 1}}); err != nil {
			t.Fatal(err)
		}
		share := fmt.Sprintf("csrf-share-%d", i)
		if _, err := e.srv.Endpoints.Create(ctx, system, endpoint.Spec{Name: share, Model: "risk-model", Version: "v1", Runtime: "onnxruntime",
			Settings: endpoint.Settings{InstanceProfile: "mig-1g.10gb", MinReplicas: 1, MaxReplicas: 1, Tier: "batch", RetentionDays: 1}}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.srv.Grants.Set(ctx, system, share, "search", grant.Limits{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.srv.Endpoints.Create(ctx, system, endpoint.Spec{Name: "csrf-rollout", Model: "risk-model", Version: "v1", Runtime: "onnxruntime",
		Settings: endpoint.Settings{InstanceProfile: "mig-1g.10gb", MinReplicas: 1, MaxReplicas: 1, Tier: "batch", RetentionDays: 1}}); err != nil {
		t.Fatal(err)
	}
	one := graph.Definition{Entry: "a", Nodes: []graph.Vertex{{ID: "a", Type: graph.TypeCall, Endpoint: "risk-endpoint"}}}
	if _, err := e.srv.Endpoints.CreateGraph(ctx, system, endpoint.GraphSpec{Name: "csrf-graph", Team: "risk", Definition: one}); err != nil {
		t.Fatal(err)
	}
	ro, err := e.srv.Rollouts.Start(ctx, system, "csrf-rollout", rollout.Spec{Version: "v2"})
	if err != nil {
		t.Fatal(err)
	}
	// Two webhooks to delete, and one with two dead deliveries to send
	// again.
	var hooks []int64
	for i := range 3 {
		wh, _, err := e.srv.Webhooks.Create(ctx, system, notify.WebhookSpec{Team: "risk", URL: fmt.Sprintf("https://hooks.example.com/csrf-%d", i),
			EventTypes: []string{"budget.alert"}})
		if err != nil {
			t.Fatal(err)
		}
		hooks = append(hooks, wh.ID)
	}
	for i := range 2 {
		if err := db.InTx(ctx, e.pool, func(q *db.Queries) error {
			return outbox.Event(ctx, q, "risk", busapi.Event{Kind: "budget", ID: int64(i + 1), Name: "risk", Type: "alert", State: "80", At: time.Now()})
		}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.pool.Exec(ctx, "UPDATE deliveries SET state = 'dead' WHERE webhook_id = $1", hooks[2]); err != nil {
		t.Fatal(err)
	}
	dead, err := e.srv.Webhooks.Deliveries(ctx, system, hooks[2], 10)
	if err != nil || len(dead) != 2 {
		t.Fatalf("dead deliveries: %v, %v", dead, err)
	}
	fixed := func(p string) func(int) string { return func(int) string { return p } }
	return []portalWrite{
		{
			route: "/team/webhooks", path: fixed("/team/webhooks"), status: http.StatusOK,
			body: func(i int, csrf string) (string, []byte) {
				return portalURLEncoded(csrf, "team", "risk", "url", fmt.Sprintf("https://hooks.example.com/csrf-new-%d", i), "event_types", "*")
			},
		},
		{
			route: "/team/webhooks/{webhook}/delete", path: func(i int) string { return fmt.Sprintf("/team/webhooks/%d/delete", hooks[i]) },
			status: http.StatusSeeOther, body: func(_ int, csrf string) (string, []byte) { return portalURLEncoded(csrf) },
		},
		{
			route: "/team/webhooks/{webhook}/deliveries/{delivery}/redeliver",
			path: func(i int) string {
				return fmt.Sprintf("/team/webhooks/%d/deliveries/%d/redeliver", hooks[2], dead[i].ID)
			},
			status: http.StatusSeeOther, body: func(_ int, csrf string) (string, []byte) { return portalURLEncoded(csrf) },
		},
		{
			route: "/logout", path: fixed("/logout"), status: http.StatusSeeOther, viewerMay: true,
			body: func(_ int, csrf string) (string, []byte) { return portalURLEncoded(csrf) },
			check: func(t *testing.T, r portalResponse, u *portalUser) {
				if r.Header.Get("Location") != "/login" {
					t.Errorf("logout went to %q, want /login", r.Header.Get("Location"))
				}
				if c := r.cookie(auth.SessionCookie); c == nil || c.MaxAge >= 0 {
					t.Errorf("logout did not clear the session cookie")
				}
				if _, _, err := e.srv.Sessions.Lookup(context.Background(), u.token); !errors.Is(err, auth.ErrUnauthenticated) {
					t.Errorf("session still valid after logout: %v", err)
				}
			},
		},
		{
			route: "/endpoints", path: fixed("/endpoints"), status: http.StatusSeeOther,
			body: func(i int, csrf string) (string, []byte) {
				return portalURLEncoded(csrf, "name", fmt.Sprintf("csrf-new-%d", i), "model", "risk-model", "version", "v1",
					"instance_profile", "mig-1g.10gb", "tier", "standard", "min_replicas", "1", "max_replicas", "2", "sampling_rate", "0", "retention_days", "30")
			},
		},
		{
			route: "/graphs", path: fixed("/graphs"), status: http.StatusSeeOther,
			body: func(i int, csrf string) (string, []byte) {
				return portalURLEncoded(csrf, "name", fmt.Sprintf("csrf-graph-%d", i), "team", "risk",
					"graph", `{"entry":"a","nodes":[{"id":"a","type":"call","endpoint":"risk-endpoint"}]}`)
			},
		},
		{
			route: "/endpoints/{endpoint}/graph/versions", path: fixed("/endpoints/csrf-graph/graph/versions"), status: http.StatusSeeOther,
			body: func(i int, csrf string) (string, []byte) {
				return portalURLEncoded(csrf, "graph_version", fmt.Sprintf("g%d", i+2),
					"graph_definition", `{"entry":"b","nodes":[{"id":"b","type":"call","endpoint":"risk-endpoint"}]}`)
			},
		},
		{
			route: "/endpoints/{endpoint}/traffic", path: fixed("/endpoints/risk-endpoint/traffic"), status: http.StatusOK,
			body: func(i int, csrf string) (string, []byte) {
				w := 60 - 30*i
				return portalURLEncoded(csrf, "w_v1", fmt.Sprint(w), "w_v2", fmt.Sprint(100-w))
			},
		},
		{
			route: "/endpoints/{endpoint}/try", path: fixed("/endpoints/risk-endpoint/try"), status: http.StatusOK,
			body: func(i int, csrf string) (string, []byte) {
				return portalURLEncoded(csrf, "body", fmt.Sprintf(`{"instances": [{"n": %d}]}`, i))
			},
			check: func(t *testing.T, r portalResponse, _ *portalUser) {
				if !bytes.Contains(r.Body, []byte("/v1/endpoints/risk-endpoint/predict")) || !bytes.Contains(r.Body, []byte(testGatewayKey)) {
					t.Errorf("POST try did not show the gateway's answer:\n%.600s", r.Body)
				}
			},
		},
		{
			route: "/endpoints/{endpoint}/grants", path: fixed("/endpoints/risk-endpoint/grants"), status: http.StatusSeeOther,
			body: func(i int, csrf string) (string, []byte) {
				return portalURLEncoded(csrf, "team", "search", "daily_quota", fmt.Sprint(1000+i))
			},
		},
		{
			route: "/endpoints/{endpoint}/grants/{team}/revoke", path: func(i int) string { return fmt.Sprintf("/endpoints/csrf-share-%d/grants/search/revoke", i) },
			status: http.StatusSeeOther,
			body:   func(_ int, csrf string) (string, []byte) { return portalURLEncoded(csrf) },
		},
		{
			route: "/endpoints/{endpoint}/delete", path: func(i int) string { return fmt.Sprintf("/endpoints/csrf-del-%d/delete", i) }, status: http.StatusSeeOther,
			body: func(i int, csrf string) (string, []byte) {
				return portalURLEncoded(csrf, "confirm", fmt.Sprintf("csrf-del-%d", i))
			},
		},
		{
			route: "/models", path: fixed("/models"), status: http.StatusSeeOther,
			body: func(i int, csrf string) (string, []byte) {
				return portalURLEncoded(csrf, "team", "risk", "name", fmt.Sprintf("csrf-model-%d", i), "task", "classification", "input_schema", `{"type":"object"}`)
			},
		},
		{
			route: "/models/{model}/versions", path: fixed("/models/risk-model/versions"), status: http.StatusSeeOther,
			body: func(i int, csrf string) (string, []byte) {
				var parts []portalPart
				if csrf != "" {
					parts = append(parts, portalPart{name: "csrf", content: []byte(csrf)})
				}
				parts = append(parts,
					portalPart{name: "metadata", content: fmt.Appendf(nil, `{"name": "csrf-%d", "runtime": "onnxruntime", "resources": {"gpu_count": 1, "gpu_memory_mb": 1024}}`, i)},
					portalPart{name: "files", filename: "model.safetensors", content: safetensorsFile(fmt.Sprintf("csrf-%d", i))})
				return portalMultipart(t, parts...)
			},
		},
		{
			route: "/team/switch", path: fixed("/team/switch"), status: http.StatusSeeOther, viewerMay: true,
			body: func(_ int, csrf string) (string, []byte) { return portalURLEncoded(csrf, "team", "risk") },
			check: func(t *testing.T, r portalResponse, _ *portalUser) {
				if c := r.cookie(TeamCookie); c == nil || c.Value != "risk" {
					t.Errorf("switch did not set the team cookie")
				}
			},
		},
		{
			route: "/team/members", path: fixed("/team/members"), status: http.StatusSeeOther,
			body: func(i int, csrf string) (string, []byte) {
				return portalURLEncoded(csrf, "team", "risk", "email", "risk-viewer@example.com", "role", []string{"engineer", "viewer"}[i])
			},
		},
		{
			route: "/team/keys", path: fixed("/team/keys"), status: http.StatusOK,
			body: func(i int, csrf string) (string, []byte) {
				return portalURLEncoded(csrf, "team", "risk", "name", fmt.Sprintf("csrf-key-%d", i), "key_role", "viewer")
			},
		},
		{
			route: "/endpoints/{endpoint}/settings", path: fixed("/endpoints/risk-endpoint/settings"), status: http.StatusSeeOther,
			body: func(i int, csrf string) (string, []byte) {
				return portalURLEncoded(csrf, "instance_profile", "mig-2g.20gb", "tier", "standard", "min_replicas", "1",
					"max_replicas", fmt.Sprint(3+i), "sampling_rate", "0.1", "retention_days", "14")
			},
		},
		{
			route: "/endpoints/{endpoint}/autoscaling", path: fixed("/endpoints/risk-endpoint/autoscaling"), status: http.StatusOK,
			body: func(i int, csrf string) (string, []byte) {
				return portalURLEncoded(csrf, "as_signals", fmt.Sprintf("rps=%d", 100+i), "as_min_replicas", "1",
					"as_max_replicas", "3", "as_scale_down_s", "30", "as_grace_s", "900")
			},
		},
		{
			route: "/quotas", path: fixed("/quotas"), status: http.StatusSeeOther, user: "admin@example.com",
			body: func(i int, csrf string) (string, []byte) {
				return portalURLEncoded(csrf, "team", "risk", "resource", "H100-80GB", "amount", fmt.Sprint(64+i))
			},
		},
		{
			route: "/teams", path: fixed("/teams"), status: http.StatusSeeOther, user: "admin@example.com",
			body: func(i int, csrf string) (string, []byte) {
				return portalURLEncoded(csrf, "team_name", fmt.Sprintf("csrf-team-%d", i))
			},
		},
		{
			route: "/cost-rates", path: fixed("/cost-rates"), status: http.StatusSeeOther, user: "admin@example.com",
			body: func(i int, csrf string) (string, []byte) {
				at := time.Now().UTC().Add(time.Hour + time.Duration(i)*time.Minute).Truncate(time.Second).Format(time.RFC3339)
				return portalURLEncoded(csrf, "gpu_type", "A100-80GB", "profile", "full", "usd_per_hour", "3.75", "effective_from", at)
			},
		},
		{
			route: "/budgets", path: fixed("/budgets"), status: http.StatusSeeOther,
			body: func(i int, csrf string) (string, []byte) {
				return portalURLEncoded(csrf, "team", "risk", "monthly_usd", fmt.Sprint(1000+i), "enforcement", "alert")
			},
		},
		{
			route: "/endpoints/{endpoint}/rollouts", path: func(i int) string { return fmt.Sprintf("/endpoints/csrf-ro-%d/rollouts", i) },
			status: http.StatusSeeOther,
			body: func(_ int, csrf string) (string, []byte) {
				return portalURLEncoded(csrf, "version", "v2", "strategy", "canary", "steps", "5, 100", "bake_minutes", "1", "interval_seconds", "10")
			},
		},
		{
			// Variant 0 pauses, variant 1 resumes; htmx gets the live section.
			route: "/rollouts/{rollout}/{action}", path: func(i int) string { return fmt.Sprintf("/rollouts/%d/%s", ro.ID, []string{"pause", "resume"}[i]) },
			status: http.StatusSeeOther,
			body:   func(_ int, csrf string) (string, []byte) { return portalURLEncoded(csrf) },
		},
		{
			route: "/team/keys/{id}/revoke", path: func(i int) string { return fmt.Sprintf("/team/keys/%d/revoke", keyIDs[i]) }, status: http.StatusSeeOther,
			body: func(_ int, csrf string) (string, []byte) { return portalURLEncoded(csrf) },
		},
		{
			route: "/fleet/join-tokens", path: fixed("/fleet/join-tokens"), status: http.StatusOK, user: "admin@example.com",
			body: func(i int, csrf string) (string, []byte) {
				return portalURLEncoded(csrf, "node", fmt.Sprintf("csrf-join-%d", i), "host", "10.0.0.1")
			},
		},
		{
			route: "/fleet/{node}/revoke", path: func(i int) string { return fmt.Sprintf("/fleet/csrf-node-%d/revoke", i) },
			status: http.StatusSeeOther, user: "admin@example.com",
			body: func(_ int, csrf string) (string, []byte) { return portalURLEncoded(csrf) },
		},
	}
}

// enrollNode enrolls node through a join token, as an agent would.
func enrollNode(t *testing.T, e *testEnv, node string) {
	t.Helper()
	token, _, err := e.srv.Enrollment.CreateJoinToken(t.Context(), system, enrollment.JoinRequest{Node: node, Host: "10.0.0.1", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.srv.Enrollment.Join(t.Context(), token, "10.0.0.1"); err != nil {
		t.Fatal(err)
	}
}

// portalSnapshot fingerprints every row of the tables a portal write can
// change, so a refused request can be shown to have changed nothing.
func portalSnapshot(t *testing.T, e *testEnv) string {
	t.Helper()
	var out []string
	for _, table := range []string{"teams", "team_members", "api_keys", "models", "model_versions", "endpoints", "routing_rules", "audit_log", "outbox", "cost_rates", "budgets", "team_quotas", "webhooks", "deliveries"} {
		var n int64
		var sum string
		err := e.pool.QueryRow(context.Background(),
			"SELECT count(*), coalesce(md5(string_agg(t::text, '|' ORDER BY t::text)), '') FROM "+table+" t").Scan(&n, &sum)
		if err != nil {
			t.Fatalf("snapshot %s: %v", table, err)
		}
		out = append(out, fmt.Sprintf("%s=%d/%.8s", table, n, sum))
	}
	return strings.Join(out, " ")
}

// TestCSRF sends every state-changing portal route, found by walking the
// route tree, without a CSRF token and with wrong ones: each answers 403 and
// changes nothing. The same request with the session's token, as the form
// field or the X-CSRF-Token header, succeeds.
func TestCSRF(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	writes := portalWrites(t, e)

	// Every state-changing route outside the API has a write here.
	have := map[string]bool{}
	for _, w := range writes {
		have[w.route] = true
	}
	walked := map[string]bool{}
	err := chi.Walk(e.srv.Handler().(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if method == http.MethodGet || method == http.MethodHead || method == http.MethodOptions || strings.HasPrefix(route, "/api/") {
			return nil
		}
		if _, ok := portalUnchecked[route]; ok {
			return nil
		}
		walked[route] = true
		if method != http.MethodPost {
			t.Errorf("%s %s: the portal posts forms; CSRF cases cover POST only", method, route)
		}
		if !have[route] {
			t.Errorf("%s %s changes state but has no CSRF case in portalWrites", method, route)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for route := range have {
		if !walked[route] {
			t.Errorf("portalWrites has %s, which is not a state-changing route", route)
		}
	}
	if t.Failed() {
		return
	}

	for _, w := range writes {
		user := "risk-admin@example.com"
		if w.user != "" {
			user = w.user
		}
		t.Run(strings.TrimPrefix(w.route, "/"), func(t *testing.T) {
			u := portalSignIn(t, e, user)
			other := portalSignIn(t, e, user) // the same user's other session: a valid token, not this session's
			type attempt struct {
				name, field, header string
				misplaced           bool
			}
			attempts := []attempt{
				{name: "no token"},
				{name: "another session's token", field: other.csrf},
				{name: "another session's token in the header", header: other.csrf},
				{name: "the token with one character changed", field: portalFlip(u.csrf)},
				{name: "a wrong field", field: "wrong"},
				{name: "the right field but a wrong header", field: u.csrf, header: other.csrf},
			}
			if strings.HasPrefix(w.route, "/models/") && strings.Contains(w.route, "versions") { // the multipart upload
				attempts = append(attempts, attempt{name: "the right token after the upload", field: u.csrf, misplaced: true})
			}
			for _, a := range attempts {
				before := portalSnapshot(t, e)
				ct, body := w.body(0, a.field)
				if a.misplaced {
					// csrf as the last part: the check must not read the upload first.
					ct, body = w.body(0, "")
					ct, body = portalAppendPart(t, ct, body, "csrf", a.field)
				}
				var hdr []string
				if a.header != "" {
					hdr = []string{"X-CSRF-Token", a.header}
				}
				r := portalRequest(t, e, u.token, http.MethodPost, w.path(0), ct, body, nil, hdr...)
				if r.StatusCode != http.StatusForbidden {
					t.Errorf("%s: POST %s = %d, want 403\n%.400s", a.name, w.path(0), r.StatusCode, r.Body)
				}
				if after := portalSnapshot(t, e); after != before {
					t.Errorf("%s: POST %s changed stored state:\nbefore %s\nafter  %s", a.name, w.path(0), before, after)
				}
				if r.cookie(TeamCookie) != nil || r.cookie(auth.SessionCookie) != nil {
					t.Errorf("%s: POST %s set a cookie", a.name, w.path(0))
				}
				if _, _, err := e.srv.Sessions.Lookup(context.Background(), u.token); err != nil {
					t.Errorf("%s: POST %s ended the session: %v", a.name, w.path(0), err)
				}
			}

			// With the right token the same request succeeds: variant 0 as
			// the form field, variant 1 as the header (how htmx sends it).
			for i, inHeader := range []bool{false, true} {
				s := portalSignIn(t, e, user)
				before := portalSnapshot(t, e)
				var r portalResponse
				how := "form field"
				if inHeader {
					how = "X-CSRF-Token header"
					ct, body := w.body(i, "")
					r = portalRequest(t, e, s.token, http.MethodPost, w.path(i), ct, body, nil, "X-CSRF-Token", s.csrf)
				} else {
					ct, body := w.body(i, s.csrf)
					r = portalRequest(t, e, s.token, http.MethodPost, w.path(i), ct, body, nil)
				}
				if r.StatusCode != w.status {
					t.Errorf("with the token as the %s: POST %s = %d, want %d\n%.600s", how, w.path(i), r.StatusCode, w.status, r.Body)
					continue
				}
				if w.check != nil {
					w.check(t, r, s)
				} else if after := portalSnapshot(t, e); after == before {
					t.Errorf("with the token as the %s: POST %s = %d but changed nothing", how, w.path(i), r.StatusCode)
				}
			}
		})
	}
}

// portalFlip returns token with its first character changed.
func portalFlip(token string) string {
	if token[0] == 'A' {
		return "B" + token[1:]
	}
	return "A" + token[1:]
}

// portalAppendPart adds a field at the end of a multipart body.
func portalAppendPart(t *testing.T, contentType string, body []byte, name, value string) (string, []byte) {
	t.Helper()
	boundary := strings.TrimPrefix(contentType, "multipart/form-data; boundary=")
	closing := []byte("\r\n--" + boundary + "--\r\n")
	if boundary == contentType || !slices.Equal(body[len(body)-len(closing):], closing) {
		t.Fatalf("not a multipart body: %s", contentType)
	}
	part := fmt.Sprintf("\r\n--%s\r\nContent-Disposition: form-data; name=%q\r\n\r\n%s", boundary, name, value)
	out := append(slices.Clone(body[:len(body)-len(closing)]), part...)
	return contentType, append(out, closing...)
}
