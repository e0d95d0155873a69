package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"modelplane/busapi"
	"modelplane/gateway"
	"modelplane/internal/wait"
	"modelplane/runtime"
	"modelplane/runtime/xgboost"
	"modelplane/serveapi"
	"modelplane/sim/replica"
)

// v2ver is a routing entry's version served by a V2-only runtime.
func v2ver(name, v2Model string, addrs ...string) busapi.RouteVersion {
	v := ver(name, 100, addrs...)
	v.Protocol, v.V2Model = busapi.ProtocolV2, v2Model
	return v
}

// paths records the paths a replica was called on, in front of a real
// runtime.
type paths struct {
	mu   sync.Mutex
	seen []string
	next http.Handler
}

func (p *paths) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.seen = append(p.seen, r.Method+" "+r.URL.Path)
	p.mu.Unlock()
	p.next.ServeHTTP(w, r)
}

func (p *paths) called(path string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Contains(p.seen, path)
}

type predictions struct {
	Predictions []struct {
		Label string   `json:"label"`
		Score *float64 `json:"score"`
	} `json:"predictions"`
	ModelVersion string `json:"model_version"`
}

// serveXGBoost serves XGBoost 3.1's own binary:logistic reference model
// (runtime/xgboost/testdata) with the built-in runtime, as endpoint name,
// and returns its address and XGBoost's inputs and probabilities.
func serveXGBoost(t *testing.T, name string) (*paths, string, [][]float64, []float64) {
	t.Helper()
	src := filepath.Join("..", "runtime", "xgboost", "testdata", "xgboost3", "gbtree_binary_logistic")
	dir := t.TempDir()
	m, err := os.ReadFile(src + ".model.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "model.json"), m, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := serveapi.Config{Model: name, Version: "v9", Format: "xgboost-json", File: "model.json",
		Features: []serveapi.Feature{{Name: "f0"}, {Name: "f1"}, {Name: "f2"}, {Name: "f3"}},
		Batching: serveapi.Batching{MaxBatchSize: 16, MaxQueueDelayUS: 100, QueueTimeoutMS: 5000}}
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, serveapi.ConfigFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := runtime.Open(dir, map[string]runtime.Opener{"xgboost-json": xgboost.Load}, runtime.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Warm(t.Context()); err != nil {
		t.Fatal(err)
	}
	rec := &paths{next: s.Handler()}
	hs := httptest.NewServer(rec)
	t.Cleanup(func() {
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	var in struct{ Features [][]float64 }
	var want struct {
		Transformed []float64 `json:"predictions_transformed"`
	}
	for file, v := range map[string]any{".input.json": &in, ".expected.json": &want} {
		b, err := os.ReadFile(src + file)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatal(err)
		}
	}
	u, _ := url.Parse(hs.URL)
	return rec, u.Host, in.Features, want.Transformed
}

// TestV2TranslationAgainstTheBuiltInRuntime: a version routed as V2-only
// is called on the built-in runtime's /v2/models/{m}/infer, and the
// caller gets the same predictions as the runtime's own /predict gives
// (through the gateway too), which are XGBoost's own.
func TestV2TranslationAgainstTheBuiltInRuntime(t *testing.T) {
	t.Parallel()
	rec, addr, rows, want := serveXGBoost(t, "fraud-v2")
	e := newEnv(t)
	features := []string{"f0", "f1", "f2", "f3"}
	v2 := route("fraud-v2", "risk", "classification", 1, v2ver("v9", "fraud-v2", addr))
	v2.FeatureNames = features
	plain := route("fraud-plain", "risk", "classification", 1, ver("v9", 100, addr))
	plain.FeatureNames = features
	e.putRoute(t, v2)
	e.putRoute(t, plain)
	key := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")

	var body bytes.Buffer
	body.WriteString(`{"instances":[`)
	for i, r := range rows {
		if i > 0 {
			body.WriteByte(',')
		}
		if i%2 == 0 { // objects and arrays alike
			fmt.Fprintf(&body, `{"f0":%v,"f1":%v,"f2":%v,"f3":%v}`, r[0], r[1], r[2], r[3])
		} else {
			fmt.Fprintf(&body, `[%v,%v,%v,%v]`, r[0], r[1], r[2], r[3])
		}
	}
	body.WriteString(`]}`)
	answers := map[string]predictions{}
	for _, ep := range []string{"fraud-v2", "fraud-plain"} {
		r := call(t, g.url, predictPath(ep), key, body.String())
		if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "application/json") {
			t.Fatalf("%s: %d %s %s", ep, r.status, r.header.Get("Content-Type"), r.body)
		}
		var p predictions
		if err := json.Unmarshal(r.body, &p); err != nil {
			t.Fatal(err)
		}
		if len(p.Predictions) != len(rows) || p.ModelVersion != "v9" {
			t.Fatalf("%s: %s; want %d predictions of v9", ep, r.body, len(rows))
		}
		answers[ep] = p
	}
	if !rec.called("POST /v2/models/fraud-v2/infer") || !rec.called("POST /predict") {
		t.Fatalf("runtime was called on %v; want the V2 infer path for fraud-v2 and /predict for fraud-plain", rec.seen)
	}
	for i := range rows {
		got, direct := answers["fraud-v2"].Predictions[i], answers["fraud-plain"].Predictions[i]
		if got.Score == nil || direct.Score == nil || *got.Score != *direct.Score || got.Label != direct.Label {
			t.Errorf("instance %d: translated %+v, /predict %+v; want the same", i, got, direct)
			continue
		}
		if math.Abs(*got.Score-want[i]) > 1e-5 {
			t.Errorf("instance %d: score %v, XGBoost's %v", i, *got.Score, want[i])
		}
	}

	// What one FP32 tensor cannot carry is the caller's 400, naming the
	// value; the runtime never sees it.
	r := call(t, g.url, predictPath("fraud-v2"), key, `{"instances":[{"f0":1,"f1":2,"f2":3,"f3":4},{"f0":1,"f1":"two","f2":3,"f3":4}]}`)
	if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "instances/1/f1") {
		t.Errorf("string feature: %d %s; want 400 naming instances/1/f1", r.status, r.body)
	}
}

