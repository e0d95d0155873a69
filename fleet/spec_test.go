package fleet_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"reflect"
	"testing"

	"modelplane/artifact"
	"modelplane/registry"
	"modelplane/serveapi"
)

// TestDesiredSpecCarriesWhatTheRuntimeNeeds: a replica of an uploaded
// version names its runtime, format, version id and the digest of its
// manifest, and a built-in runtime gets its settings; a version whose files
// live elsewhere has no manifest digest, since the store cannot serve it.
func TestDesiredSpecCarriesWhatTheRuntimeNeeds(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	store, err := artifact.NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(f.pool, store, artifact.Limits{})
	if _, err := reg.CreateModel(ctx, f.eng, registry.ModelSpec{Team: "risk", Name: "scorer", Task: registry.TaskClassification,
		FeatureNames: []string{"amount", "age"}}); err != nil {
		t.Fatal(err)
	}
	file := safetensors()
	sum := sha256.Sum256(file)
	man := artifact.Manifest{"model.safetensors": hex.EncodeToString(sum[:])}
	serving := registry.Serving{
		Features:     []registry.ServingFeature{{Name: "amount"}, {Name: "age"}, {Name: "country", Categories: []string{"DE", "FR"}, Encoding: "native"}},
		Output:       registry.ServingOutput{Classes: []string{"legit", "fraud"}, Threshold: 0.7},
		SampleInputs: []json.RawMessage{json.RawMessage(`{"amount":12.5,"age":40,"country":"FR"}`)},
	}
	v, err := reg.RegisterVersion(ctx, f.eng, "scorer", registry.VersionSpec{Name: "s1", Runtime: "onnxruntime",
		Resources: registry.Resources{GPUCount: 1, GPUMemoryMB: 4096}, Serving: serving}, man.Canonical(), func(u *artifact.Upload) error {
		return u.Add(context.Background(), "model.safetensors", bytes.NewReader(file))
	})
	if err != nil {
		t.Fatal(err)
	}
	f.heartbeat(t, "node-a", gpus(0, 2, "A100-80GB", seven1g()))
	f.endpoint(t, "scorer-ep", "scorer", "s1", "mig-1g.10gb", "standard", 1)
	f.endpoint(t, "fraud-ep", "fraud", "v1", "mig-1g.10gb", "standard", 1)
	if p := f.reconcile(t); p.Placed != 2 {
		t.Fatalf("pass = %+v, want 2 placed", p)
	}
	d := f.desired(t, "node-a")
	if len(d.Replicas) != 2 {
		t.Fatalf("desired = %+v, want 2 replicas", d)
	}
	for _, r := range d.Replicas {
		switch r.Endpoint {
		case "scorer-ep":
			if r.Manifest != man.Digest() || r.Runtime != "onnxruntime" || r.Format != "safetensors" || r.VersionID != v.ID {
				t.Errorf("scorer replica = %+v; want manifest %s, runtime onnxruntime, format safetensors, version id %d", r, man.Digest(), v.ID)
			}
			var cfg serveapi.Config
			if err := json.Unmarshal(r.Settings, &cfg); err != nil {
				t.Fatalf("settings %s: %v", r.Settings, err)
			}
			if cfg.Model != "scorer-ep" || cfg.Version != "s1" || len(cfg.Features) != 3 || cfg.Features[0].Name != "amount" || cfg.Features[1].Name != "age" {
				t.Errorf("settings = %+v; want the endpoint, version and features in order", cfg)
			}
			var got, want any
			b, _ := json.Marshal(map[string]any{"features": cfg.Features, "output": cfg.Output, "sample_inputs": cfg.SampleInputs})
			_ = json.Unmarshal(b, &got)
			b, _ = json.Marshal(map[string]any{"features": []serveapi.Feature{{Name: "amount"}, {Name: "age"}, {Name: "country", Categories: []string{"DE", "FR"}, Encoding: "native"}},
				"output": serveapi.Output{Classes: []string{"legit", "fraud"}, Threshold: 0.7}, "sample_inputs": serving.SampleInputs})
			_ = json.Unmarshal(b, &want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("settings' serving part = %v, want the version's %v", got, want)
			}
		case "fraud-ep":
			if r.Manifest != "" || r.Runtime != "triton" || r.Format != "onnx" || len(r.Settings) != 0 {
				t.Errorf("fraud replica = %+v; want no manifest (s3 artifact), runtime triton, no settings", r)
			}
		}
	}
}

// safetensors is a small valid safetensors file.
func safetensors() []byte {
	header := []byte(`{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`)
	var b bytes.Buffer
	_ = binary.Write(&b, binary.LittleEndian, uint64(len(header)))
	b.Write(header)
	b.Write([]byte{0, 0, 128, 63})
	return b.Bytes()
}
