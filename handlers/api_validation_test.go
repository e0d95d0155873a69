package handlers

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"modelplane/auth"
	"modelplane/gguf"
	"modelplane/llm"
	"modelplane/registry"
)

// TestInvalidVersionRefusedByRoutes: a version validation found invalid
// cannot take traffic or be rolled out, and the 400 says why; GET shows
// its status and reason.
func TestInvalidVersionRefusedByRoutes(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	const reason = "onnx runtime refused model.onnx: No Op registered for FrobnicateRows with domain_version of 13"
	// The validator's outcome, as it writes it (package versioncheck runs
	// the real runtime; here the state is what matters).
	if _, err := e.pool.Exec(t.Context(), `
		WITH v AS (SELECT v.id, v.team_id FROM model_versions v JOIN models m ON m.id = v.model_id WHERE m.name = 'risk-model' AND v.name = 'v2')
		INSERT INTO model_version_validations (version_id, team_id, state, reason) SELECT id, team_id, 'invalid', $1 FROM v`, reason); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(t.Context(), `UPDATE model_versions SET status = 'invalid' WHERE name = 'v2' AND model_id = (SELECT id FROM models WHERE name = 'risk-model')`); err != nil {
		t.Fatal(err)
	}
	key := e.Keys["risk-engineer"]
	for _, c := range []struct {
		what, method, path string
		body               any
		field              string
	}{
		{"traffic split", "PUT", "/endpoints/risk-endpoint/traffic", map[string]any{"weights": []map[string]any{{"version": "v1", "weight": 90}, {"version": "v2", "weight": 10}}}, "weights[1].version"},
		{"rollout start", "POST", "/endpoints/risk-endpoint/rollouts", map[string]any{"version": "v2"}, "version"},
	} {
		status, body := e.api(key, c.method, c.path, c.body)
		var p problemDoc
		_ = json.Unmarshal(body, &p)
		if status != 400 || len(p.Errors) != 1 || !strings.HasSuffix(p.Errors[0].Location, c.field) || !strings.Contains(p.Errors[0].Message, "FrobnicateRows") {
			t.Errorf("%s = %d %s; want 400 on %s with the reason", c.what, status, body, c.field)
		}
	}
	status, body := e.api(key, "GET", "/models/risk-model/versions/v2", nil)
	var v struct {
		Status     string `json:"status"`
		Validation struct {
			State, Reason string
		} `json:"validation"`
	}
	if err := json.Unmarshal(body, &v); err != nil || status != 200 || v.Status != "invalid" || v.Validation.Reason != reason {
		t.Errorf("GET version = %d %s; want status invalid with the reason", status, body)
	}
	// The portal's version page shows the status and the reason.
	doc := portalSignIn(t, e, "risk-engineer@example.com").page("/models/risk-model/versions/v2")
	if got := portalText(doc.Find("#version-status")); got != "invalid" {
		t.Errorf("version page status = %q, want invalid", got)
	}
	if got := portalText(doc.Find("#validation-reason")); !strings.Contains(got, "FrobnicateRows") {
		t.Errorf("version page reason = %q, want the runtime's message", got)
	}
	if doc.Find("#serving-features tr").Length() != 2 { // the header and feature x
		t.Errorf("version page serving features: %d rows, want the header and x", doc.Find("#serving-features tr").Length())
	}
}

// TestBadServingMetadataNamesTheField: registration refuses serving
// metadata that does not fit the model with a 400 naming the field.
func TestBadServingMetadataNamesTheField(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	key := e.Keys["risk-engineer"]
	for _, c := range []struct {
		serving string
		field   string
	}{
		{`{"features":[{"name":"x","categories":["a","b"],"encoding":"hashed"}]}`, "metadata.serving.features[0].encoding"},
		{`{"features":[{"name":"x"}],"output":{"threshold":1.5}}`, "metadata.serving.output.threshold"},
		{`{"features":[{"name":"x"}],"sample_inputs":[{"y":1}]}`, "metadata.serving.sample_inputs[0].x"},
	} {
		body := `{"metadata":{"name":"v9","runtime":"xgboost","format":"xgboost-json","artifact_uri":"s3://m/v9","serving":` + c.serving + `},` +
			`"manifest":{"model.json":"` + strings.Repeat("ab", 32) + `"}}`
		status, out := e.api(key, "POST", "/models/risk-model/versions", body)
		var p problemDoc
		_ = json.Unmarshal(out, &p)
		if status != 400 || !p.names(c.field) && !strings.Contains(string(out), c.field) {
			t.Errorf("serving %s = %d %s; want 400 naming %s", c.serving, status, out, c.field)
		}
	}
}

// TestVersionMemoryNeedShown: the memory need validation computed from a
// GGUF file is in the version's API response and on its portal page, with
// the memory its replicas are placed with (the larger of the need and the
// declared memory_mb).
func TestVersionMemoryNeedShown(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	ctx := t.Context()
	system := &auth.Principal{Name: "root@example.com", Via: "session", PlatformRole: auth.RolePlatformAdmin}
	if _, err := e.srv.Registry.CreateModel(ctx, system, registry.ModelSpec{Team: "risk", Name: "risk-chat", Task: registry.TaskLLM}); err != nil {
		t.Fatal(err)
	}
	var demo bytes.Buffer
	if err := llm.WriteDemo(&demo, gguf.F16); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"model.gguf": demo.Bytes()}
	if _, err := e.srv.Registry.RegisterVersion(ctx, system, "risk-chat", registry.VersionSpec{Name: "c1", Runtime: registry.BuiltinLLM,
		Resources: registry.Resources{CPUCores: 1, MemoryMB: 16}}, manifestOf(files), filesOf(files)); err != nil {
		t.Fatal(err)
	}
	// The need as the validator writes it (package versioncheck computes it
	// from the file; here the showing is what matters).
	if _, err := e.pool.Exec(ctx, `UPDATE model_versions SET memory_need_mb = 40 WHERE name = 'c1'
		AND model_id = (SELECT id FROM models WHERE name = 'risk-chat')`); err != nil {
		t.Fatal(err)
	}
	status, body := e.api(e.Keys["risk-viewer"], "GET", "/models/risk-chat/versions/c1", nil)
	var v struct {
		MemoryNeedMB int `json:"memory_need_mb"`
		Resources    struct {
			MemoryMB int `json:"memory_mb"`
		} `json:"resources"`
	}
	if err := json.Unmarshal(body, &v); err != nil || status != 200 || v.MemoryNeedMB != 40 || v.Resources.MemoryMB != 16 {
		t.Errorf("GET version = %d %s; want memory_need_mb 40 beside the declared memory_mb 16", status, body)
	}
	doc := portalSignIn(t, e, "risk-engineer@example.com").page("/models/risk-chat/versions/c1")
	const want = "Memory: the model needs 40 MiB (weights as float32 and the K/V cache, computed from the GGUF file); " +
		"a replica is placed with 40 MiB (the larger of the need and resources.memory_mb, 16)."
	if got := portalText(doc.Find("#memory-need")); got != want {
		t.Errorf("version page memory = %q, want %q", got, want)
	}
}