// TestV2TranslationOfRecordedTritonAnswers: the request a Triton replica
// gets is one FP32 input__0 tensor [N, F] in feature order, and its
// recorded answers (kserve/testdata) come back as predictions; its error
// answers keep their status and message.
func TestV2TranslationOfRecordedTritonAnswers(t *testing.T) {
	t.Parallel()
	answer, err := os.ReadFile(filepath.Join("kserve", "testdata", "triton_fil_binary_proba.json"))
	if err != nil {
		t.Fatal(err)
	}
	refusal, err := os.ReadFile(filepath.Join("kserve", "testdata", "triton_error_shape.json"))
	if err != nil {
		t.Fatal(err)
	}
	type tensor struct {
		Name     string    `json:"name"`
		Datatype string    `json:"datatype"`
		Shape    []int     `json:"shape"`
		Data     []float32 `json:"data"`
	}
	var mu sync.Mutex
	var got struct {
		ID     string   `json:"id"`
		Inputs []tensor `json:"inputs"`
	}
	triton := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v2/models/fraud/infer":
			mu.Lock()
			_ = json.Unmarshal(b, &got)
			mu.Unlock()
			_, _ = w.Write(answer)
		case "/v2/models/broken/infer":
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write(refusal)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(triton.Close)
	u, _ := url.Parse(triton.URL)
	e := newEnv(t)
	for _, m := range []string{"fraud", "broken"} {
		rt := route(m+"-scoring", "risk", "classification", 1, v2ver("v3", m, u.Host))
		rt.FeatureNames = []string{"amount", "age", "night"}
		e.putRoute(t, rt)
	}
	key := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")

	body := `{"instances":[{"age":30,"amount":12.5,"night":false},{"amount":900,"age":22,"night":true},[1,2,3]]}`
	r := call(t, g.url, predictPath("fraud-scoring"), key, body, "X-Request-Id", "req-7f3a")
	if r.status != http.StatusOK {
		t.Fatalf("status %d %s", r.status, r.body)
	}
	mu.Lock()
	in := got
	mu.Unlock()
	wantIn := tensor{Name: "input__0", Datatype: "FP32", Shape: []int{3, 3}, Data: []float32{12.5, 30, 0, 900, 22, 1, 1, 2, 3}}
	if in.ID != "req-7f3a" || len(in.Inputs) != 1 || fmt.Sprint(in.Inputs[0]) != fmt.Sprint(wantIn) {
		t.Errorf("Triton got %+v; want id req-7f3a and %+v", in, wantIn)
	}
	var p predictions
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatal(err)
	}
	if len(p.Predictions) != 3 || p.Predictions[0].Label != "negative" || p.Predictions[1].Label != "positive" ||
		math.Abs(*p.Predictions[1].Score-0.9187871) > 1e-6 || p.ModelVersion != "v3" {
		t.Errorf("answer %s; want negative, positive (0.9187871), positive from v3", r.body)
	}

	r = call(t, g.url, predictPath("broken-scoring"), key, body)
	if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "unexpected shape for input") ||
		!strings.HasPrefix(r.header.Get("Content-Type"), "application/problem+json") {
		t.Errorf("Triton's 400: %d %s %s; want 400 problem with its message", r.status, r.header.Get("Content-Type"), r.body)
	}
}

