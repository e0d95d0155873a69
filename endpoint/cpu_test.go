package endpoint_test

import (
	"testing"

	"modelplane/artifact"
	"modelplane/endpoint"
	"modelplane/registry"
)

// TestCreateDerivesRuntimeAndCPUProfile checks the create defaults of CPU
// serving: the runtime comes from the version, and an endpoint of a version
// that needs no GPU gets the cpu profile, while one of a GPU version must
// name its profile.
func TestCreateDerivesRuntimeAndCPUProfile(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	cpuSettings := settings
	cpuSettings.InstanceProfile = ""
	got, err := f.svc.Create(ctx, f.riskEng, endpoint.Spec{Name: "fraud-cpu", Model: "fraud", Version: "v1", Settings: cpuSettings})
	if err != nil {
		t.Fatal(err)
	}
	if got.Runtime != "triton" || got.InstanceProfile != endpoint.ProfileCPU {
		t.Errorf("Create without runtime and profile = runtime %q profile %q; want the version's triton and cpu", got.Runtime, got.InstanceProfile)
	}

	store, err := artifact.NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	man := []byte(`{"model.onnx":"` + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" + `"}`)
	if _, err := registry.New(f.pool, store, artifact.Limits{}).RegisterVersion(ctx, f.riskEng, "fraud", registry.VersionSpec{Name: "g1",
		Runtime: "triton", Format: "onnx", ArtifactURI: "s3://models/fraud/g1", Resources: registry.Resources{GPUCount: 1, GPUMemoryMB: 4096}},
		man, nil); err != nil {
		t.Fatal(err)
	}
	_, err = f.svc.Create(ctx, f.riskEng, endpoint.Spec{Name: "fraud-gpu", Model: "fraud", Version: "g1", Settings: cpuSettings})
	if fe := fieldErrors(err); len(fe) != 1 || fe[0].Field != "instance_profile" {
		t.Errorf("Create of a GPU version without a profile: error = %v; want one field error on instance_profile", err)
	}
	e, err := f.svc.Create(ctx, f.riskEng, endpoint.Spec{Name: "fraud-gpu", Model: "fraud", Version: "g1", Settings: settings})
	if err != nil || e.InstanceProfile != settings.InstanceProfile || e.Runtime != "triton" {
		t.Errorf("Create of a GPU version with a profile = %+v, %v; want profile %s, runtime triton", e, err, settings.InstanceProfile)
	}
	_, err = f.svc.Create(ctx, f.riskEng, endpoint.Spec{Name: "fraud-bad", Model: "fraud", Version: "g1", Runtime: "onnxruntime", Settings: settings})
	if fe := fieldErrors(err); len(fe) != 1 || fe[0].Field != "runtime" {
		t.Errorf("Create with another runtime than the version's: error = %v; want one field error on runtime", err)
	}
}
