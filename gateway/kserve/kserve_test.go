package kserve_test

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"modelplane/gateway/kserve"
	"modelplane/serveapi"
)

var fraud = kserve.New("fraud", []string{"amount", "age", "night", "score"}, kserve.TaskClassification)

func TestRequest(t *testing.T) {
	t.Parallel()
	got, n, err := fraud.Request([]byte(`{"instances":[{"amount":12.5,"age":40,"night":true,"score":-1e-3,"ignored":"x"},[1,2,false,3]]}`), "req-1")
	if err != nil || n != 2 {
		t.Fatal(n, err)
	}
	want := `{"id":"req-1","inputs":[{"name":"input__0","datatype":"FP32","shape":[2,4],"data":[12.5,40,1,-0.001,1,2,0,3]}]}`
	if string(got) != want {
		t.Errorf("request =\n%s\nwant\n%s", got, want)
	}
	if fraud.Path() != "/v2/models/fraud/infer" {
		t.Errorf("path = %s", fraud.Path())
	}
	if p := kserve.New("a b/c", nil, "").Path(); p != "/v2/models/a%20b%2Fc/infer" {
		t.Errorf("escaped path = %s", p)
	}
}

func TestRequestRefusesWhatOneFP32TensorCannotCarry(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, body, field string
	}{
		{"missing feature", `{"instances":[{"amount":1,"age":2,"night":3,"score":4},{"amount":1,"age":2,"score":4}]}`, "instances/1/night"},
		{"string feature", `{"instances":[{"amount":"12","age":2,"night":3,"score":4}]}`, "instances/0/amount"},
		{"null feature", `{"instances":[{"amount":1,"age":null,"night":3,"score":4}]}`, "instances/0/age"},
		{"out of FP32 range", `{"instances":[[1,2,3,1e39]]}`, "instances/0/score"},
		{"array too short", `{"instances":[[1,2,3]]}`, "instances/0"},
		{"not an object", `{"instances":[7]}`, "instances/0"},
		{"no instances", `{"instances":[]}`, "instances"},
		{"not JSON", `{"instances":`, "body"},
	} {
		_, _, err := fraud.Request([]byte(tt.body), "x")
		var ie *kserve.InputError
		if !errors.As(err, &ie) || ie.Field != tt.field {
			t.Errorf("%s: err = %v, want an input error on %s", tt.name, err, tt.field)
		}
	}
}

// A model with no feature_names is served with its own tensors: the
// instances' rows stacked into one tensor per input, the datatype read
// from the JSON, and the answer's outputs split back into rows.
func TestTensorModel(t *testing.T) {
	t.Parallel()
	tr := kserve.New("bert-embedder", nil, kserve.TaskRegression)
	body, n, err := tr.Request([]byte(`{"instances":[
		{"input_ids":[2,17,3],"attention_mask":[1,1,1],"text":"a"},
		{"input_ids":[2,9,3],"attention_mask":[1,1,0],"text":"b"}]}`), "r1")
	if err != nil || n != 2 {
		t.Fatalf("request: %d, %v", n, err)
	}
	want := `{"id":"r1","inputs":[{"name":"attention_mask","datatype":"INT64","shape":[2,3],"data":[1,1,1,1,1,0]},` +
		`{"name":"input_ids","datatype":"INT64","shape":[2,3],"data":[2,17,3,2,9,3]},` +
		`{"name":"text","datatype":"BYTES","shape":[2],"data":["a","b"]}]}`
	if string(body) != want {
		t.Errorf("request\n got %s\nwant %s", body, want)
	}
	ans, err := tr.Response([]byte(`{"model_name":"bert-embedder","outputs":[{"name":"embedding","datatype":"FP32","shape":[2,2],"data":[0.5,-1,0.25,2]}]}`), 2, "v5")
	if err != nil || string(ans) != `{"predictions":[{"embedding":[0.5,-1]},{"embedding":[0.25,2]}],"model_version":"v5"}` {
		t.Errorf("response %s, %v", ans, err)
	}
	for _, tc := range []struct{ body, field string }{
		{`{"instances":[{"x":[1,2]},{"x":[1,2,3]}]}`, "instances/1/x"},
		{`{"instances":[{"x":[[1,2],[3]]}]}`, "instances/0/x"},
		{`{"instances":[{"x":[1]},{"y":[1]}]}`, "instances/1/x"},
		{`{"instances":[{"x":["a"]},{"x":[1]}]}`, "instances/1/x"},
		{`{"instances":[[1,2]]}`, "instances/0"},
	} {
		var ie *kserve.InputError
		if _, _, err := tr.Request([]byte(tc.body), ""); !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("%s: err = %v, want an input error on %s", tc.body, err, tc.field)
		}
	}
	if _, err := tr.Response([]byte(`{"outputs":[{"name":"e","datatype":"FP32","shape":[1,2],"data":[1,2]}]}`), 2, "v5"); !errors.Is(err, kserve.ErrAnswer) {
		t.Errorf("an output of 1 row for 2 instances: err = %v, want ErrAnswer", err)
	}
}

