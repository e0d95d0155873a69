package registry_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"modelplane/registry"
)

// fraudInput is the demo fraud model's input schema: a number and two
// strings, which must be categorical features.
const fraudInput = `{"type":"object","properties":{"amount":{"type":"number","minimum":0},"merchant_category":{"type":"string"},"country":{"type":"string","minLength":2,"maxLength":2}},"required":["amount","merchant_category","country"]}`

const fraudOutput = `{"type":"object","properties":{"score":{"type":"number"},"label":{"type":"string","enum":["legit","fraud"]}}}`

// fraudServing is a valid serving metadata of that model.
func fraudServing() registry.Serving {
	return registry.Serving{
		Features: []registry.ServingFeature{{Name: "amount"},
			{Name: "merchant_category", Categories: []string{"grocery", "travel", "online"}, Encoding: "onehot"},
			{Name: "country", Categories: []string{"DE", "FR", "US"}, Encoding: "native"}},
		Output:       registry.ServingOutput{Classes: []string{"legit", "fraud"}, Threshold: 0.7},
		SampleInputs: []json.RawMessage{json.RawMessage(`{"amount":12.5,"merchant_category":"travel","country":"FR"}`)},
	}
}

func (f *fixture) fraudModel(t *testing.T, name string, task string) {
	t.Helper()
	if _, err := f.svc.CreateModel(t.Context(), f.riskEng, registry.ModelSpec{Team: "risk", Name: name, Task: task,
		InputSchema: json.RawMessage(fraudInput), OutputSchema: json.RawMessage(fraudOutput),
		FeatureNames: []string{"amount", "merchant_category", "country"}}); err != nil {
		t.Fatal(err)
	}
}

