package versioncheck_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/artifact"
	"modelplane/auth"
	"modelplane/db"
	"modelplane/endpoint"
	"modelplane/field"
	"modelplane/internal/pgtest"
	"modelplane/registry"
	"modelplane/rollout"
	"modelplane/versioncheck"
)

// binary is the modelplane binary TestMain builds once for the package:
// the validator runs its `runtime validate` as the control plane does.
var binary string

func TestMain(m *testing.M) {
	if os.Getenv(versioncheck.LimitsHelperEnv) == "1" {
		os.Exit(versioncheck.LimitsHelper())
	}
	dir, err := os.MkdirTemp("", "validation-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "modelplane")
	if out, err := exec.Command("go", "build", "-o", binary, "../cmd/modelplane").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build modelplane: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	pgtest.Stop()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// trainXGBoost trains a binary classifier with the real XGBoost on an
// amount and a one-hot country (DE, FR): fraud is a large amount from FR.
// It saves the model as JSON and prints xgboost's own scores of rows.
const trainXGBoost = `
import json, sys
import numpy as np
import xgboost as xgb
rs = np.random.RandomState(3)
amount = rs.uniform(0, 1000, size=3000).astype(np.float32)
fr = (rs.uniform(size=3000) < 0.5).astype(np.float32)
X = np.stack([amount, 1 - fr, fr], axis=1)
y = ((amount > 600) & (fr == 1)).astype(int)
b = xgb.train({"objective": "binary:logistic", "max_depth": 3, "eta": 0.3}, xgb.DMatrix(X, label=y), 20)
b.save_model(sys.argv[1])
rows = np.array(json.load(sys.stdin), dtype=np.float32)
print(json.dumps([float(p) for p in b.predict(xgb.DMatrix(rows))]))
`

// badONNX builds two models ONNX Runtime refuses: a graph whose node reads
// a tensor nothing produces, and one with an operator ONNX Runtime does
// not know.
const badONNX = `
import sys
import onnx
from onnx import TensorProto, helper
X = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 3])
Y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 3])
def save(path, node):
    g = helper.make_graph([node], "g", [X], [Y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="modelplane-test")
    m.ir_version = 8
    onnx.save(m, path)
save(sys.argv[1], helper.make_node("Add", ["X", "missing_tensor"], ["Y"]))
save(sys.argv[2], helper.make_node("FrobnicateRows", ["X"], ["Y"]))
`

// fixture is a database with team risk, a registry that queues uploads
// for validation, the endpoint and rollout services and a validator over
// the real binary.
type fixture struct {
	db        *pgxpool.Pool
	store     *artifact.Store
	reg       *registry.Service
	eps       *endpoint.Service
	rollouts  *rollout.Service
	validator *versioncheck.Validator
	eng       *auth.Principal
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	pool := pgtest.New(t)
	store, err := artifact.NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tm, err := db.New(pool).TeamCreate(t.Context(), db.TeamCreateParams{Name: "risk"})
	if err != nil {
		t.Fatal(err)
	}
	v := versioncheck.New(versioncheck.Config{Pool: pool, Store: store, Binary: binary, WorkDir: t.TempDir()})
	return &fixture{db: pool, store: store, reg: registry.New(pool, store, artifact.Limits{}).WithValidation(v.Wake), eps: endpoint.New(pool),
		rollouts: rollout.New(pool, nil, nil), validator: v,
		eng: &auth.Principal{Name: "eng@example.com", Via: "session", Teams: []auth.Membership{{TeamID: tm.ID, Team: "risk", Role: auth.RoleEngineer}}}}
}

// register uploads one model file as a version.
func (f *fixture) register(t *testing.T, model, name, runtime, file string, body []byte, sv registry.Serving) registry.Version {
	t.Helper()
	sum := sha256.Sum256(body)
	man := artifact.Manifest{file: hex.EncodeToString(sum[:])}
	v, err := f.reg.RegisterVersion(t.Context(), f.eng, model, registry.VersionSpec{Name: name, Runtime: runtime, Serving: sv}, man.Canonical(),
		func(u *artifact.Upload) error { return u.Add(context.Background(), file, bytes.NewReader(body)) })
	if err != nil {
		t.Fatalf("register %s: %v", name, err)
	}
	return v
}

func (f *fixture) version(t *testing.T, model, name string) registry.Version {
	t.Helper()
	v, err := f.reg.Version(t.Context(), f.eng, model, name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func python(t *testing.T, stdin []byte, script string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("/usr/bin/python3", append([]string{"-c", script}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3 (run scripts/install-deps.sh test): %v\n%s", err, stderr.String())
	}
	return out
}

// TestValidation is validation at registration end to end: an XGBoost
// model trained by the real library becomes validated with the runtime's
// answers stored, which are XGBoost's own scores; ONNX models with a bad
// graph and an unknown operator become invalid with ONNX Runtime's
// message; an invalid version, and one still being validated, cannot be
// routed or rolled out.
func TestValidation(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	dir := t.TempDir()
	if _, err := f.reg.CreateModel(ctx, f.eng, registry.ModelSpec{Team: "risk", Name: "fraud", Task: registry.TaskClassification,
		InputSchema:  json.RawMessage(`{"type":"object","properties":{"amount":{"type":"number","minimum":0},"country":{"type":"string"}},"required":["amount","country"]}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"score":{"type":"number"},"label":{"type":"string","enum":["legit","fraud"]}},"required":["score","label"]}`),
		FeatureNames: []string{"amount", "country"}}); err != nil {
		t.Fatal(err)
	}
	rows := [][]float64{{900, 0, 1}, {50, 1, 0}}
	in, _ := json.Marshal(rows)
	modelPath := filepath.Join(dir, "fraud.json")
	var want []float64
	if err := json.Unmarshal(python(t, in, trainXGBoost, modelPath), &want); err != nil {
		t.Fatal(err)
	}
	xgbFile, err := os.ReadFile(modelPath)
	if err != nil {
		t.Fatal(err)
	}
	sv := registry.Serving{
		Features:     []registry.ServingFeature{{Name: "amount"}, {Name: "country", Categories: []string{"DE", "FR"}, Encoding: "onehot"}},
		Output:       registry.ServingOutput{Classes: []string{"legit", "fraud"}},
		SampleInputs: []json.RawMessage{json.RawMessage(`{"amount":900,"country":"FR"}`), json.RawMessage(`{"amount":50,"country":"DE"}`)},
	}
	good := f.register(t, "fraud", "v1", "xgboost", "model.json", xgbFile, sv)
	if good.Status != registry.StatusRegistered || good.Validation == nil || good.Validation.State != registry.ValidationPending {
		t.Fatalf("registered = %q %+v, want registered with a pending validation", good.Status, good.Validation)
	}

	graphPath, opPath := filepath.Join(dir, "graph.onnx"), filepath.Join(dir, "op.onnx")
	python(t, nil, badONNX, graphPath, opPath)
	if _, err := f.reg.CreateModel(ctx, f.eng, registry.ModelSpec{Team: "risk", Name: "mlp", Task: registry.TaskRegression,
		FeatureNames: []string{"a", "b", "c"}}); err != nil {
		t.Fatal(err)
	}
	for name, path := range map[string]string{"graph": graphPath, "op": opPath} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		f.register(t, "mlp", name, "onnxruntime", "model.onnx", b, registry.Serving{})
	}

	// Uploads return at once; the version cannot take traffic yet.
	_, err = f.eps.Create(ctx, f.eng, endpoint.Spec{Name: "fraud-ep", Model: "fraud", Version: "v1",
		Settings: endpoint.Settings{MinReplicas: 1, MaxReplicas: 1, Tier: "standard", RetentionDays: 30}})
	assertRefused(t, err, "version", "still being validated")

	n, err := f.validator.Pass(ctx)
	if err != nil || n != 3 {
		t.Fatalf("pass = %d, %v; want 3 validated", n, err)
	}

	got := f.version(t, "fraud", "v1")
	if got.Status != registry.StatusValidated || got.Validation == nil || got.Validation.State != registry.StatusValidated {
		t.Fatalf("good version = %q %+v, want validated", got.Status, got.Validation)
	}
	var answers []struct {
		Label string  `json:"label"`
		Score float64 `json:"score"`
	}
	if err := json.Unmarshal(got.Validation.Outputs, &answers); err != nil || len(answers) != 2 {
		t.Fatalf("outputs %s: %v, want two answers", got.Validation.Outputs, err)
	}
	for i, a := range answers {
		if math.Abs(a.Score-want[i]) > 1e-5 {
			t.Errorf("answer %d score %v, xgboost says %v", i, a.Score, want[i])
		}
	}
	if answers[0].Label != "fraud" || answers[1].Label != "legit" {
		t.Errorf("labels = %+v, want fraud then legit", answers)
	}
	if got.Validation.LatencyMS == nil || got.Validation.LoadMS == nil {
		t.Errorf("validation = %+v, want load and latency", got.Validation)
	}

	for name, says := range map[string]string{"graph": "missing_tensor", "op": "FrobnicateRows"} {
		v := f.version(t, "mlp", name)
		t.Logf("%s: %s", name, v.Validation.Reason)
		if v.Status != registry.StatusInvalid || v.Validation == nil || !strings.Contains(v.Validation.Reason, says) {
			t.Errorf("%s = %q %+v, want invalid with ONNX Runtime's message naming %s", name, v.Status, v.Validation, says)
		}
	}

	// Routes refuse the invalid version with its reason; the good one
	// serves.
	spec := endpoint.Spec{Name: "mlp-ep", Model: "mlp", Version: "op", Settings: endpoint.Settings{MinReplicas: 1, MaxReplicas: 1, Tier: "standard", RetentionDays: 30}}
	_, err = f.eps.Create(ctx, f.eng, spec)
	assertRefused(t, err, "version", "FrobnicateRows")
	if _, err := f.eps.Create(ctx, f.eng, endpoint.Spec{Name: "fraud-ep", Model: "fraud", Version: "v1",
		Settings: endpoint.Settings{MinReplicas: 1, MaxReplicas: 1, Tier: "standard", RetentionDays: 30}}); err != nil {
		t.Fatalf("create endpoint of the validated version: %v", err)
	}
	f.register(t, "fraud", "v2", "xgboost", "model.json", []byte(`{"learner":{"gradient_booster":{}},"version":[1,7,4]}`), sv)
	if _, err := f.validator.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if v := f.version(t, "fraud", "v2"); v.Status != registry.StatusInvalid {
		t.Fatalf("v2 = %q %+v, want invalid", v.Status, v.Validation)
	} else {
		t.Logf("v2: %s", v.Validation.Reason)
	}
	// Without sample inputs, inputs are generated from the schema; the
	// default class names are not labels the output schema allows.
	f.register(t, "fraud", "v3", "xgboost", "model.json", xgbFile, registry.Serving{Features: sv.Features})
	if _, err := f.validator.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	v3 := f.version(t, "fraud", "v3")
	if v3.Status != registry.StatusInvalid || !strings.Contains(v3.Validation.Reason, "output_schema") || !strings.Contains(string(v3.Validation.Inputs), `"DE"`) {
		t.Errorf("v3 = %q %+v (inputs %s), want invalid for its outputs, with generated inputs", v3.Status, v3.Validation, v3.Validation.Inputs)
	}

	// A child past its time limit is killed, and the version is invalid.
	f.register(t, "fraud", "v4", "xgboost", "model.json", xgbFile, sv)
	hasty := versioncheck.New(versioncheck.Config{Pool: f.db, Store: f.store, Binary: binary, Timeout: time.Millisecond})
	if _, err := hasty.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if v := f.version(t, "fraud", "v4"); v.Status != registry.StatusInvalid || !strings.Contains(v.Validation.Reason, "timed out") {
		t.Errorf("v4 = %q %+v, want invalid: timed out", v.Status, v.Validation)
	}

	_, err = f.eps.SetTraffic(ctx, f.eng, "fraud-ep", []endpoint.Weight{{Version: "v1", Weight: 90}, {Version: "v2", Weight: 10}})
	assertRefused(t, err, "weights[1].version", "v2 is invalid")
	_, err = f.rollouts.Start(ctx, f.eng, "fraud-ep", rollout.Spec{Version: "v2"})
	assertRefused(t, err, "version", "v2 is invalid")
}

func assertRefused(t *testing.T, err error, name, says string) {
	t.Helper()
	var ve field.Errors
	if !errors.As(err, &ve) || len(ve) != 1 || ve[0].Field != name || !strings.Contains(ve[0].Message, says) {
		t.Fatalf("err = %v, want a 400 on %s saying %q", err, name, says)
	}
}
