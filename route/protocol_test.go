package route_test

import (
	"testing"

	"modelplane/artifact"
	"modelplane/busapi"
	"modelplane/db"
	"modelplane/endpoint"
	"modelplane/registry"
	"modelplane/route"
)

// TestEntryNamesTheProtocolOfV2OnlyRuntimes: a Triton version's routing
// entry says it speaks only V2 and names the model Triton serves (the
// registry model), so the gateway translates its calls; a version of a
// runtime that speaks /predict carries neither.
func TestEntryNamesTheProtocolOfV2OnlyRuntimes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	store, err := artifact.NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	man := []byte(`{"model.onnx":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}`)
	if _, err := registry.New(f.pool, store, artifact.Limits{}).RegisterVersion(ctx, f.eng, "fraud", registry.VersionSpec{Name: "v3",
		Runtime: "onnxruntime", Format: "onnx", ArtifactURI: "s3://models/fraud/v3",
		// On a GPU like v1: an endpoint serves on one kind of hardware.
		Resources: registry.Resources{GPUCount: 1, GPUMemoryMB: 4096}}, man, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := f.eps.SetTraffic(ctx, f.eng, "fraud-ep", []endpoint.Weight{{Version: "v1", Weight: 90}, {Version: "v3", Weight: 10}}); err != nil {
		t.Fatal(err)
	}
	if err := db.InTx(ctx, f.pool, func(q *db.Queries) error { _, err := route.Write(ctx, q, f.fraudID, f.now); return err }); err != nil {
		t.Fatal(err)
	}
	rt, _ := f.route(t, "fraud-ep")
	got := map[string]busapi.RouteVersion{}
	for _, v := range rt.Versions {
		got[v.Name] = v
	}
	if v := got["v1"]; v.Protocol != busapi.ProtocolV2 || v.V2Model != "fraud" {
		t.Errorf("triton v1 = protocol %q model %q, want %q and fraud", v.Protocol, v.V2Model, busapi.ProtocolV2)
	}
	if v, ok := got["v3"]; !ok || v.Protocol != "" || v.V2Model != "" {
		t.Errorf("onnxruntime v3 = %+v (listed %v), want no protocol: it speaks /predict", v, ok)
	}
}
