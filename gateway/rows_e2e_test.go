package gateway_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"modelplane/demo/fraud"
	"modelplane/gateway"
	"modelplane/internal/wait"
	"modelplane/runtime"
	"modelplane/runtime/xgboost"
	"modelplane/serveapi"
)

// TestRowInstancesScoredAsObjects serves the demo's real XGBoost version
// with the built-in runtime behind a gateway that validates the model's
// input schema, and sends the same payments as objects and as rows (the
// feature values in feature_names order, as KServe V1, TF Serving and
// SageMaker clients send them): the scores are the same, and a row is
// checked as the object it stands for.
func TestRowInstancesScoredAsObjects(t *testing.T) {
	t.Parallel()
	vs, err := fraud.Versions(fraud.DefaultSeed)
	if err != nil {
		t.Fatal(err)
	}
	v23 := vs[0]
	dir := t.TempDir()
	cfg := v23.Serving
	cfg.Model, cfg.Version = "fraud-scoring", v23.Name
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, serveapi.ConfigFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, v23.File), v23.Data, 0o600); err != nil {
		t.Fatal(err)
	}
	rt, err := runtime.Open(dir, map[string]runtime.Opener{"xgboost-json": xgboost.Load}, runtime.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Warm(t.Context()); err != nil {
		t.Fatal(err)
	}
	replicaSrv := httptest.NewServer(rt.Handler())
	t.Cleanup(replicaSrv.Close)

	e := newEnv(t)
	r := route("fraud-scoring", "risk", "classification", 1, ver(v23.Name, 100, strings.TrimPrefix(replicaSrv.URL, "http://")))
	r.InputSchema, r.FeatureNames = fraud.InputSchema(), fraud.FeatureNames()
	e.putRoute(t, r)
	key := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")

	payments := []map[string]any{
		{"amount": 42.5, "merchant_category": "grocery", "country": "US", "hour_of_day": 14, "account_age_days": 800, "distance_km": 3.2},
		{"amount": 1250, "merchant_category": "electronics", "country": "NG", "hour_of_day": 3, "account_age_days": 4, "distance_km": 9500},
	}
	rows := make([][]any, len(payments))
	for i, p := range payments {
		for _, name := range fraud.FeatureNames() {
			rows[i] = append(rows[i], p[name])
		}
	}
	predict := func(instances any) []json.RawMessage {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"instances": instances})
		res := call(t, g.url, predictPath("fraud-scoring"), key, string(body))
		if res.status != http.StatusOK {
			t.Fatalf("predict %s = %d %s; want 200", body, res.status, res.body)
		}
		var out struct {
			Predictions []json.RawMessage `json:"predictions"`
		}
		if err := json.Unmarshal(res.body, &out); err != nil || len(out.Predictions) != len(payments) {
			t.Fatalf("predict %s answered %s (%v); want %d predictions", body, res.body, err, len(payments))
		}
		return out.Predictions
	}
	asObjects, asRows := predict(payments), predict(rows)
	for i := range payments {
		if string(asObjects[i]) != string(asRows[i]) {
			t.Errorf("payment %d: as an object %s, as a row %s; want the same", i, asObjects[i], asRows[i])
		}
	}
	if string(asObjects[0]) == string(asObjects[1]) {
		t.Errorf("both payments scored %s; the model should tell them apart", asObjects[0])
	}
	mixed := predict([]any{payments[0], rows[1]})
	if string(mixed[1]) != string(asObjects[1]) {
		t.Errorf("a row beside an object scored %s; want %s", mixed[1], asObjects[1])
	}

	for _, tc := range []struct {
		name, body, detail string
	}{
		{"short row", `{"instances":[[42.5,"grocery"]]}`, "instances/0: a row must hold 6 values"},
		{"bad value in a row names the feature", `{"instances":[[42.5,"grocery","US",14,800,"far"]]}`, "instances/0/distance_km"},
	} {
		res := call(t, g.url, predictPath("fraud-scoring"), key, tc.body)
		if res.status != http.StatusBadRequest || !strings.Contains(problemDetail(t, res), tc.detail) {
			t.Errorf("%s: %d %s; want 400 naming %q", tc.name, res.status, res.body, tc.detail)
		}
	}
}
