package process

import (
	"context"
	"strings"
	"testing"

	"github.com/coder/quartz"

	"modelplane/agent"
	"modelplane/agent/catalog"
	"modelplane/busapi"
	"modelplane/internal/wait"
)

// TestSecurityVLLMRunsOfflineOnTheVersionsDraft: speculative.model was a
// free string handed to vLLM, which loads a hub id from the internet or
// any directory of the node. vLLM now runs with HF_HUB_OFFLINE=1 (the
// operator's Env cannot turn it off), its draft model is a directory of
// the replica's own model directory, and a draft naming anything outside
// it is refused before vLLM starts.
// Not parallel: the stand-in vllm is found through PATH (t.Setenv).
func TestSecurityVLLMRunsOfflineOnTheVersionsDraft(t *testing.T) {
	models := openDir(t)
	args := standIn(t, "vllm", `*) [ "$prev" = --port ] && port="$a" ;;`, models)
	d := newDriver(t, t.TempDir(), quartz.NewMock(t), func(c *Config) {
		c.Catalog = map[string]catalog.Entry{catalog.VLLM: catalog.Default()[catalog.VLLM]}
		c.Env = []string{"HF_HUB_OFFLINE=0"} // an operator's setting that would let it download
		c.Resolve = func(_ context.Context, s busapi.ReplicaSpec, _ string) (Launch, error) {
			return Launch{Runtime: catalog.VLLM, GPU: true, ModelDir: models}, nil
		}
	})
	s := spec("r-vllm-draft")
	s.Endpoint, s.Task, s.Runtime = "chat", "llm", catalog.VLLM
	s.Settings = []byte(`{"speculative":{"model":"draft","num_speculative_tokens":4}}`)
	r := start(t, d, s, "")
	ran := argsRun(t, args)
	want := `{"model":"` + models + `/draft","num_speculative_tokens":4}`
	if !strings.Contains(strings.Join(ran, " "), want) {
		t.Errorf("vllm ran with %q, want a --speculative-config %s", ran, want)
	}
	var e runtimeEnv
	wait.Eventually(t, long, func() bool {
		e = envWhenUp(r)
		return e.PID != 0
	}, "no /env")
	if v, _ := e.get("HF_HUB_OFFLINE"); v != "1" {
		t.Errorf("vllm runs with HF_HUB_OFFLINE=%q, want 1 (environ %q)", v, e.Environ)
	}
	for _, draft := range []string{"meta-llama/../../etc", "/var/lib/modelplane/cache/replicas/r-other", "../r-other", "draft/../../x"} {
		bad := spec("r-vllm-bad")
		bad.Endpoint, bad.Task, bad.Runtime = "chat", "llm", catalog.VLLM
		bad.Settings = []byte(`{"speculative":{"model":"` + draft + `","num_speculative_tokens":4}}`)
		if _, err := d.Start(t.Context(), bad, agent.StartOptions{}); err == nil || !strings.Contains(err.Error(), "is not a directory of the version's files") {
			t.Errorf("draft %q: start err = %v, want a refusal", draft, err)
		}
	}
}
