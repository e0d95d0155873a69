package handlers

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"modelplane/registry"
	"modelplane/rollout"
)

// The tenancy matrix: every route that names an object is called by someone
// who must not touch it, and must answer like the object does not exist
// (another team) or refuse (a viewer of the owning team). The routes come
// from the live chi tree, so a new route without a fixture fails
// TestTenancyMatrix/covers_every_route instead of going untested.

// endpointSettings is a valid settings body for PUT /endpoints/{endpoint}.
var endpointSettings = map[string]any{"instance_profile": "mig-2g.20gb", "min_replicas": 0, "max_replicas": 3, "tier": "batch",
	"sampling_rate": 0.5, "retention_days": 7}

// apiFixtures are plausible valid requests for every API route that takes a
// path parameter or writes, keyed "METHOD /pattern" below /api/v1. A nil
// payload sends no body; several payloads are several variants of the route.
func apiFixtures() map[string][]*payload {
	return map[string][]*payload{
		"GET /teams/{team}/members":            {nil},
		"POST /teams/{team}/members":           {jsonPayload(map[string]any{"email": "search-admin@example.com", "role": "admin"})},
		"DELETE /teams/{team}/members/{email}": {nil},
		"DELETE /api-keys/{id}":                {nil},
		"GET /models/{model}":                  {nil},
		"GET /models/{model}/versions":         {nil},
		// The plain chi upload route and its JSON form for external artifacts.
		"POST /models/{model}/versions":          {versionUpload("v9"), versionExternal("v9")},
		"GET /models/{model}/versions/{version}": {nil},
		// Resumable uploads: a session of risk-model holding nothing yet.
		"POST /models/{model}/uploads":          {jsonPayload(map[string]any{"metadata": map[string]any{"name": "v9", "runtime": "onnxruntime"}, "manifest": map[string]string{"model.safetensors": matrixChunkDigest()}})},
		"GET /uploads/{upload}":                 {nil},
		"PUT /uploads/{upload}/chunks/{sha256}": {{contentType: "application/octet-stream", body: matrixChunk()}},
		"POST /uploads/{upload}/complete":       {jsonPayload(map[string]any{"files": map[string][]string{"model.safetensors": {matrixChunkDigest()}}})},
		// The plain chi download route.
		"GET /models/{model}/versions/{version}/files/{path}": {nil},
		"GET /endpoints/{endpoint}":                           {nil},
		"GET /endpoints/{endpoint}/stats":                     {nil},
		"GET /endpoints/{endpoint}/requests":                  {nil},
		"GET /endpoints/{endpoint}/replicas":                  {nil},
		"GET /nodes/{node}":                                   {nil},
		"POST /join-tokens":                                   {jsonPayload(map[string]any{"node": "matrix-node", "host": "10.0.0.1"})},
		"DELETE /join-tokens/{id}":                            {nil},
		"POST /nodes/{node}/revoke":                           {nil},
		"PUT /tier-grants/{team}/{tier}":                      {nil},
		"DELETE /tier-grants/{team}/{tier}":                   {nil},
		"PUT /nodes/{node}/attestation":                       {jsonPayload(map[string]any{"gpus": []map[string]any{{"type": "A100-80GB", "count": 8, "slices": []string{"full"}}}})},
		"PUT /endpoints/{endpoint}":                           {jsonPayload(endpointSettings)},
		"DELETE /endpoints/{endpoint}":                        {nil},
		"PUT /endpoints/{endpoint}/traffic":                   {jsonPayload(map[string]any{"weights": []map[string]any{{"version": "v1", "weight": 50}, {"version": "v2", "weight": 50}}})},
		"PUT /endpoints/{endpoint}/experiment":                {jsonPayload(map[string]any{"name": "ab", "arms": []map[string]any{{"version": "v1", "share": 50}, {"version": "v2", "share": 50}}})},
		"DELETE /endpoints/{endpoint}/experiment":             {nil},
		"GET /endpoints/{endpoint}/grants":                    {nil},
		"PUT /endpoints/{endpoint}/grants/{team}":             {jsonPayload(map[string]any{"rate_limit_rps": 5, "daily_quota": 1000, "sampling": true})},
		"DELETE /endpoints/{endpoint}/grants/{team}":          {nil},
		"GET /endpoints/{endpoint}/autoscaling":               {nil},
		"GET /endpoints/{endpoint}/autoscaling/decisions":     {nil},
		"PUT /endpoints/{endpoint}/autoscaling": {jsonPayload(map[string]any{"signals": []map[string]any{{"signal": "rps", "target": 100}},
			"min_replicas": 1, "max_replicas": 4, "scale_up_stabilization_s": 0, "scale_down_stabilization_s": 300, "scale_up_rate": 4,
			"scale_down_rate": 0.5, "tolerance": 0.1, "panic_threshold": 2, "scale_to_zero_grace_s": 900, "cold_start_budget_s": 30,
			"predictive": "off"})},
		"POST /teams":    {jsonPayload(map[string]any{"name": "matrix-team"})},
		"POST /api-keys": {jsonPayload(map[string]any{"name": "matrix-key", "team": "risk", "role": "viewer"})},
		"POST /models":   {jsonPayload(map[string]any{"team": "risk", "name": "matrix-model", "task": "classification"})},
		// A rate inside the 5-minute lead: a platform admin would be refused
		// on that field (a 400 that stores nothing), anyone else, finance
		// included, on their role (403).
		"POST /cost-rates": {jsonPayload(map[string]any{"gpu_type": "A100-80GB", "profile": "full", "uusd_per_hour": 3_750_000,
			"effective_from": time.Now().UTC().Add(time.Minute).Format(time.RFC3339)})},
		"POST /budgets":                                            {jsonPayload(map[string]any{"team": "risk", "monthly_uusd": 5_000_000})},
		"POST /quotas":                                             {jsonPayload(map[string]any{"team": "risk", "resource": "H100-80GB", "amount": 64})},
		"DELETE /quotas/{team}/{resource}":                         {nil},
		"POST /endpoints/{endpoint}/rollouts":                      {jsonPayload(map[string]any{"version": "v2", "steps": []map[string]any{{"percent": 10, "bake_seconds": 60}, {"percent": 100, "bake_seconds": 60}}})},
		"GET /endpoints/{endpoint}/rollouts":                       {nil},
		"GET /rollouts/{rollout}":                                  {nil},
		"GET /rollouts/{rollout}/events":                           {nil},
		"POST /rollouts/{rollout}/approve":                         {jsonPayload(map[string]any{"comment": "ok"})},
		"POST /rollouts/{rollout}/reject":                          {jsonPayload(map[string]any{"comment": "no"})},
		"POST /rollouts/{rollout}/rollback":                        {jsonPayload(map[string]any{})},
		"POST /rollouts/{rollout}/pause":                           {jsonPayload(map[string]any{})},
		"POST /rollouts/{rollout}/resume":                          {jsonPayload(map[string]any{})},
		"POST /rollouts/{rollout}/canary":                          {jsonPayload(map[string]any{})},
		"GET /endpoints/{endpoint}/drift":                          {nil},
		"GET /endpoints/{endpoint}/replicas/{replica}/logs":        {nil},
		"POST /webhooks":                                           {jsonPayload(map[string]any{"team": "risk", "url": "https://hooks.example.com/matrix", "event_types": []string{"*"}})},
		"DELETE /webhooks/{webhook}":                               {nil},
		"POST /webhooks/{webhook}/rotate-secret":                   {nil},
		"GET /webhooks/{webhook}/deliveries":                       {nil},
		"POST /webhooks/{webhook}/deliveries/{delivery}/redeliver": {nil},
		"POST /graphs": {jsonPayload(map[string]any{"name": "matrix-graph", "team": "risk",
			"graph": map[string]any{"entry": "a", "nodes": []map[string]any{{"id": "a", "type": "call", "endpoint": "risk-endpoint"}}}})},
		"GET /endpoints/{endpoint}/graph/versions": {nil},
		"POST /endpoints/{endpoint}/graph/versions": {jsonPayload(map[string]any{"version": "g2",
			"graph": map[string]any{"entry": "a", "nodes": []map[string]any{{"id": "a", "type": "call", "endpoint": "risk-endpoint"}}}})},
		"POST /endpoints": {jsonPayload(map[string]any{"name": "matrix-endpoint", "model": "risk-model", "version": "v1", "runtime": "onnxruntime",
			"instance_profile": "mig-1g.10gb", "min_replicas": 1, "max_replicas": 2, "tier": "standard"})},
	}
}

