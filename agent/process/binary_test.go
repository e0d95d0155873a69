package process

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/coder/quartz"

	"modelplane/agent"
	"modelplane/agent/catalog"
	"modelplane/agent/proto"
)

// TestRuntimeBinaryMissingFailsTheReplicaNamingTheNode: a vLLM replica on
// a node without vllm is refused at start with "vllm not found on node
// N", which the agent reports as the replica's failure reason, and the
// node's runtimes do not list vllm.
func TestRuntimeBinaryMissingFailsTheReplicaNamingTheNode(t *testing.T) {
	t.Parallel()
	d := newDriver(t, t.TempDir(), quartz.NewMock(t), func(c *Config) {
		c.Node = "cpu-7"
		c.Catalog[catalog.VLLM] = catalog.Entry{Name: catalog.VLLM, Command: []string{"modelplane-test-no-such-vllm", "serve", "{model_dir}"},
			Health: "/health", Ready: "/v1/models", Metrics: "/metrics", Adapter: catalog.AdapterVLLM}
		models := openDir(t)
		c.Resolve = func(_ context.Context, s proto.ReplicaSpec, _ string) (Launch, error) {
			return Launch{Runtime: s.Runtime, ModelDir: models}, nil
		}
	})
	s := spec("r-vllm")
	s.Runtime = catalog.VLLM
	_, err := d.Start(t.Context(), s, agent.StartOptions{})
	if !errors.Is(err, ErrNoBinary) || !strings.Contains(err.Error(), "modelplane-test-no-such-vllm not found on node cpu-7") {
		t.Fatalf("start err = %v, want one saying the binary is not found on node cpu-7", err)
	}
	if len(d.Running()) != 0 {
		t.Error("a replica without its binary is running")
	}
	got := d.Runtimes()
	if slices.Contains(got, catalog.VLLM) || !slices.Contains(got, "fake") {
		t.Errorf("runtimes = %v, want the fake runtime and not vllm", got)
	}
	// The fake runtime on the same driver still starts.
	s2 := spec("r-fake")
	s2.Runtime = "fake"
	waitReady(t, start(t, d, s2, ""))
}
