package runtime_test

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/quartz"

	"modelplane/internal/wait"
	"modelplane/runtime"
	"modelplane/serveapi"
	"modelplane/sim/replica"
)

// fraudConfig is a binary classifier of three features: a number, a
// one-hot categorical and a natively encoded one (five model columns).
func fraudConfig() serveapi.Config {
	return serveapi.Config{
		Model: "fraud-scoring", Version: "v23", Format: "xgboost-json",
		Features: []serveapi.Feature{
			{Name: "amount"},
			{Name: "country", Categories: []string{"us", "de", "fr"}},
			{Name: "merchant", Categories: []string{"grocery", "travel", "online"}, Encoding: "native"},
		},
		Output:       serveapi.Output{Classes: []string{"legit", "fraud"}, Threshold: 0.5},
		SampleInputs: []json.RawMessage{json.RawMessage(`{"amount": 10, "country": "us", "merchant": "grocery"}`)},
		Batching:     serveapi.Batching{MaxBatchSize: 16, MaxQueueDelayUS: 200, QueueTimeoutMS: 5000},
	}
}

func fraudModel() *linear {
	return &linear{Kind: serveapi.OutputProbability, Weights: [][]float64{{0.02, 0.3, -0.5, 0.1, 0.7}}, Bias: []float64{-1}}
}

// serve opens and warms a runtime on dir and serves it over real HTTP.
func serve(t *testing.T, dir string, o *opened, opt runtime.Options) (*runtime.Server, string) {
	t.Helper()
	s, err := runtime.Open(dir, o.openers(), opt)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	if err := s.Warm(context.Background()); err != nil {
		t.Fatalf("warm: %v", err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s, hs.URL
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func do(t *testing.T, method, url, body string) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header, b}
}

// predictions is /predict's answer as a client decodes it.
type predictions = serveapi.PredictResponse[serveapi.Prediction]

func decode[T any](t *testing.T, r reply) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
	return v
}

func sigmoid(z float64) float64 { return 1 / (1 + math.Exp(-z)) }

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

