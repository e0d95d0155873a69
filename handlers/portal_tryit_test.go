package handlers

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/registry"
)

func TestPortalTryIt(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	u := portalSignIn(t, e, "risk-engineer@example.com")
	doc := u.page("/endpoints/risk-endpoint")
	portalCheckMarkup(t, "endpoint page", doc)
	sec := doc.Find("section#try-it")
	if got := sec.Find("textarea#try-body").Text(); got != `{"instances":[{}]}` {
		t.Errorf("example body %q, want one empty instance for a schema without properties", got)
	}
	if got := sec.Find("#try-curl").Text(); !strings.Contains(got, `"$MP_GATEWAY/v1/endpoints/risk-endpoint/predict"`) || !strings.Contains(got, "$MP_API_KEY") {
		t.Errorf("curl command %q, want the gateway and key placeholders", got)
	}
	if sec.Find("button").Length() != 1 {
		t.Errorf("no Send button for a writer with a gateway key")
	}

	r := u.post("/endpoints/risk-endpoint/try", u.form("body", `{"instances": [{"x": 1}]}`))
	if r.StatusCode != http.StatusOK {
		t.Fatalf("POST try = %d, want 200\n%s", r.StatusCode, r.Body)
	}
	var echo map[string]string
	if err := json.Unmarshal([]byte(r.doc(t).Find("#try-response").Text()), &echo); err != nil {
		t.Fatalf("response is not the gateway's answer: %v\n%s", err, r.Body)
	}
	if echo["path"] != "/v1/endpoints/risk-endpoint/predict" || echo["authorization"] != "Bearer "+testGatewayKey || echo["body"] != `{"instances": [{"x": 1}]}` {
		t.Errorf("gateway got %v, want the body on predict with the portal's key", echo)
	}
	if got := r.doc(t).Find("#try-status").Text(); got != "200" {
		t.Errorf("status shown %q, want 200", got)
	}
	if r := u.post("/endpoints/risk-endpoint/try", u.form("body", `{"instances": [`)); r.StatusCode != http.StatusUnprocessableEntity ||
		r.doc(t).Find("#try-error").Length() != 1 {
		t.Errorf("POST try with bad JSON = %d, want 422 with an error\n%s", r.StatusCode, r.Body)
	}

	v := portalSignIn(t, e, "risk-viewer@example.com")
	if n := v.page("/endpoints/risk-endpoint").Find("#try-it button").Length(); n != 0 {
		t.Errorf("viewer sees %d Send buttons, want 0", n)
	}
	if r := v.post("/endpoints/risk-endpoint/try", v.form("body", `{}`)); r.StatusCode != http.StatusForbidden {
		t.Errorf("viewer POST try = %d, want 403", r.StatusCode)
	}
	s := portalSignIn(t, e, "search-admin@example.com")
	if r := s.post("/endpoints/risk-endpoint/try", s.form("body", `{}`)); r.StatusCode != http.StatusNotFound {
		t.Errorf("other team POST try = %d, want 404", r.StatusCode)
	}
}

func TestPortalTryItUnconfigured(t *testing.T) {
	t.Parallel()
	e := newTestEnvWith(t, envOptions{Deps: func(d *Deps, _ *pgxpool.Pool) { d.GatewayURL, d.GatewayKey = "", "" }})
	u := portalSignIn(t, e, "risk-engineer@example.com")
	sec := u.page("/endpoints/risk-endpoint").Find("section#try-it")
	if sec.Find("#try-unconfigured").Length() != 1 || sec.Find("button").Length() != 0 || sec.Find("#try-curl").Length() != 1 {
		t.Errorf("unconfigured Try it: want the note and the curl command, no Send\n%s", portalText(sec))
	}
	if r := u.post("/endpoints/risk-endpoint/try", u.form("body", `{}`)); r.StatusCode != http.StatusConflict {
		t.Errorf("POST try without a gateway = %d, want 409", r.StatusCode)
	}
}

func TestExampleBody(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		m    registry.Model
		want string
	}{
		{"llm", registry.Model{Task: registry.TaskLLM}, `{"messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 64}`},
		{"properties", registry.Model{Task: "classification", InputSchema: json.RawMessage(
			`{"type":"object","properties":{"amount":{"type":"number"},"country":{"type":"string"},"flags":{"type":["array","null"]},"vip":{"type":"boolean"}}}`)},
			`{"instances":[{"amount":0,"country":"","flags":[],"vip":false}]}`},
		{"no schema", registry.Model{Task: "regression"}, `{"instances":[{}]}`},
	}
	for _, tt := range tests {
		if got := exampleBody(tt.m); got != tt.want {
			t.Errorf("%s: exampleBody = %s, want %s", tt.name, got, tt.want)
		}
	}
}