// answer is /predict's answer as a client decodes it.
type answer = serveapi.PredictResponse[serveapi.Prediction]

func recorded(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func translate(t *testing.T, tr *kserve.Translator, file string, n int) answer {
	t.Helper()
	b, err := tr.Response(recorded(t, file), n, "v7")
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var a answer
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatalf("%s: %s: %v", file, b, err)
	}
	if a.ModelVersion != "v7" || len(a.Predictions) != n {
		t.Fatalf("%s: %s; want %d predictions of v7", file, b, n)
	}
	return a
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

func TestResponseOfRecordedTritonAnswers(t *testing.T) {
	t.Parallel()
	a := translate(t, fraud, "triton_fil_binary_proba.json", 3)
	for i, w := range []struct {
		label string
		score float64
	}{{"negative", 0.026758527}, {"positive", 0.9187871}, {"positive", 0.5}} {
		p := a.Predictions[i]
		if p.Label != w.label || p.Score == nil || !near(*p.Score, w.score) || !near(p.Probabilities["negative"]+p.Probabilities["positive"], 1) {
			t.Errorf("FIL proba %d = %+v, want %s at %v with both probabilities", i, p, w.label, w.score)
		}
	}
	a = translate(t, fraud, "triton_binary_margin_1d.json", 2)
	if p := a.Predictions[0]; p.Label != "negative" || !near(*p.Score, 0.25) || p.Probabilities != nil {
		t.Errorf("one probability per row = %+v, want negative at 0.25", p)
	}
	a = translate(t, fraud, "triton_onnx_sklearn.json", 2)
	if p := a.Predictions[0]; p.Label != "positive" || !near(*p.Score, 0.88) {
		t.Errorf("sklearn ONNX = %+v, want the FP32 probabilities (positive at 0.88), not the INT64 label", p)
	}
	intent := kserve.New("intent", []string{"x"}, kserve.TaskClassification)
	a = translate(t, intent, "triton_multiclass.json", 2)
	if p := a.Predictions[0]; p.Label != "1" || !near(*p.Score, 0.7) || len(p.Probabilities) != 3 {
		t.Errorf("multiclass = %+v, want class 1 at 0.7 of three", p)
	}
	price := kserve.New("price", []string{"x"}, kserve.TaskRegression)
	a = translate(t, price, "triton_fil_regression.json", 2)
	if p := a.Predictions[1]; p.Value == nil || *p.Value != 98.5 || p.Label != "" || p.Score != nil {
		t.Errorf("regression = %+v, want value 98.5", p)
	}
	if msg := kserve.ErrorMessage(recorded(t, "triton_error_shape.json")); !strings.Contains(msg, "unexpected shape for input 'input__0'") {
		t.Errorf("error message = %q", msg)
	}
}

func TestResponseRefusesAnAnswerThatDoesNotFit(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, body string }{
		{"fewer rows than instances", `{"outputs":[{"name":"output__0","datatype":"FP32","shape":[2,2],"data":[1,2,3,4]}]}`},
		{"data short of the shape", `{"outputs":[{"name":"output__0","datatype":"FP32","shape":[3,2],"data":[1,2,3]}]}`},
		{"no numeric output", `{"outputs":[{"name":"label","datatype":"BYTES","shape":[3],"data":["a","b","c"]}]}`},
		{"three dimensions", `{"outputs":[{"name":"output__0","datatype":"FP32","shape":[3,1,1],"data":[1,2,3]}]}`},
		{"strings in a number tensor", `{"outputs":[{"name":"output__0","datatype":"FP32","shape":[3],"data":["1","2","3"]}]}`},
		{"not JSON", `<html>`},
	} {
		if _, err := fraud.Response([]byte(tt.body), 3, "v1"); !errors.Is(err, kserve.ErrAnswer) {
			t.Errorf("%s: err = %v, want ErrAnswer", tt.name, err)
		}
	}
}

