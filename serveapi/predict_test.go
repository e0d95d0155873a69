package serveapi_test

import (
	"encoding/json"
	"testing"

	"modelplane/serveapi"
)

func ptr(f float64) *float64 { return &f }

// The answer's bytes are what the runtime, the simulated replicas and the
// gateway's V2 translation put on the wire; callers compare them.
func TestPredictResponseWire(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		p    serveapi.Prediction
		want string
	}{
		{"classifier", serveapi.Prediction{Label: "fraud", Score: ptr(0.75)},
			`{"predictions":[{"label":"fraud","score":0.75}],"model_version":"v1"}`},
		{"classifier scoring 0", serveapi.Prediction{Label: "legit", Score: ptr(0)},
			`{"predictions":[{"label":"legit","score":0}],"model_version":"v1"}`},
		{"binary classifier with probabilities", serveapi.Prediction{Label: "b", Score: ptr(0.5), Probabilities: map[string]float64{"b": 0.5, "a": 0.5}},
			`{"predictions":[{"label":"b","score":0.5,"probabilities":{"a":0.5,"b":0.5}}],"model_version":"v1"}`},
		{"regressor", serveapi.Prediction{Value: ptr(-1.5)},
			`{"predictions":[{"value":-1.5}],"model_version":"v1"}`},
		{"regressor with several outputs", serveapi.Prediction{Values: []float64{1, 2}},
			`{"predictions":[{"values":[1,2]}],"model_version":"v1"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := json.Marshal(serveapi.PredictResponse[serveapi.Prediction]{Predictions: []serveapi.Prediction{tt.p}, ModelVersion: "v1"})
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.want {
				t.Errorf("answer = %s; want %s", b, tt.want)
			}
		})
	}
}

// A reader of any runtime's answers gets each prediction as written.
func TestPredictResponseRaw(t *testing.T) {
	t.Parallel()
	var r serveapi.PredictResponse[json.RawMessage]
	if err := json.Unmarshal([]byte(`{"predictions":[0.5,"cat",{"label":"x"}],"model_version":"v2"}`), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Predictions) != 3 || string(r.Predictions[1]) != `"cat"` || r.ModelVersion != "v2" {
		t.Errorf("answer = %+v; want three raw predictions from v2", r)
	}
}