// portalFixtures are the same for the portal: every route with a path
// parameter or a POST, except portalExempt. Forms carry the session's CSRF
// token (first, for multipart) so that the request reaches the handler.
func portalFixtures() map[string]func(v map[string]string, csrf string) *payload {
	form := func(pairs ...string) func(map[string]string, string) *payload {
		return func(_ map[string]string, csrf string) *payload {
			f := url.Values{"csrf": {csrf}}
			for i := 0; i+1 < len(pairs); i += 2 {
				f.Set(pairs[i], pairs[i+1])
			}
			return formPayload(f)
		}
	}
	return map[string]func(map[string]string, string) *payload{
		"GET /endpoints/{endpoint}":                                     nil,
		"GET /endpoints/{endpoint}/replicas":                            nil,
		"GET /endpoints/{endpoint}/replicas/{replica}/log":              nil,
		"GET /endpoints/{endpoint}/stats":                               nil,
		"GET /endpoints/{endpoint}/drift":                               nil,
		"GET /fleet/{node}":                                             nil,
		"GET /fleet/{node}/gpus":                                        nil,
		"POST /fleet/join-tokens":                                       form("node", "matrix-node", "host", "10.0.0.1"),
		"POST /fleet/{node}/revoke":                                     form(),
		"POST /endpoints/{endpoint}/traffic":                            form("w_v1", "50", "w_v2", "50"),
		"POST /endpoints/{endpoint}/autoscaling":                        form("as_signals", "rps=100", "as_min_replicas", "1", "as_max_replicas", "4", "as_scale_down_s", "60", "as_grace_s", "900"),
		"POST /endpoints/{endpoint}/try":                                form("body", `{"instances": [{}]}`),
		"POST /endpoints/{endpoint}/delete":                             func(v map[string]string, csrf string) *payload { return form("confirm", v["endpoint"])(v, csrf) },
		"GET /models/{model}":                                           nil,
		"GET /models/{model}/versions/new":                              nil,
		"GET /models/{model}/versions/{version}":                        nil,
		"POST /team/keys/{id}/revoke":                                   form(),
		"POST /budgets":                                                 form("team", "risk", "monthly_usd", "1000", "enforcement", "block"),
		"POST /quotas":                                                  form("team", "risk", "resource", "H100-80GB", "amount", "64"),
		"POST /cost-rates":                                              form("gpu_type", "A100-80GB", "profile", "full", "usd_per_hour", "3.75", "effective_from", "2099-01-01T00:00:00Z"),
		"POST /endpoints/{endpoint}/rollouts":                           form("version", "v2", "strategy", "canary", "steps", "10, 100", "bake_minutes", "1", "interval_seconds", "5"),
		"GET /rollouts/{rollout}":                                       nil,
		"GET /rollouts/{rollout}/live":                                  nil,
		"GET /rollouts/{rollout}/events":                                nil,
		"POST /rollouts/{rollout}/{action}":                             form("comment", "matrix"),
		"POST /endpoints":                                               form("name", "matrix-endpoint", "model", "risk-model", "version", "v1", "instance_profile", "mig-1g.10gb", "tier", "standard", "min_replicas", "1", "max_replicas", "2", "sampling_rate", "0", "retention_days", "30"),
		"POST /endpoints/{endpoint}/graph/versions":                     form("graph_version", "g9", "graph_definition", `{"entry":"a","nodes":[{"id":"a","type":"call","endpoint":"risk-endpoint"}]}`),
		"POST /graphs":                                                  form("team", "risk", "name", "matrix-graph", "graph", `{"entry":"a","nodes":[{"id":"a","type":"call","endpoint":"risk-endpoint"}]}`),
		"POST /models":                                                  form("team", "risk", "name", "matrix-model", "task", "classification", "input_schema", `{"type":"object"}`),
		"POST /team/members":                                            form("team", "risk", "email", "search-admin@example.com", "role", "admin"),
		"POST /team/keys":                                               form("team", "risk", "name", "matrix-key", "key_role", "viewer"),
		"POST /team/webhooks":                                           form("team", "risk", "url", "https://hooks.example.com/matrix", "event_types", "*"),
		"GET /team/webhooks/{webhook}":                                  nil,
		"POST /team/webhooks/{webhook}/delete":                          form(),
		"POST /team/webhooks/{webhook}/deliveries/{delivery}/redeliver": form(),
		"GET /endpoints/{endpoint}/sharing":                             nil,
		"POST /endpoints/{endpoint}/grants":                             form("team", "search", "rate_limit_rps", "5", "daily_quota", "100"),
		"POST /endpoints/{endpoint}/grants/{team}/revoke":               form(),
		"POST /endpoints/{endpoint}/settings":                           form("instance_profile", "mig-2g.20gb", "tier", "standard", "min_replicas", "1", "max_replicas", "3", "sampling_rate", "0", "retention_days", "30"),
		"POST /teams":                                                   form("team_name", "matrix-team"),
		"POST /models/{model}/versions": func(_ map[string]string, csrf string) *payload {
			meta := `{"name": "v9", "runtime": "onnxruntime", "resources": {"gpu_count": 1, "gpu_memory_mb": 1024}}`
			return multipartPayload([3]string{"csrf", "", csrf}, [3]string{"metadata", "", meta},
				[3]string{"files", "model.safetensors", string(safetensorsFile("portal-v9"))})
		},
	}
}