func FuzzRequest(f *testing.F) {
	f.Add([]byte(`{"instances":[{"amount":1,"age":2,"night":true,"score":4}]}`))
	f.Add([]byte(`{"instances":[[1,2,3,4],[5,6,7,8]]}`))
	f.Add([]byte(`{"instances":[{"amount":"x"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		out, n, err := fraud.Request(body, "id")
		if err != nil {
			return
		}
		if n < 1 {
			t.Fatalf("translated %s with %d instances", body, n)
		}
		var v struct {
			Inputs []struct {
				Shape []int64   `json:"shape"`
				Data  []float32 `json:"data"`
			} `json:"inputs"`
		}
		if err := json.Unmarshal(out, &v); err != nil || len(v.Inputs) != 1 || int64(len(v.Inputs[0].Data)) != v.Inputs[0].Shape[0]*4 {
			t.Fatalf("translated %s into %s (%v)", body, out, err)
		}
	})
}

func FuzzResponse(f *testing.F) {
	for _, name := range []string{"triton_fil_binary_proba.json", "triton_onnx_sklearn.json", "triton_multiclass.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, 3)
	}
	f.Fuzz(func(t *testing.T, body []byte, n int) {
		if n < 1 || n > 1000 {
			return
		}
		out, err := fraud.Response(body, n, "v1")
		if err != nil {
			return
		}
		var a answer
		if err := json.Unmarshal(out, &a); err != nil || len(a.Predictions) != n {
			t.Fatalf("translated %s into %s (%v)", body, out, err)
		}
	})
}

// Any body a tensor model's translation accepts becomes a V2 request whose
// every input holds as many values as its shape says.
func FuzzTensorRequest(f *testing.F) {
	tr := kserve.New("m", nil, kserve.TaskRegression)
	f.Add([]byte(`{"instances":[{"input_ids":[2,17,3],"attention_mask":[1,1,1]}]}`))
	f.Add([]byte(`{"instances":[{"x":[[1.5,2],[3,4]],"s":"a","b":true},{"x":[[1,2],[3,4]],"s":"b","b":false}]}`))
	f.Add([]byte(`{"instances":[{"x":[]},{"x":[1]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		out, n, err := tr.Request(body, "id")
		if err != nil {
			return
		}
		var v struct {
			Inputs []struct {
				Shape []int64         `json:"shape"`
				Data  json.RawMessage `json:"data"`
			} `json:"inputs"`
		}
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatalf("translated %s into invalid JSON %s: %v", body, out, err)
		}
		for _, in := range v.Inputs {
			var vals []json.RawMessage
			if err := json.Unmarshal(in.Data, &vals); err != nil {
				t.Fatalf("translated %s: data %s: %v", body, in.Data, err)
			}
			count := int64(1)
			for _, d := range in.Shape {
				count *= d
			}
			if in.Shape[0] != int64(n) || int64(len(vals)) != count {
				t.Fatalf("translated %s: shape %v with %d values for %d instances", body, in.Shape, len(vals), n)
			}
		}
	})
}