func TestPredictAnswersWithTheModel(t *testing.T) {
	t.Parallel()
	o := &opened{}
	_, url := serve(t, modelDir(t, fraudConfig(), fraudModel(), "model.json"), o, runtime.Options{})
	r := do(t, "POST", url+"/predict", `{"instances": [
		{"amount": 250, "country": "de", "merchant": "online", "id": "ignored"},
		{"amount": 5, "country": "us", "merchant": "grocery"},
		[250, "de", "online"]]}`)
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	if v := r.header.Get("X-Model-Version"); v != "v23" {
		t.Errorf("X-Model-Version %q, want v23", v)
	}
	got := decode[predictions](t, r)
	if got.ModelVersion != "v23" || len(got.Predictions) != 3 {
		t.Fatalf("got %s", r.body)
	}
	// Rows by hand: amount, one-hot us/de/fr, merchant's index.
	want := []struct {
		score float64
		label string
	}{
		{sigmoid(-1 + 0.02*250 - 0.5 + 0.7*2), "fraud"},
		{sigmoid(-1 + 0.02*5 + 0.3), "legit"},
		{sigmoid(-1 + 0.02*250 - 0.5 + 0.7*2), "fraud"},
	}
	for i, w := range want {
		p := got.Predictions[i]
		if p.Score == nil || !near(*p.Score, w.score) || p.Label != w.label {
			t.Errorf("prediction %d: got %+v (score %v), want score %v label %s", i, p, deref(p.Score), w.score, w.label)
		}
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestPredictRejectsBadInputNamingTheField(t *testing.T) {
	t.Parallel()
	o := &opened{}
	_, url := serve(t, modelDir(t, fraudConfig(), fraudModel(), "model.json"), o, runtime.Options{MaxInstances: 4})
	calls := o.model().calls.Load()
	for _, tc := range []struct {
		name, body, want string
	}{
		{"missing feature", `{"instances": [{"amount": 1, "country": "us"}]}`, "instances[0].merchant: is missing"},
		{"string for a number", `{"instances": [{"amount": "12", "country": "us", "merchant": "travel"}]}`, "instances[0].amount: must be a number"},
		{"null for a number", `{"instances": [{"amount": null, "country": "us", "merchant": "travel"}]}`, "instances[0].amount: must be a number"},
		{"number out of float32 range", `{"instances": [{"amount": 1e300, "country": "us", "merchant": "travel"}]}`, "instances[0].amount: is out of the range"},
		{"number for a category", `{"instances": [{"amount": 1, "country": 3, "merchant": "travel"}]}`, "instances[0].country: must be a string"},
		{"unknown category", `{"instances": [{"amount": 1, "country": "xx", "merchant": "travel"}]}`, `instances[0].country: "xx" is not a known category`},
		{"second instance bad", `{"instances": [{"amount": 1, "country": "us", "merchant": "travel"}, {"amount": 1, "country": "us", "merchant": "boat"}]}`, "instances[1].merchant"},
		{"array of the wrong length", `{"instances": [[1, "us"]]}`, "instances[0]: has 2 values; the model takes 3 features"},
		{"wrong type in an array", `{"instances": [[1, "us", 4]]}`, "instances[0][2] (merchant): must be a string"},
		{"instance not an object", `{"instances": [42]}`, "instances[0]: must be a JSON object"},
		{"no instances", `{"inputs": []}`, "instances is required"},
		{"empty instances", `{"instances": []}`, "instances must not be empty"},
		{"too many instances", `{"instances": [1, 2, 3, 4, 5]}`, "at most 4 per request"},
		{"malformed JSON", `{"instances": [`, "unexpected end of JSON"},
		{"two objects", `{"instances": [1]} {}`, "one JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, "POST", url+"/predict", tc.body)
			if r.status != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %s", r.status, r.body)
			}
			var p struct{ Detail string }
			if err := json.Unmarshal(r.body, &p); err != nil || !strings.Contains(p.Detail, tc.want) {
				t.Fatalf("detail %q, want it to contain %q", p.Detail, tc.want)
			}
		})
	}
	if n := o.model().calls.Load(); n != calls {
		t.Errorf("bad input reached the model: %d calls after warm-up, want %d", n, calls)
	}
	if r := do(t, "POST", url+"/predict", `{"instances": [{"amount": 1, "country": "fr", "merchant": "travel"}]}`); r.status != http.StatusOK {
		t.Fatalf("good request after bad ones: %d %s", r.status, r.body)
	}
}

