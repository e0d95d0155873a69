package registry_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"modelplane/field"
	"modelplane/registry"
)

// A version's sim profile is checked when it is registered, so the fleet
// never meets one it cannot run.
func TestRegisterVersionChecksSimProfile(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.model(t, "llama")
	up := upload{{"model.safetensors", safetensors}}
	for _, tc := range []struct {
		name, sim, want string
	}{
		{"unknown key", `{"decode_base_ms":12,"kv_mb_per_token":0.8,"usable_gb":13,"warp":9}`, "warp"},
		{"wrong case", `{"Decode_Base_MS":12,"kv_mb_per_token":0.8,"usable_gb":13}`, "Decode_Base_MS"},
		{"not an object", `[1]`, "JSON object"},
	} {
		spec := registry.VersionSpec{Name: "v-" + strings.ReplaceAll(tc.name, " ", "-"), Runtime: "vllm", Sim: json.RawMessage(tc.sim)}
		_, err := f.svc.RegisterVersion(context.Background(), f.riskEng, "llama", spec, up.manifest(), up.files())
		var verrs field.Errors
		if !errors.As(err, &verrs) || verrs[0].Field != "metadata.sim" || !strings.Contains(verrs[0].Message, tc.want) {
			t.Errorf("%s: err = %v; want a metadata.sim field error naming %q", tc.name, err, tc.want)
		}
	}
	ok := registry.VersionSpec{Name: "v-ok", Runtime: "vllm", Sim: json.RawMessage(`{"prefill_ms_per_token":0.05,"decode_base_ms":12,"decode_ms_per_seq":0.35,"kv_mb_per_token":0.8,"usable_gb":13}`)}
	if _, err := f.svc.RegisterVersion(context.Background(), f.riskEng, "llama", ok, up.manifest(), up.files()); err != nil {
		t.Errorf("valid LLM profile refused: %v", err)
	}
}