// platformOnly are the routes for platform admins alone. Nodes belong to no
// team, so there is nothing to hide: everyone else is refused with 403,
// whether the node exists or not, and a platform admin gets 200 or 404.
var platformOnly = []string{"GET /nodes/{node}", "GET /fleet/{node}", "GET /fleet/{node}/gpus",
	"DELETE /join-tokens/{id}", "POST /nodes/{node}/revoke", "POST /fleet/{node}/revoke", "PUT /nodes/{node}/attestation",
	"POST /quotas", "DELETE /quotas/{team}/{resource}", "PUT /tier-grants/{team}/{tier}", "DELETE /tier-grants/{team}/{tier}"}

// nodeReads are the API routes that read from a node's agent over NATS,
// which this environment has none of: a caller allowed to read gets the
// 503 that says so (TestReplicaLogsFromTheAgent reads them from a real
// agent).
var nodeReads = []string{"GET /endpoints/{endpoint}/replicas/{replica}/logs"}

// streams are the API routes that stream until the caller leaves: a
// caller allowed to read gets what there is with follow=0.
var streams = []string{"GET /rollouts/{rollout}/events"}

// agentOnly are the API routes node agents call with their own token and no
// user's: no user credential reaches them (TestNodeEnrollmentAPI covers them).
var agentOnly = []string{"POST /nodes/enroll", "POST /nodes/rotate"}