func TestMulticlassAndRegressionAnswers(t *testing.T) {
	t.Parallel()
	two := []serveapi.Feature{{Name: "x"}, {Name: "y"}}
	t.Run("multiclass", func(t *testing.T) {
		t.Parallel()
		cfg := serveapi.Config{Model: "iris", Version: "v1", Format: "linear", File: "m.json", Features: two,
			Output: serveapi.Output{Classes: []string{"setosa", "versicolor", "virginica"}}, Batching: serveapi.Batching{MaxBatchSize: 8}}
		m := &linear{Kind: serveapi.OutputProbability, Weights: [][]float64{{1, 0}, {0, 1}, {-1, -1}}, Bias: []float64{0, 0, 0}}
		_, url := serve(t, modelDir(t, cfg, m, "m.json"), &opened{}, runtime.Options{})
		r := do(t, "POST", url+"/predict", `{"instances": [{"x": 2, "y": 0.5}, {"x": -3, "y": -2}]}`)
		got := decode[predictions](t, r)
		if r.status != http.StatusOK || len(got.Predictions) != 2 {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		for i, want := range []string{"setosa", "virginica"} {
			p := got.Predictions[i]
			probs := m.eval([]float32{[]float32{2, -3}[i], []float32{0.5, -2}[i]})
			if p.Label != want || len(p.Probabilities) != 3 || p.Score == nil {
				t.Fatalf("prediction %d: %+v, want label %s with 3 probabilities", i, p, want)
			}
			for k, c := range cfg.Output.Classes {
				if !near(p.Probabilities[c], probs[k]) {
					t.Errorf("prediction %d: P(%s) = %v, want %v", i, c, p.Probabilities[c], probs[k])
				}
			}
			if !near(*p.Score, p.Probabilities[want]) {
				t.Errorf("prediction %d: score %v is not the winner's probability %v", i, *p.Score, p.Probabilities[want])
			}
		}
	})
	t.Run("regression", func(t *testing.T) {
		t.Parallel()
		cfg := serveapi.Config{Model: "price", Version: "v2", Format: "linear", File: "m.json", Features: two, Batching: serveapi.Batching{MaxBatchSize: 8}}
		m := &linear{Kind: serveapi.OutputValue, Weights: [][]float64{{3, -2}}, Bias: []float64{10}}
		_, url := serve(t, modelDir(t, cfg, m, "m.json"), &opened{}, runtime.Options{})
		r := do(t, "POST", url+"/predict", `{"instances": [{"x": 1.5, "y": 4}]}`)
		got := decode[predictions](t, r)
		if r.status != http.StatusOK || len(got.Predictions) != 1 || got.Predictions[0].Value == nil || !near(*got.Predictions[0].Value, 10+4.5-8) {
			t.Fatalf("status %d: %s, want value 6.5", r.status, r.body)
		}
		if got.Predictions[0].Label != "" || got.Predictions[0].Score != nil {
			t.Fatalf("a regression answer has a label or score: %s", r.body)
		}
	})
}

type v2Out struct {
	ModelName    string `json:"model_name"`
	ModelVersion string `json:"model_version"`
	ID           string `json:"id"`
	Outputs      []struct {
		Name     string          `json:"name"`
		Datatype string          `json:"datatype"`
		Shape    []int64         `json:"shape"`
		Data     json.RawMessage `json:"data"`
	} `json:"outputs"`
}

func TestV2Protocol(t *testing.T) {
	t.Parallel()
	o := &opened{}
	_, url := serve(t, modelDir(t, fraudConfig(), fraudModel(), "model.json"), o, runtime.Options{})
	for path, want := range map[string]int{
		"/v2/health/live":                200,
		"/v2/health/ready":               200,
		"/v2":                            200,
		"/v2/models/fraud-scoring":       200,
		"/v2/models/fraud-scoring/ready": 200,
		"/v2/models/other":               404,
		"/v2/models/other/ready":         404,
	} {
		if r := do(t, "GET", url+path, ""); r.status != want {
			t.Errorf("GET %s: %d, want %d: %s", path, r.status, want, r.body)
		}
	}
	md := decode[struct {
		Name     string   `json:"name"`
		Versions []string `json:"versions"`
		Inputs   []struct {
			Name  string  `json:"name"`
			Shape []int64 `json:"shape"`
		} `json:"inputs"`
		Outputs []struct {
			Name  string  `json:"name"`
			Shape []int64 `json:"shape"`
		} `json:"outputs"`
	}](t, do(t, "GET", url+"/v2/models/fraud-scoring", ""))
	if md.Name != "fraud-scoring" || len(md.Versions) != 1 || md.Versions[0] != "v23" ||
		len(md.Inputs) != 1 || md.Inputs[0].Name != "input" || md.Inputs[0].Shape[1] != 5 ||
		len(md.Outputs) != 2 || md.Outputs[0].Shape[1] != 1 || md.Outputs[1].Name != "label" {
		t.Errorf("metadata %+v", md)
	}

	fraud, legit := sigmoid(-1+0.02*250-0.5+0.7*2), sigmoid(-1+0.02*5+0.3)
	check := func(t *testing.T, r reply) {
		t.Helper()
		if r.status != http.StatusOK {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		got := decode[v2Out](t, r)
		if got.ModelName != "fraud-scoring" || got.ModelVersion != "v23" || got.ID != "req-1" || len(got.Outputs) != 2 {
			t.Fatalf("answer %s", r.body)
		}
		var scores []float64
		var labels []string
		if err := json.Unmarshal(got.Outputs[0].Data, &scores); err != nil || len(scores) != 2 || !near(scores[0], fraud) || !near(scores[1], legit) {
			t.Errorf("output data %s, want [%v %v]", got.Outputs[0].Data, fraud, legit)
		}
		if got.Outputs[0].Shape[0] != 2 || got.Outputs[0].Shape[1] != 1 || got.Outputs[0].Datatype != "FP32" {
			t.Errorf("output tensor %+v", got.Outputs[0])
		}
		if err := json.Unmarshal(got.Outputs[1].Data, &labels); err != nil || len(labels) != 2 || labels[0] != "fraud" || labels[1] != "legit" {
			t.Errorf("labels %s, want [fraud legit]", got.Outputs[1].Data)
		}
	}
	t.Run("one matrix input", func(t *testing.T) {
		check(t, do(t, "POST", url+"/v2/models/fraud-scoring/infer", `{"id": "req-1", "inputs": [
			{"name": "input", "shape": [2, 5], "datatype": "FP32", "data": [[250, 0, 1, 0, 2], [5, 1, 0, 0, 0]]}]}`))
	})
	t.Run("one input per feature", func(t *testing.T) {
		check(t, do(t, "POST", url+"/v2/models/fraud-scoring/infer", `{"id": "req-1", "inputs": [
			{"name": "amount", "shape": [2], "datatype": "FP64", "data": [250, 5]},
			{"name": "country", "shape": [2, 1], "datatype": "BYTES", "data": ["de", "us"]},
			{"name": "merchant", "shape": [2], "datatype": "BYTES", "data": ["online", "grocery"]}]}`))
	})
	for _, tc := range []struct{ name, body, want string }{
		{"matrix of the wrong width", `{"inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}`, `inputs["input"]: shape [1 4]; want [N, 5]`},
		{"matrix data short", `{"inputs": [{"name": "input", "shape": [2, 5], "datatype": "FP32", "data": [1, 2, 3, 4, 5]}]}`, `inputs["input"]: data has 5 values`},
		{"matrix of strings", `{"inputs": [{"name": "input", "shape": [1, 5], "datatype": "BYTES", "data": ["a", "b", "c", "d", "e"]}]}`, `inputs["input"]: datatype "BYTES" is not numeric`},
		{"feature missing", `{"inputs": [{"name": "amount", "shape": [1], "datatype": "FP32", "data": [1]}, {"name": "country", "shape": [1], "datatype": "BYTES", "data": ["us"]}]}`, `inputs["merchant"]: is missing`},
		{"unknown category", `{"inputs": [{"name": "amount", "shape": [1], "datatype": "FP32", "data": [1]}, {"name": "country", "shape": [1], "datatype": "BYTES", "data": ["zz"]}, {"name": "merchant", "shape": [1], "datatype": "BYTES", "data": ["travel"]}]}`, `inputs["country"].data[0]: "zz" is not a known category`},
		{"numbers for a category", `{"inputs": [{"name": "amount", "shape": [1], "datatype": "FP32", "data": [1]}, {"name": "country", "shape": [1], "datatype": "FP32", "data": [1]}, {"name": "merchant", "shape": [1], "datatype": "BYTES", "data": ["travel"]}]}`, `inputs["country"]: a categorical feature takes BYTES`},
		{"rows disagree", `{"inputs": [{"name": "amount", "shape": [2], "datatype": "FP32", "data": [1, 2]}, {"name": "country", "shape": [1], "datatype": "BYTES", "data": ["us"]}, {"name": "merchant", "shape": [1], "datatype": "BYTES", "data": ["travel"]}]}`, `inputs["country"]: 1 rows where the other inputs have 2`},
		{"no inputs", `{"inputs": []}`, "at least one input"},
		{"not JSON", `nope`, "malformed JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, "POST", url+"/v2/models/fraud-scoring/infer", tc.body)
			var e struct{ Error string }
			if r.status != http.StatusBadRequest || json.Unmarshal(r.body, &e) != nil || !strings.Contains(e.Error, tc.want) {
				t.Fatalf("got %d %s, want 400 with %q", r.status, r.body, tc.want)
			}
		})
	}
	if r := do(t, "POST", url+"/v2/models/other/infer", `{"inputs": []}`); r.status != http.StatusNotFound {
		t.Errorf("infer on another model: %d, want 404", r.status)
	}
}

// metric reads one sample's value from a Prometheus text exposition.
func metric(t *testing.T, text, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("no series %s in\n%s", series, text)
	return 0
}

func TestMetricsHaveTritonNamesAndCount(t *testing.T) {
	t.Parallel()
	o := &opened{}
	_, url := serve(t, modelDir(t, fraudConfig(), fraudModel(), "model.json"), o, runtime.Options{})
	one := `{"amount": 1, "country": "us", "merchant": "travel"}`
	for _, body := range []string{`{"instances": [` + one + `]}`, `{"instances": [` + one + `, ` + one + `, ` + one + `]}`} {
		if r := do(t, "POST", url+"/predict", body); r.status != 200 {
			t.Fatalf("predict: %d %s", r.status, r.body)
		}
	}
	if r := do(t, "POST", url+"/v2/models/fraud-scoring/infer", `{"inputs": [{"name": "input", "shape": [1, 5], "datatype": "FP32", "data": [1, 0, 0, 1, 2]}]}`); r.status != 200 {
		t.Fatalf("infer: %d %s", r.status, r.body)
	}
	if r := do(t, "POST", url+"/predict", `{"instances": [{}]}`); r.status != 400 {
		t.Fatalf("bad predict: %d", r.status)
	}
	text := string(do(t, "GET", url+"/metrics", "").body)
	l := `model="fraud-scoring",version="v23"`
	// Warm-up is not counted, as in Triton; the three requests ran one
	// after another, so each was its own execution.
	for series, want := range map[string]float64{
		"nv_inference_request_success{" + l + "}":                                             3,
		`nv_inference_request_failure{model="fraud-scoring",reason="OTHER",version="v23"}`:    1,
		`nv_inference_request_failure{model="fraud-scoring",reason="REJECTED",version="v23"}`: 0,
		"nv_inference_count{" + l + "}":                                                       5,
		"nv_inference_exec_count{" + l + "}":                                                  3,
		"nv_inference_pending_request_count{" + l + "}":                                       0,
	} {
		if got := metric(t, text, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	for _, name := range []string{"nv_inference_queue_duration_us", "nv_inference_compute_infer_duration_us", "nv_inference_request_duration_us"} {
		if got := metric(t, text, name+"{"+l+"}"); got < 0 {
			t.Errorf("%s = %v", name, got)
		}
	}
	if got := metric(t, text, "nv_inference_compute_infer_duration_us{"+l+"}"); got <= 0 {
		t.Errorf("compute duration %v after three executions, want > 0", got)
	}
}

func TestWarmUpGatesReadiness(t *testing.T) {
	t.Parallel()
	o := &opened{}
	s := runtime.New(runtime.Options{})
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	if r := do(t, "GET", hs.URL+"/v2/health/live", ""); r.status != 200 {
		t.Fatalf("live before load: %d", r.status)
	}
	if r := do(t, "GET", hs.URL+"/v2/health/ready", ""); r.status != 503 {
		t.Fatalf("ready before load: %d, want 503", r.status)
	}
	if err := s.Load(modelDir(t, fraudConfig(), fraudModel(), "model.json"), o.openers()); err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if r := do(t, "GET", hs.URL+"/v2/health/ready", ""); r.status != 503 {
		t.Fatalf("ready before warm-up: %d, want 503", r.status)
	}
	r := do(t, "POST", hs.URL+"/predict", `{"instances": [{"amount": 1, "country": "us", "merchant": "travel"}]}`)
	if r.status != 503 || r.header.Get("Retry-After") == "" {
		t.Fatalf("predict before warm-up: %d, Retry-After %q; want 503 with it", r.status, r.header.Get("Retry-After"))
	}
	if n := o.model().calls.Load(); n != 0 {
		t.Fatalf("model called %d times before warm-up", n)
	}
	if err := s.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n, rows := o.model().calls.Load(), o.model().rows.Load(); n != 1 || rows != 1 {
		t.Fatalf("warm-up made %d calls of %d rows, want the one sample input", n, rows)
	}
	if r := do(t, "GET", hs.URL+"/v2/health/ready", ""); r.status != 200 {
		t.Fatalf("ready after warm-up: %d", r.status)
	}
	s.Drain()
	if r := do(t, "GET", hs.URL+"/v2/health/ready", ""); r.status != 503 {
		t.Fatalf("ready while draining: %d, want 503", r.status)
	}
}

func TestWarmUpFailureNamesTheSample(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		edit func(*serveapi.Config, *linear)
		want string
	}{
		{"unknown category", func(c *serveapi.Config, _ *linear) {
			c.SampleInputs = append(c.SampleInputs, json.RawMessage(`{"amount": 1, "country": "mars", "merchant": "travel"}`))
		}, "warm-up: sample_inputs[1].country"},
		{"outputs that do not fit the classes", func(c *serveapi.Config, m *linear) {
			m.Weights = [][]float64{m.Weights[0], m.Weights[0], m.Weights[0]}
			m.Bias = []float64{0, 0, 0}
		}, "3 class probabilities but output.classes names 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, m := fraudConfig(), fraudModel()
			tc.edit(&cfg, m)
			s, err := runtime.Open(modelDir(t, cfg, m, "model.json"), (&opened{}).openers(), runtime.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(context.Background())
			if err := s.Warm(context.Background()); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("warm-up error %v, want %q", err, tc.want)
			}
			if s.Ready() {
				t.Fatal("ready after a failed warm-up")
			}
		})
	}
}

func TestLoadRefusesABadDirectory(t *testing.T) {
	t.Parallel()
	o := &opened{}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T) string
		want  string
	}{
		{"no configuration", func(t *testing.T) string { return t.TempDir() }, "read serving configuration"},
		{"no loader for the format", func(t *testing.T) string {
			c := fraudConfig()
			c.Format = "pickle"
			return modelDir(t, c, fraudModel(), "model.json")
		}, `no loader for format "pickle"`},
		{"features and model disagree", func(t *testing.T) string {
			c := fraudConfig()
			c.Features = c.Features[:2]
			return modelDir(t, c, fraudModel(), "model.json")
		}, "the model reads 5 columns but the features make 4"},
		{"two model files", func(t *testing.T) string {
			dir := modelDir(t, fraudConfig(), fraudModel(), "a.json")
			if err := os.WriteFile(filepath.Join(dir, "b.json"), []byte("{}"), 0o600); err != nil {
				t.Fatal(err)
			}
			return dir
		}, "want exactly one .json file"},
		{"file outside the directory", func(t *testing.T) string {
			c := fraudConfig()
			c.File = "../model.json"
			return modelDir(t, c, fraudModel(), "model.json")
		}, "not inside the model directory"},
		{"bad encoding", func(t *testing.T) string {
			c := fraudConfig()
			c.Features[1].Encoding = "binary"
			return modelDir(t, c, fraudModel(), "model.json")
		}, `encoding "binary"`},
		{"preferred size above the max", func(t *testing.T) string {
			c := fraudConfig()
			c.Batching.PreferredBatchSizes = []int{32}
			return modelDir(t, c, fraudModel(), "model.json")
		}, "preferred batch size 32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := runtime.Open(tc.setup(t), o.openers(), runtime.Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("open error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestQueueTimeoutIs503AndNeverExecuted(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	clk := quartz.NewMock(t).WithLogger(quartz.NoOpLogger)
	timers := clk.Trap().NewTimer("batch", "timeout")
	defer timers.Close()
	cfg := fraudConfig()
	cfg.Batching = serveapi.Batching{MaxBatchSize: 8, QueueTimeoutMS: 50}
	o := &opened{gate: make(chan struct{}, 1)}
	o.gate <- struct{}{} // the warm-up's execution
	s, err := runtime.Open(modelDir(t, cfg, fraudModel(), "model.json"), o.openers(), runtime.Options{Clock: clk, ReplicaID: "r-1"})
	if err != nil {
		t.Fatal(err)
	}
	warmed := make(chan error, 1)
	go func() { warmed <- s.Warm(ctx) }()
	timers.MustWait(ctx).MustRelease(ctx)
	if err := <-warmed; err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	defer s.Close(context.Background())
	post := func(amount int) <-chan reply {
		ch := make(chan reply, 1)
		go func() {
			ch <- do(t, "POST", hs.URL+"/predict", `{"instances": [{"amount": `+strconv.Itoa(amount)+`, "country": "us", "merchant": "travel"}]}`)
		}()
		return ch
	}
	stats := func() map[string]any {
		return decode[map[string]any](t, do(t, "GET", hs.URL+"/v2/stats", ""))
	}
	running := post(1)
	timers.MustWait(ctx).MustRelease(ctx)
	wait.Eventually(t, 10*time.Second, func() bool { return stats()["queue_depth"] == 0.0 && stats()["in_flight"] == 1.0 }, "first request not executing: %v", wait.Show(func() any { return stats() }))
	late := post(2)
	timers.MustWait(ctx).MustRelease(ctx)
	wait.Eventually(t, 10*time.Second, func() bool { return stats()["queue_depth"] == 1.0 }, "second request not queued")
	// Pending counts the queued request, not the executing one.
	if got := metric(t, string(do(t, "GET", hs.URL+"/metrics", "").body), `nv_inference_pending_request_count{model="fraud-scoring",version="v23"}`); got != 1 {
		t.Errorf("pending %v with one request queued behind one executing, want 1", got)
	}
	clk.Advance(50 * time.Millisecond).MustWait(ctx)
	r := <-late
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
		t.Fatalf("timed-out request: %d, Retry-After %q: %s; want 503 with Retry-After", r.status, r.header.Get("Retry-After"), r.body)
	}
	o.gate <- struct{}{}
	if r := <-running; r.status != http.StatusOK {
		t.Fatalf("executing request: %d %s", r.status, r.body)
	}
	m := o.model()
	m.mu.Lock()
	seen := append([]float32(nil), m.seen...)
	m.mu.Unlock()
	if len(seen) != 2 || seen[0] != 10 || seen[1] != 1 {
		t.Fatalf("model executed rows with amounts %v; want the warm-up's 10 and the first request's 1, never the timed-out 2", seen)
	}
	st := stats()
	if st["replica_id"] != "r-1" || st["version"] != "v23" || st["endpoint"] != "fraud-scoring" || st["ready"] != true || st["errors"] != 1.0 || st["requests"] != 2.0 {
		t.Errorf("stats %v", st)
	}
	text := string(do(t, "GET", hs.URL+"/metrics", "").body)
	if got := metric(t, text, `nv_inference_request_failure{model="fraud-scoring",reason="REJECTED",version="v23"}`); got != 1 {
		t.Errorf("rejected failures %v, want 1", got)
	}
}

// The agent reads /v2/stats into the simulated replica's Stats and checks
// its replica id: the runtime's answer must decode into it with the same
// meaning.
func TestStatsDecodeAsTheSimulatedReplicas(t *testing.T) {
	t.Parallel()
	_, url := serve(t, modelDir(t, fraudConfig(), fraudModel(), "model.json"), &opened{}, runtime.Options{ReplicaID: "rep-9"})
	for range 3 {
		if r := do(t, "POST", url+"/predict", `{"instances": [{"amount": 1, "country": "us", "merchant": "travel"}, {"amount": 2, "country": "us", "merchant": "travel"}]}`); r.status != 200 {
			t.Fatalf("predict: %d", r.status)
		}
	}
	r := do(t, "GET", url+"/v2/stats", "")
	dec := json.NewDecoder(strings.NewReader(string(r.body)))
	dec.DisallowUnknownFields()
	var st replica.Stats
	if err := dec.Decode(&st); err != nil {
		t.Fatalf("decode /v2/stats into replica.Stats: %v: %s", err, r.body)
	}
	if st.ReplicaID != "rep-9" || st.Endpoint != "fraud-scoring" || st.Version != "v23" || st.Task != replica.TaskClassification ||
		!st.Ready || st.Requests != 3 || st.Errors != 0 || st.BatchSize != 2 || st.QueueDepth != 0 || st.InFlight != 0 {
		t.Fatalf("stats %+v", st)
	}
}
