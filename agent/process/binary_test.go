package process

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/coder/quartz"

	"modelplane/agent"
	"modelplane/agent/catalog"
	"modelplane/busapi"
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
		c.Resolve = func(_ context.Context, s busapi.ReplicaSpec, _ string) (Launch, error) {
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

// TestShippedEntriesListedByTheirPrograms: the shipped vLLM, Triton and
// llama-server entries build their command lines from settings, so the
// node's runtimes follow their programs on PATH: none of them on an empty
// PATH, each once its program is there. Not parallel: it sets PATH.
func TestShippedEntriesListedByTheirPrograms(t *testing.T) {
	bin := t.TempDir()
	t.Setenv("PATH", bin)
	d := newDriver(t, t.TempDir(), quartz.NewMock(t), func(c *Config) {
		for _, name := range []string{catalog.VLLM, catalog.Triton, catalog.LlamaServer, catalog.Builtin} {
			c.Catalog[name] = catalog.Default()[name]
		}
	})
	if got := d.Runtimes(); slices.Contains(got, catalog.VLLM) || slices.Contains(got, catalog.Triton) ||
		slices.Contains(got, catalog.LlamaServer) || !slices.Contains(got, catalog.Builtin) {
		t.Fatalf("runtimes on an empty PATH = %v; want the built-in runtime only of the shipped ones", got)
	}
	for _, prog := range []string{"vllm", "tritonserver", "llama-server"} {
		if err := os.WriteFile(filepath.Join(bin, prog), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	got := d.Runtimes()
	for _, name := range []string{catalog.VLLM, catalog.Triton, catalog.LlamaServer, catalog.Builtin} {
		if !slices.Contains(got, name) {
			t.Errorf("runtimes with the programs on PATH = %v; want %s among them", got, name)
		}
	}
}