// refusal is the status and API problem detail a team member gets for a
// route that names another team's object (or none).
func refusal(route string) (int, string) {
	if slices.Contains(platformOnly, route) {
		return http.StatusForbidden, "your role does not allow this"
	}
	return http.StatusNotFound, "not found"
}

// portalExempt are portal POSTs that change no team object: signing in and
// out, and choosing the active team (which TestTenancyMatrix checks apart).
var portalExempt = []string{"POST /login", "POST /logout", "POST /team/switch"}

// exemptPortal reports whether a portal route needs no fixture: the exempt
// POSTs, the static files, mounted for every method, and the node agents'
// artifact route, which names no team object and takes no user credential
// (TestInternalArtifacts covers it).
func exemptPortal(route string) bool {
	_, path, _ := strings.Cut(route, " ")
	return slices.Contains(portalExempt, route) || path == "/static/*" || strings.HasPrefix(path, "/internal/")
}

// riskValues are the path parameters naming the risk team's objects (and the
// node of seedFleet that runs a risk replica), and ones naming nothing at all.
func (e *testEnv) riskValues(t testing.TB) (risk, missing map[string]string) {
	t.Helper()
	risk = map[string]string{"team": "risk", "model": "risk-model", "version": "v1", "endpoint": "risk-endpoint",
		"id": strconv.FormatInt(e.keyID(t, "risk-engineer"), 10), "email": "risk-engineer@example.com", "node": "gpu-mig-01", "resource": "H100-80GB",
		"rollout": strconv.FormatInt(e.riskRollout(t), 10), "action": "pause", "path": "model.safetensors", "tier": "critical",
		"replica": e.riskReplica(t), "webhook": strconv.FormatInt(e.riskWebhook, 10), "delivery": strconv.FormatInt(e.riskDelivery, 10),
		"upload": e.riskUpload(t), "sha256": matrixChunkDigest()}
	missing = map[string]string{"team": "no-such-team", "model": "no-such-model", "version": "v1", "endpoint": "no-such-endpoint",
		"id": "987654321", "email": "nobody@example.com", "node": "no-such-node", "resource": "no-such-gpu", "rollout": "987654321", "action": "pause", "path": "model.safetensors", "tier": "critical",
		"replica": "no-such-replica", "webhook": "987654321", "delivery": "987654321",
		"upload": "up_" + strings.Repeat("0", 32), "sha256": matrixChunkDigest()}
	return risk, missing
}

