package registry_test

import (
	"testing"

	"modelplane/egress"
	"modelplane/registry"
)

// TestExternalArtifactHostAllowList checks that an https:// artifact URI is
// accepted only for a host on the operator's egress allow-list, and never
// for an address no outbound call may reach (metadata, loopback), so a
// version cannot make the platform fetch from inside its own network.
func TestExternalArtifactHostAllowList(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.svc.WithEgress(&egress.Policy{Hosts: []string{"artifacts.example.com", "169.254.169.254", "127.0.0.1"}})
	f.model(t, "ext")
	man := upload{{"model.safetensors", safetensors}}.manifest()
	for i, tc := range []struct {
		uri string
		ok  bool
	}{
		{"https://artifacts.example.com/ext/v1.onnx", true},
		{"https://evil.example.com/ext/v1.onnx", false},
		{"https://169.254.169.254/latest/meta-data/", false},
		{"https://127.0.0.1:9000/ext.onnx", false},
		{"s3://models/ext/v1", true}, // not fetched over the internet by the platform's client
	} {
		_, err := f.svc.RegisterVersion(t.Context(), f.riskEng, "ext",
			registry.VersionSpec{Name: "v" + string(rune('1'+i)), Runtime: "onnxruntime", Format: "onnx", ArtifactURI: tc.uri}, man, nil)
		if tc.ok && err != nil {
			t.Errorf("RegisterVersion(%s): %v", tc.uri, err)
		}
		if !tc.ok && !hasField(err, "metadata.artifact_uri") {
			t.Errorf("RegisterVersion(%s) = %v, want refused on metadata.artifact_uri", tc.uri, err)
		}
	}
}
