package process

import (
	"context"
	"slices"
	"testing"

	"github.com/coder/quartz"

	"modelplane/agent/catalog"
	"modelplane/busapi"
	"modelplane/internal/wait"
)

// TestHeartbeatNamesWhatTheRuntimeDoesNotExport: a llama-server build
// without the KV gauge reports its tokens but not its KV use, and the
// heartbeat names kv_used_pct absent rather than reading 0 (beside the
// fields llama-server never exports); a runtime whose metrics cannot be
// read reports every metrics field absent.
func TestHeartbeatNamesWhatTheRuntimeDoesNotExport(t *testing.T) {
	t.Parallel()
	nc, kv := agentEnv(t)
	d := newDriver(t, t.TempDir(), quartz.NewMock(t), func(c *Config) {
		llama := fake("-llamacpp-nokv")
		llama.Name, llama.Adapter = "fake-llama", catalog.AdapterLlamaCPP
		broken := fake()
		broken.Name, broken.Metrics = "fake-broken", "/no-metrics-here"
		c.Catalog = map[string]catalog.Entry{llama.Name: llama, broken.Name: broken}
		resolve := c.Resolve
		c.Resolve = func(ctx context.Context, s busapi.ReplicaSpec, dir string) (Launch, error) {
			l, err := resolve(ctx, s, dir)
			l.Runtime = s.Runtime
			return l, err
		}
	})
	a := startAgent(t, nc, "cpu-9", t.TempDir(), d)
	llama, broken := spec("r-llama"), spec("r-broken")
	llama.Runtime, broken.Runtime = "fake-llama", "fake-broken"
	broken.Slots = []busapi.Slot{{GPU: 1, Slice: 0}}
	putDesired(t, kv, "cpu-9", 1, llama, broken)
	wait.Eventually(t, long, func() bool {
		return replicaStatus(a, llama.ID).State == busapi.StateReady && replicaStatus(a, broken.ID).State == busapi.StateReady
	}, "replicas never ready: %v", wait.Show(func() any { return a.Status().Replicas }))

	rs := replicaStatus(a, llama.ID)
	want := []string{busapi.MetricRequests, busapi.MetricKVUsedPct, busapi.MetricTTFTMS, busapi.MetricGPUUtil, busapi.MetricBatchQueueMS, busapi.MetricPromptTokens}
	if !slices.Equal(rs.Absent, want) || rs.Runtime != "fake-llama" {
		t.Errorf("llama-server without KV: absent %q, runtime %q; want %q from fake-llama", rs.Absent, rs.Runtime, want)
	}
	if !rs.Reports(busapi.MetricTokensPerSecond) || rs.Reports(busapi.MetricKVUsedPct) || rs.KVUsedPct != 0 {
		t.Errorf("heartbeat %+v: want tokens/s reported and KV use absent", rs)
	}
	// Its token counter travels, at 0 before any request; the
	// prompt-token counter it does not export is nil, not 0.
	if rs.Tokens == nil || *rs.Tokens != 0 || rs.PromptTokens != nil {
		t.Errorf("counters: tokens %v, prompt tokens %v; want a reported 0 and none", rs.Tokens, rs.PromptTokens)
	}
	// The GPU fallback of a simulated replica (its utilisation) does not
	// fill a field the runtime named absent.
	if rs.GPUUtil != 0 {
		t.Errorf("gpu_util = %v for a runtime that does not export it, want 0 and absent", rs.GPUUtil)
	}
	if got := replicaStatus(a, broken.ID).Absent; !slices.Equal(got, busapi.Metrics) {
		t.Errorf("runtime whose metrics answer 404: absent %q, want every field %q", got, busapi.Metrics)
	}
}