// riskRollout returns the id of an active rollout on risk-endpoint (v1 to
// v2), starting one the first time.
func (e *testEnv) riskRollout(t testing.TB) int64 {
	t.Helper()
	e.rolloutOnce.Do(func() {
		r, err := e.srv.Rollouts.Start(t.Context(), system, "risk-endpoint", rollout.Spec{Version: "v2"})
		if err != nil {
			t.Fatal(err)
		}
		e.rolloutID = r.ID
	})
	return e.rolloutID
}

// matrixChunk is the one chunk the matrix's upload requests send.
func matrixChunk() []byte { return safetensorsFile("matrix-chunk") }

func matrixChunkDigest() string {
	sum := sha256.Sum256(matrixChunk())
	return hex.EncodeToString(sum[:])
}

// riskUpload returns the id of an upload session of risk-model for v9,
// starting one the first time.
func (e *testEnv) riskUpload(t testing.TB) string {
	t.Helper()
	e.uploadOnce.Do(func() {
		man, _ := json.Marshal(map[string]string{"model.safetensors": matrixChunkDigest()})
		u, err := e.srv.Registry.CreateUpload(t.Context(), system, "risk-model", registry.VersionSpec{Name: "v9", Runtime: "onnxruntime"}, man)
		if err != nil {
			t.Fatal(err)
		}
		e.uploadID = u.ID
	})
	return e.uploadID
}

// keyID finds the id of one of the seeded keys by its name.
func (e *testEnv) keyID(t testing.TB, name string) int64 {
	t.Helper()
	var list struct {
		Items []struct {
			ID     int64  `json:"id"`
			Name   string `json:"name"`
			Prefix string `json:"prefix"`
		} `json:"items"`
	}
	e.getJSON(t, e.Keys["platform-admin"], "/api-keys?limit=500", &list)
	for _, k := range list.Items {
		if k.Name == name && strings.HasPrefix(e.Keys[name], k.Prefix) {
			return k.ID
		}
	}
	t.Fatalf("no key named %s", name)
	return 0
}

// riskData are strings that only the risk team's objects contain.
func (e *testEnv) riskData() []string {
	out := []string{"risk-model", "risk-endpoint", "risk-admin@example.com", "risk-engineer@example.com", "risk-viewer@example.com",
		"Rita Risk", "Ravi Engineer", "Vera Viewer"}
	for _, k := range []string{"risk-admin", "risk-engineer", "risk-viewer"} {
		out = append(out, e.Keys[k][:len("mpk_")+12]) // the public prefix
	}
	return out
}

// leaks returns the risk data in body that the caller did not send itself.
func (e *testEnv) leaks(path string, body []byte) []string {
	var out []string
	for _, s := range e.riskData() {
		if !strings.Contains(path, s) && bytes.Contains(body, []byte(s)) {
			out = append(out, s)
		}
	}
	return out
}

// snapshot is what the risk team's objects look like to a platform admin,
// minus last-used times, which reads by the test itself move.
func (e *testEnv) snapshot(t testing.TB) map[string]string {
	t.Helper()
	key := e.Keys["platform-admin"]
	out := map[string]string{}
	for _, path := range []string{"/endpoints/risk-endpoint", "/models/risk-model", "/models/risk-model/versions?limit=500",
		"/models/risk-model/versions/v1", "/teams/risk/members", "/teams?limit=500", "/models?limit=500", "/endpoints?limit=500"} {
		r := e.call(t, key, http.MethodGet, path, nil)
		out[path] = fmt.Sprintf("%d %s", r.status, r.body)
	}
	var keys struct {
		Items []map[string]any `json:"items"`
	}
	e.getJSON(t, key, "/api-keys?limit=500", &keys)
	for _, k := range keys.Items {
		delete(k, "last_used_at")
	}
	b, _ := json.Marshal(keys.Items)
	out["/api-keys"] = string(b)
	var audit struct {
		Items []struct {
			ID     int64  `json:"id"`
			Action string `json:"action"`
		} `json:"items"`
	}
	e.getJSON(t, key, "/audit?limit=500", &audit)
	b, _ = json.Marshal(audit.Items)
	out["/audit"] = string(b)
	return out
}