// TestServingStoredAndShown: the serving metadata, categorical features
// and class names included, is stored with the version and read back as
// registered; without features, the model's feature_names are the
// features.
func TestServingStoredAndShown(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	f.fraudModel(t, "fraud", registry.TaskClassification)
	if _, err := f.svc.RegisterVersion(ctx, f.riskEng, "fraud", registry.VersionSpec{Name: "v1", Runtime: "xgboost", Format: "xgboost-json",
		ArtifactURI: "s3://m/fraud/v1", Serving: fraudServing()}, upload{{"model.json", []byte("{}")}}.manifest(), nil); err != nil {
		t.Fatal(err)
	}
	got, err := f.svc.Version(ctx, f.riskViewer, "fraud", "v1")
	if err != nil {
		t.Fatal(err)
	}
	if g, w := jsonOf(got.Serving), jsonOf(fraudServing()); !reflect.DeepEqual(g, w) {
		t.Errorf("serving = %v, want %v", g, w)
	}
	if got.Status != registry.StatusRegistered || got.Validation != nil {
		t.Errorf("status %q, validation %+v; want registered and no validation for an external artifact", got.Status, got.Validation)
	}

	// A version without serving metadata registers as before it existed,
	// string properties and all (the demo's simulated versions).
	if _, err := f.svc.RegisterVersion(ctx, f.riskEng, "fraud", registry.VersionSpec{Name: "v0", Runtime: "onnxruntime",
		Resources: registry.Resources{GPUCount: 1, GPUMemoryMB: 1024}, ArtifactURI: "s3://m/fraud/v0", Format: "safetensors"},
		upload{{"model.safetensors", safetensors}}.manifest(), nil); err != nil {
		t.Fatalf("version without serving metadata: %v", err)
	}

	if _, err := f.svc.CreateModel(ctx, f.riskEng, registry.ModelSpec{Team: "risk", Name: "plain", Task: registry.TaskRegression,
		FeatureNames: []string{"a", "b"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.RegisterVersion(ctx, f.riskEng, "plain", registry.VersionSpec{Name: "v1", Runtime: "xgboost", Format: "xgboost-json",
		ArtifactURI: "s3://m/plain/v1"}, upload{{"model.json", []byte("{}")}}.manifest(), nil); err != nil {
		t.Fatal(err)
	}
	got, err = f.svc.Version(ctx, f.riskViewer, "plain", "v1")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Serving.Features) != 2 || got.Serving.Features[0].Name != "a" || got.Serving.Features[1].Name != "b" {
		t.Errorf("features = %+v, want the model's feature_names a, b", got.Serving.Features)
	}
}

// TestServingRejected: bad serving metadata is refused with the field
// named, and nothing is stored.
func TestServingRejected(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	f.fraudModel(t, "fraud", registry.TaskClassification)
	f.fraudModel(t, "amount", registry.TaskRegression)
	cases := []struct {
		name   string
		model  string
		change func(*registry.Serving)
		field  string
		says   string
	}{
		{"an unknown encoding is refused", "fraud", func(s *registry.Serving) { s.Features[2].Encoding = "hashed" }, "metadata.serving.features[2].encoding", "onehot or native"},
		{"an encoding needs categories", "fraud", func(s *registry.Serving) { s.Features[0].Encoding = "onehot" }, "metadata.serving.features[0].encoding", "needs categories"},
		{"categories on a numeric feature are refused", "fraud", func(s *registry.Serving) { s.Features[0].Categories = []string{"low", "high"} }, "metadata.serving.features[0].categories", "numeric feature"},
		{"a string feature needs categories", "fraud", func(s *registry.Serving) { s.Features[1].Categories = nil; s.Features[1].Encoding = "" }, "metadata.serving.features[1].categories", "list its categories"},
		{"a feature not in the input schema is refused", "fraud", func(s *registry.Serving) { s.Features[0].Name = "amt" }, "metadata.serving.features[0].name", "not a property"},
		{"a feature named twice is refused", "fraud", func(s *registry.Serving) { s.Features[2] = s.Features[0] }, "metadata.serving.features[2].name", "twice"},
		{"a category listed twice is refused", "fraud", func(s *registry.Serving) { s.Features[2].Categories = []string{"DE", "DE"} }, "metadata.serving.features[2].categories[1]", "listed once"},
		{"a class the output schema does not allow is refused", "fraud", func(s *registry.Serving) { s.Output.Classes = []string{"ok", "fraud"} }, "metadata.serving.output.classes[0]", "output_schema"},
		{"a threshold of 1 is refused", "fraud", func(s *registry.Serving) { s.Output.Threshold = 1 }, "metadata.serving.output.threshold", "between 0 and 1"},
		{"a regression has no classes", "amount", func(s *registry.Serving) { s.Output.Threshold = 0 }, "metadata.serving.output.classes", "regression"},
		{"a sample input failing the input schema is refused", "fraud", func(s *registry.Serving) {
			s.SampleInputs = []json.RawMessage{json.RawMessage(`{"amount":-3,"merchant_category":"travel","country":"FR"}`)}
		}, "metadata.serving.sample_inputs[0]", "input_schema"},
		{"a sample input with an unknown category is refused", "fraud", func(s *registry.Serving) {
			s.SampleInputs = []json.RawMessage{json.RawMessage(`{"amount":3,"merchant_category":"casino","country":"FR"}`)}
		}, "metadata.serving.sample_inputs[0].merchant_category", "categories"},
		{"a sample input that is not an object is refused", "fraud", func(s *registry.Serving) {
			s.SampleInputs = []json.RawMessage{json.RawMessage(`[1,2,3]`)}
		}, "metadata.serving.sample_inputs[0]", "object"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sv := fraudServing()
			c.change(&sv)
			before := f.versions(t)
			_, err := f.svc.RegisterVersion(ctx, f.riskEng, c.model, registry.VersionSpec{Name: "v" + string(rune('a'+i)), Runtime: "xgboost",
				Format: "xgboost-json", ArtifactURI: "s3://m/x", Serving: sv}, upload{{"model.json", []byte("{}")}}.manifest(), nil)
			if !strings.Contains(errString(err), c.says) || !hasField(err, c.field) {
				t.Fatalf("err = %v (fields %v), want %s saying %q", err, fields(err), c.field, c.says)
			}
			if n := f.versions(t); n != before {
				t.Errorf("versions %d → %d; a refused registration stores nothing", before, n)
			}
		})
	}
}

// jsonOf is v as generic JSON, which compares whatever order the keys of
// an object were stored in.
func jsonOf(v any) any {
	b, _ := json.Marshal(v)
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