// TestRealTriton sends a prediction through the gateway to a running
// Triton when MP_TEST_TRITON_URL names one (host:port of its HTTP
// endpoint), serving MP_TEST_TRITON_MODEL (a FIL or ONNX model with input
// input__0) of the comma-separated MP_TEST_TRITON_FEATURES. Skipped
// otherwise; CI has no Triton.
func TestRealTriton(t *testing.T) {
	addr, modelName, feats := os.Getenv("MP_TEST_TRITON_URL"), os.Getenv("MP_TEST_TRITON_MODEL"), os.Getenv("MP_TEST_TRITON_FEATURES")
	if addr == "" || modelName == "" || feats == "" {
		t.Skip("MP_TEST_TRITON_URL, MP_TEST_TRITON_MODEL and MP_TEST_TRITON_FEATURES name no running Triton")
	}
	if u, err := url.Parse(addr); err == nil && u.Host != "" {
		addr = u.Host
	}
	features := strings.Split(feats, ",")
	e := newEnv(t)
	rt := route("triton-ep", "risk", "classification", 1, v2ver("t1", modelName, addr))
	rt.FeatureNames = features
	e.putRoute(t, rt)
	key := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")
	row := make([]string, len(features))
	for i := range row {
		row[i] = fmt.Sprint(float64(i) * 0.5)
	}
	r := call(t, g.url, predictPath("triton-ep"), key, `{"instances":[[`+strings.Join(row, ",")+`],[`+strings.Join(row, ",")+`]]}`)
	var p predictions
	if r.status != http.StatusOK || json.Unmarshal(r.body, &p) != nil || len(p.Predictions) != 2 || p.Predictions[0].Score == nil {
		t.Fatalf("Triton through the gateway: %d %s; want two scored predictions", r.status, r.body)
	}
	t.Logf("Triton answered %s", r.body)
}

// TestV2TranslationOfASimulatedReplica: a V2-only version on a simulated
// node is served by a sim replica, which answers the V2 call as Triton
// would, so the caller gets its simulated predictions and labels.
func TestV2TranslationOfASimulatedReplica(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rt := route("fraud-sim", "risk", "classification", 1, v2ver("v5", "fraud", startReplica(t, "v5", replica.TaskClassification)))
	rt.FeatureNames = []string{"amount"}
	e.putRoute(t, rt)
	key := e.newKey(t, "risk", "engineer", nil)
	g := startGateway(t, e.nc, gateway.Config{})
	wait.Eventually(t, 10*time.Second, g.Ready, "waiting for gateway ready")
	r := call(t, g.url, predictPath("fraud-sim"), key, `{"instances":[{"amount":12.5},{"amount":900}]}`)
	var p predictions
	if r.status != http.StatusOK || json.Unmarshal(r.body, &p) != nil || len(p.Predictions) != 2 {
		t.Fatalf("%d %s; want two predictions", r.status, r.body)
	}
	for i, x := range p.Predictions {
		if (x.Label != "legit" && x.Label != "fraud") || x.Score == nil || *x.Score <= 0 || *x.Score >= 1 {
			t.Errorf("prediction %d = %+v; want a simulated label and score", i, x)
		}
	}
}
