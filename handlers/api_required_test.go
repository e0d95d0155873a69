package handlers

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// requiredCall is one operation called with a body holding only the
// fields its schema requires.
type requiredCall struct {
	op, key, method, path string
	body                  map[string]any
	// extra are fields sent beyond the required ones, with why.
	extra map[string]string
	// want is the status expected; 0 is any 2xx.
	want int
}

// TestEveryInputTypeCreatesWithOnlyItsRequiredFields sends every operation
// whose JSON body has required fields a body of exactly those fields (the
// test checks the bodies against the served schemas) and wants it
// accepted: a field huma marks required though it has a default, such as
// an endpoint's tier, fails here. An operation added with a body fails the
// test until it joins the table.
func TestEveryInputTypeCreatesWithOnlyItsRequiredFields(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	r := e.call(t, "", http.MethodGet, "/openapi.json", nil)
	var doc struct {
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Schemas map[string]*reqSchema `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatal(err)
	}
	bodies := map[string]*reqSchema{} // operationId → JSON body schema
	for _, item := range doc.Paths {
		for _, raw := range item {
			var op struct {
				OperationID string `json:"operationId"`
				RequestBody *struct {
					Content map[string]struct {
						Schema *reqSchema `json:"schema"`
					} `json:"content"`
				} `json:"requestBody"`
			}
			if json.Unmarshal(raw, &op) != nil || op.RequestBody == nil {
				continue
			}
			if c, ok := op.RequestBody.Content["application/json"]; ok {
				bodies[op.OperationID] = c.Schema
			}
		}
	}

	admin, risk := e.Keys["platform-admin"], e.Keys["risk-admin"]
	external := map[string]string{"artifact_uri": "the JSON variant registers an artifact kept elsewhere", "format": "the JSON variant names the artifact's format"}
	manifest := json.RawMessage(`{"model.safetensors":"` + strings.Repeat("ab", 32) + `"}`)
	calls := []requiredCall{
		{op: "teams-create", key: admin, method: "POST", path: "/teams", body: map[string]any{"name": "payments"}},
		{op: "team-members-set", key: risk, method: "POST", path: "/teams/risk/members", body: map[string]any{"email": "search-admin@example.com", "role": "viewer"}},
		{op: "api-keys-create", key: admin, method: "POST", path: "/api-keys", body: map[string]any{"name": "ci", "role": "finance"}},
		{op: "models-create", key: risk, method: "POST", path: "/models", body: map[string]any{"name": "scorer", "task": "regression"}},
		{op: "versions-register", key: risk, method: "POST", path: "/models/scorer/versions", extra: external,
			body: map[string]any{"metadata": map[string]any{"name": "v1", "runtime": "onnxruntime", "artifact_uri": "s3://b/v1", "format": "safetensors"}, "manifest": manifest}},
		{op: "versions-register", key: risk, method: "POST", path: "/models/scorer/versions", extra: external,
			body: map[string]any{"metadata": map[string]any{"name": "v2", "runtime": "onnxruntime", "artifact_uri": "s3://b/v2", "format": "safetensors"}, "manifest": manifest}},
		{op: "endpoints-create", key: risk, method: "POST", path: "/endpoints", body: map[string]any{"name": "scorer", "model": "scorer", "version": "v1"}},
		{op: "webhook-create", key: risk, method: "POST", path: "/webhooks", body: map[string]any{"team": "risk", "url": "https://hooks.example.com/ci", "event_types": []string{"*"}}},
		{op: "endpoint-update", key: risk, method: "PUT", path: "/endpoints/scorer", body: map[string]any{}},
		{op: "endpoint-traffic-set", key: risk, method: "PUT", path: "/endpoints/scorer/traffic",
			body: map[string]any{"weights": []any{map[string]any{"version": "v1", "weight": 50}, map[string]any{"version": "v2", "weight": 50}}}},
		{op: "endpoint-experiment-set", key: risk, method: "PUT", path: "/endpoints/scorer/experiment",
			body: map[string]any{"name": "ab", "arms": []any{map[string]any{"version": "v1", "share": 50}, map[string]any{"version": "v2", "share": 50}}}},
		{op: "endpoint-experiment-end", key: risk, method: "DELETE", path: "/endpoints/scorer/experiment"},
		{op: "endpoint-traffic-set", key: risk, method: "PUT", path: "/endpoints/scorer/traffic",
			body: map[string]any{"weights": []any{map[string]any{"version": "v1", "weight": 100}}}},
		{op: "graphs-create", key: risk, method: "POST", path: "/graphs", extra: map[string]string{"endpoint": "a call node names the endpoint it calls"},
			body: map[string]any{"name": "scorer-graph", "graph": map[string]any{"entry": "a", "nodes": []any{map[string]any{"id": "a", "type": "call", "endpoint": "scorer"}}}}},
		{op: "graph-version-create", key: risk, method: "POST", path: "/endpoints/scorer-graph/graph/versions", extra: map[string]string{"endpoint": "a call node names the endpoint it calls"},
			body: map[string]any{"version": "v2", "graph": map[string]any{"entry": "b", "nodes": []any{map[string]any{"id": "b", "type": "call", "endpoint": "scorer"}}}}},
		{op: "rollouts-start", key: risk, method: "POST", path: "/endpoints/scorer/rollouts", body: map[string]any{"version": "v2"}},
		{op: "quota-set", key: admin, method: "POST", path: "/quotas", body: map[string]any{"team": "risk", "resource": "cpu", "amount": 64}},
		{op: "cost-rate-create", key: admin, method: "POST", path: "/cost-rates",
			body: map[string]any{"gpu_type": "A100-80GB", "profile": "full", "uusd_per_hour": 2_000_000, "effective_from": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}},
		{op: "budget-set", key: risk, method: "POST", path: "/budgets", body: map[string]any{"team": "risk", "monthly_uusd": 1_000_000}},
		{op: "node-join-token-create", key: admin, method: "POST", path: "/join-tokens", body: map[string]any{"node": "gpu-9", "host": "10.0.0.9"}},
	}
	autoscale := requiredCall{op: "endpoint-autoscaling-set", key: risk, method: "PUT", path: "/endpoints/scorer/autoscaling"}
	enroll := requiredCall{op: "node-enroll", method: "POST", path: "/nodes/enroll"}

	called := map[string]bool{}
	do := func(c requiredCall) []byte {
		t.Helper()
		called[c.op] = true
		if s := bodies[c.op]; s != nil && c.body != nil {
			for _, err := range s.onlyRequired(doc.Components.Schemas, "body", c.body, c.extra) {
				t.Errorf("%s: %v", c.op, err)
			}
		}
		var p *payload
		if c.body != nil {
			p = jsonPayload(c.body)
		}
		got := e.call(t, c.key, c.method, c.path, p)
		if c.want == 0 && (got.status < 200 || got.status > 299) || c.want != 0 && got.status != c.want {
			t.Errorf("%s %s with only its required fields = %d %s; want %s", c.method, c.path, got.status, got, wantText(c.want))
		}
		return got.body
	}
	var joinToken string
	for _, c := range calls {
		b := do(c)
		if c.op == "node-join-token-create" {
			var tok struct {
				Token string `json:"token"`
			}
			_ = json.Unmarshal(b, &tok)
			joinToken = tok.Token
		}
	}
	// Autoscaling takes the whole policy: every field is required (there
	// are no defaults to fill) but scale_down_basis, added later and
	// optional so that older clients' bodies still pass, so the body is the
	// one GET shows without it.
	var as struct {
		Policy map[string]any `json:"policy"`
	}
	if err := json.Unmarshal(e.call(t, risk, "GET", "/endpoints/scorer/autoscaling", nil).body, &as); err != nil {
		t.Fatal(err)
	}
	delete(as.Policy, "scale_down_basis")
	autoscale.body = as.Policy
	do(autoscale)
	enroll.body = map[string]any{"token": joinToken}
	do(enroll)
	// A resumable upload: the session, its one chunk, the completion.
	chunk := safetensorsFile("required")
	sum := sha256.Sum256(chunk)
	digest := hex.EncodeToString(sum[:])
	var up struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(do(requiredCall{op: "uploads-create", key: risk, method: "POST", path: "/models/scorer/uploads",
		body: map[string]any{"metadata": map[string]any{"name": "v3", "runtime": "onnxruntime"}, "manifest": map[string]any{"model.safetensors": digest}}}), &up)
	if got := e.call(t, risk, "PUT", "/uploads/"+up.ID+"/chunks/"+digest, &payload{contentType: "application/octet-stream", body: chunk}); got.status != http.StatusCreated {
		t.Errorf("PUT chunk = %d %s", got.status, got)
	}
	do(requiredCall{op: "upload-complete", key: risk, method: "POST", path: "/uploads/" + up.ID + "/complete",
		body: map[string]any{"files": map[string]any{"model.safetensors": []string{digest}}}})

	for _, op := range slices.Sorted(maps.Keys(bodies)) {
		if !called[op] && bodies[op].requiresAny(doc.Components.Schemas) {
			t.Errorf("operation %s has a body with required fields and is not in this test's table", op)
		}
	}
}

func wantText(want int) string {
	if want == 0 {
		return "2xx"
	}
	return fmt.Sprint(want)
}

// reqSchema is the part of a JSON schema the test reads.
type reqSchema struct {
	Ref        string                `json:"$ref"`
	Type       any                   `json:"type"`
	Required   []string              `json:"required"`
	Properties map[string]*reqSchema `json:"properties"`
	Items      *reqSchema            `json:"items"`
}

func (s *reqSchema) resolve(all map[string]*reqSchema) *reqSchema {
	for s != nil && s.Ref != "" {
		s = all[strings.TrimPrefix(s.Ref, "#/components/schemas/")]
	}
	return s
}

func (s *reqSchema) requiresAny(all map[string]*reqSchema) bool {
	return len(s.resolve(all).Required) > 0
}

// onlyRequired reports where v holds a field s does not require (beyond
// extra, top level or nested) or lacks one it does.
func (s *reqSchema) onlyRequired(all map[string]*reqSchema, at string, v any, extra map[string]string) []error {
	s = s.resolve(all)
	if s == nil {
		return nil
	}
	var errs []error
	switch v := v.(type) {
	case map[string]any:
		if s.Properties == nil {
			return nil // free-form object (a manifest)
		}
		for _, r := range s.Required {
			if _, ok := v[r]; !ok {
				errs = append(errs, fmt.Errorf("%s.%s is required but not sent", at, r))
			}
		}
		for k, sub := range v {
			if !slices.Contains(s.Required, k) {
				if _, ok := extra[k]; !ok {
					errs = append(errs, fmt.Errorf("%s.%s is sent but not required", at, k))
				}
			}
			if p := s.Properties[k]; p != nil {
				errs = append(errs, p.onlyRequired(all, at+"."+k, sub, extra)...)
			}
		}
	case []any:
		for i, x := range v {
			errs = append(errs, s.Items.onlyRequired(all, fmt.Sprintf("%s[%d]", at, i), x, extra)...)
		}
	}
	return errs
}