func (e *testEnv) unchanged(t testing.TB, before map[string]string) {
	t.Helper()
	after := e.snapshot(t)
	for path, b := range before {
		if after[path] != b {
			t.Errorf("GET %s changed:\n before %s\n after  %s", path, b, after[path])
		}
	}
}

// TestTenancyMatrix calls every route that names an object with another
// team's admin key (404, no byte of the other team's data, same answer as for
// an object that does not exist), a viewer key of the owning team (403 on
// every write) and a finance key, through the API and the portal, and checks
// afterwards that nothing changed.
func TestTenancyMatrix(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	e.seedFleet(t)
	h := e.ts.Config.Handler
	risk, missing := e.riskValues(t)
	before := e.snapshot(t)
	api := apiFixtures()
	pf := portalFixtures()

	t.Run("covers every route", func(t *testing.T) {
		var need []string
		for _, r := range apiRoutes(t, h) {
			method, _, _ := strings.Cut(r, " ")
			if slices.Contains(agentOnly, r) {
				continue
			}
			if hasParam(r) || isWrite(method) {
				need = append(need, r)
				if _, ok := api[r]; !ok {
					t.Errorf("API route %s has no entry in apiFixtures: add a valid request for it", r)
				}
			}
		}
		// The upload route is a plain chi route outside huma; it must be in
		// the walked tree, not only in the OpenAPI document.
		if !slices.Contains(need, "POST /models/{model}/versions") {
			t.Errorf("walked routes %v lack POST /models/{model}/versions", need)
		}
		for r := range api {
			if !slices.Contains(need, r) {
				t.Errorf("apiFixtures entry %s is not a route with a parameter or a write", r)
			}
		}
		var pneed []string
		for _, r := range portalRouteList(t, h) {
			method, _, _ := strings.Cut(r, " ")
			if (hasParam(r) || isWrite(method)) && !exemptPortal(r) {
				pneed = append(pneed, r)
				if _, ok := pf[r]; !ok {
					t.Errorf("portal route %s has no entry in portalFixtures: add a valid request for it", r)
				}
			}
		}
		for r := range pf {
			if !slices.Contains(pneed, r) {
				t.Errorf("portalFixtures entry %s is not a portal route with a parameter or a write", r)
			}
		}
	})

	t.Run("cases", func(t *testing.T) {
		for _, route := range apiRoutes(t, h) {
			method, pattern, _ := strings.Cut(route, " ")
			for i, p := range api[route] {
				name := fmt.Sprintf("%s/%d", route, i)
				if hasParam(route) {
					t.Run("api other team/"+name, func(t *testing.T) {
						t.Parallel()
						path := fill(t, pattern, risk)
						got := e.call(t, e.Keys["search-admin"], method, path, p)
						what := "search admin " + method + " " + path
						status, detail := refusal(route)
						doc := problem(t, what, got, status)
						if doc.Detail != detail || len(doc.Errors) != 0 {
							t.Errorf("%s = %s; want the generic %q problem", what, got, detail)
						}
						if l := e.leaks(path, got.body); len(l) > 0 {
							t.Errorf("%s leaks %q: %s", what, l, got)
						}
						none := e.call(t, e.Keys["search-admin"], method, fill(t, pattern, missing), p)
						if none.status != got.status || !bytes.Equal(none.body, got.body) {
							t.Errorf("%s = %d %s; for an object that does not exist it is %d %s; want the same", what, got.status, got, none.status, none)
						}
					})
				}
				if isWrite(method) {
					t.Run("api viewer/"+name, func(t *testing.T) {
						t.Parallel()
						path := fill(t, pattern, risk)
						got := e.call(t, e.Keys["risk-viewer"], method, path, p)
						problem(t, "risk viewer "+method+" "+path, got, http.StatusForbidden)
					})
					t.Run("api finance/"+name, func(t *testing.T) {
						t.Parallel()
						// Finance is org-wide but belongs to no team, so team
						// objects are invisible to it: a path naming one is a
						// 404, a body naming the risk team is a 404 (no such
						// team for you), a body naming the risk model is a 400
						// on that field (as for a model that does not exist),
						// and creating a team or a cost rate needs a platform
						// admin: 403.
						want := map[string]int{"POST /teams": http.StatusForbidden, "POST /api-keys": http.StatusNotFound,
							"POST /models": http.StatusNotFound, "POST /endpoints": http.StatusBadRequest, "POST /cost-rates": http.StatusForbidden,
							"POST /budgets": http.StatusNotFound, "POST /join-tokens": http.StatusForbidden, "POST /webhooks": http.StatusNotFound,
							"POST /graphs": http.StatusNotFound}
						status, ok := want[route]
						if slices.Contains(platformOnly, route) {
							status, ok = http.StatusForbidden, true
						}
						if !ok {
							if !hasParam(route) {
								t.Fatalf("no finance expectation for %s", route)
							}
							status = http.StatusNotFound
						}
						path := fill(t, pattern, risk)
						got := e.call(t, e.Keys["finance"], method, path, p)
						doc := problem(t, "finance "+method+" "+path, got, status)
						if route == "POST /endpoints" && !doc.names("body.model") {
							t.Errorf("finance POST /endpoints errors at %v; want body.model", doc.locations())
						}
						if l := e.leaks(path, got.body); len(l) > 0 {
							t.Errorf("finance %s %s leaks %q: %s", method, path, l, got)
						}
					})
				}
				if method == http.MethodGet {
					t.Run("api viewer reads/"+name, func(t *testing.T) {
						t.Parallel()
						path := fill(t, pattern, risk)
						if slices.Contains(platformOnly, route) {
							for _, key := range []string{"risk-viewer", "risk-admin", "finance"} {
								problem(t, key+" GET "+path, e.call(t, e.Keys[key], method, path, nil), http.StatusForbidden)
							}
							if got := e.call(t, e.Keys["platform-admin"], method, path, nil); got.status != http.StatusOK {
								t.Errorf("platform admin GET %s = %d %s; want 200", path, got.status, got)
							}
							none := fill(t, pattern, missing)
							problem(t, "platform admin GET "+none, e.call(t, e.Keys["platform-admin"], method, none, nil), http.StatusNotFound)
							return
						}
						want := http.StatusOK
						if slices.Contains(nodeReads, route) {
							want = http.StatusServiceUnavailable
						}
						if slices.Contains(streams, route) {
							path += "?follow=0"
						}
						if got := e.call(t, e.Keys["risk-viewer"], method, path, nil); got.status != want {
							t.Errorf("risk viewer GET %s = %d %s; want %d", path, got.status, got, want)
						}
						got := e.call(t, e.Keys["finance"], method, path, nil)
						problem(t, "finance GET "+path, got, http.StatusNotFound)
					})
				}
			}
		}

		t.Run("api other team lists", func(t *testing.T) {
			t.Parallel()
			for _, path := range []string{"/endpoints", "/models", "/teams", "/api-keys", "/audit", "/me", "/teams/search/members"} {
				got := e.call(t, e.Keys["search-admin"], http.MethodGet, path, nil)
				if got.status != http.StatusOK {
					t.Errorf("search admin GET %s = %d %s; want 200", path, got.status, got)
				}
				if l := e.leaks(path, got.body); len(l) > 0 || bytes.Contains(got.body, []byte(`"risk"`)) {
					t.Errorf("search admin GET %s shows risk data %q: %s", path, l, got)
				}
			}
		})

		t.Run("api other team in body", func(t *testing.T) {
			t.Parallel()
			// Naming another team's object in a body answers as if it did
			// not exist: compare with a name that exists nowhere.
			for _, c := range []struct {
				path        string
				risk, other map[string]any
			}{
				{"/models", map[string]any{"team": "risk", "name": "x-model", "task": "regression"},
					map[string]any{"team": "no-such-team", "name": "x-model", "task": "regression"}},
				{"/api-keys", map[string]any{"team": "risk", "name": "x", "role": "admin"},
					map[string]any{"team": "no-such-team", "name": "x", "role": "admin"}},
				{"/endpoints", map[string]any{"name": "x-endpoint", "model": "risk-model", "version": "v1", "runtime": "onnxruntime",
					"instance_profile": "mig-1g.10gb", "min_replicas": 1, "max_replicas": 1, "tier": "standard"},
					map[string]any{"name": "x-endpoint", "model": "no-such-model", "version": "v1", "runtime": "onnxruntime",
						"instance_profile": "mig-1g.10gb", "min_replicas": 1, "max_replicas": 1, "tier": "standard"}},
			} {
				got := e.call(t, e.Keys["search-admin"], http.MethodPost, c.path, jsonPayload(c.risk))
				none := e.call(t, e.Keys["search-admin"], http.MethodPost, c.path, jsonPayload(c.other))
				if got.status < 400 || got.status >= 500 {
					t.Errorf("search admin POST %s naming risk = %d %s; want a 4xx", c.path, got.status, got)
				}
				norm := bytes.ReplaceAll(none.body, []byte("no-such-model"), []byte("risk-model"))
				norm = bytes.ReplaceAll(norm, []byte("no-such-team"), []byte("risk"))
				if got.status != none.status || !bytes.Equal(got.body, norm) {
					t.Errorf("search admin POST %s naming risk = %d %s; naming nothing = %d %s; want the same", c.path, got.status, got, none.status, none)
				}
			}
		})

		searchAdmin := e.signIn(t, "search-admin@example.com")
		riskViewer := e.signIn(t, "risk-viewer@example.com")
		for _, route := range portalRouteList(t, h) {
			method, pattern, _ := strings.Cut(route, " ")
			mk, ok := pf[route]
			if !ok {
				continue
			}
			body := func(s session, v map[string]string) *payload {
				if mk == nil {
					return nil
				}
				return mk(v, s.csrf)
			}
			if hasParam(route) {
				t.Run("portal other team/"+route, func(t *testing.T) {
					t.Parallel()
					path := fill(t, pattern, risk)
					got := e.portal(t, searchAdmin, method, path, body(searchAdmin, risk))
					if status, _ := refusal(route); got.status != status {
						t.Errorf("search admin %s %s = %d; want %d\n%s", method, path, got.status, status, got)
					}
					if l := e.leaks(path, got.body); len(l) > 0 || bytes.Contains(got.body, []byte(">risk<")) {
						t.Errorf("search admin %s %s leaks %q:\n%s", method, path, l, got)
					}
					none := e.portal(t, searchAdmin, method, fill(t, pattern, missing), body(searchAdmin, missing))
					if none.status != got.status || !bytes.Equal(none.body, got.body) {
						t.Errorf("search admin %s %s = %d, and for an object that does not exist %d; want the same page\n%s\n----\n%s",
							method, path, got.status, none.status, got, none)
					}
				})
			}
			if isWrite(method) {
				t.Run("portal viewer/"+route, func(t *testing.T) {
					t.Parallel()
					path := fill(t, pattern, risk)
					got := e.portal(t, riskViewer, method, path, body(riskViewer, risk))
					if got.status != http.StatusForbidden || bytes.Contains(got.body, []byte("did not come from this site")) {
						t.Errorf("risk viewer %s %s = %d; want 403 for the role, not for CSRF\n%s", method, path, got.status, got)
					}
				})
			}
		}

		t.Run("portal switch to other team", func(t *testing.T) {
			t.Parallel()
			got := e.portal(t, searchAdmin, http.MethodPost, "/team/switch", formPayload(url.Values{"csrf": {searchAdmin.csrf}, "team": {"risk"}}))
			if got.status != http.StatusNotFound {
				t.Errorf("search admin switching to team risk = %d; want 404\n%s", got.status, got)
			}
			if c := got.header.Get("Set-Cookie"); strings.Contains(c, TeamCookie+"=risk") {
				t.Errorf("search admin switching to team risk set %q", c)
			}
		})
	})

	e.unchanged(t, before)
}

// riskReplica names a replica of risk-endpoint (seedFleet placed it).
func (e *testEnv) riskReplica(t testing.TB) string {
	t.Helper()
	reps := e.replicas(t, "risk-endpoint")
	if len(reps) == 0 {
		t.Fatal("risk-endpoint has no replica: seedFleet first")
	}
	return reps[0].Name
}
