package registry_test

import (
	"strings"
	"testing"

	"modelplane/registry"
)

// TestSecurityDraftModelFromTheManifest: speculative.model was a free
// string vLLM loads: a hub id downloaded outside the artifact pipeline
// (unchecked, unscanned), or any directory of the node, another team's
// cached weights among them. It must now name a directory of the
// version's own files.
func TestSecurityDraftModelFromTheManifest(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.model(t, "chat")
	man := upload{{"model.safetensors", safetensors}, {"draft/model.safetensors", safetensors}}.manifest()
	register := func(name, draft string) error {
		_, err := f.svc.RegisterVersion(t.Context(), f.riskEng, "chat", registry.VersionSpec{Name: name, Runtime: "vllm",
			Format: "safetensors", ArtifactURI: "s3://models/chat/" + name,
			Serving: registry.Serving{LLM: &registry.ServingLLM{Speculative: &registry.ServingSpecDec{Model: draft, NumTokens: 4}}}}, man, nil)
		return err
	}
	for _, tc := range []struct{ name, draft, want string }{
		{"hub-id", "meta-llama/Llama-3.2-1B", `"meta-llama/Llama-3.2-1B" is not a directory of the version's files`},
		{"node-path", "/var/lib/modelplane/cache/replicas/r-other", "must be a directory of the version's files"},
		{"dotdot", "../r-other", "must be a directory of the version's files"},
		{"a-file", "model.safetensors", "is not a directory of the version's files"},
	} {
		err := register(tc.name, tc.draft)
		if err == nil || !strings.Contains(err.Error(), "metadata.serving.llm.speculative.model") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("draft %q: %v, want a refusal of speculative.model containing %q", tc.draft, err, tc.want)
		}
	}
	if err := register("good", "draft"); err != nil {
		t.Errorf("draft of the version's files: %v", err)
	}
}
