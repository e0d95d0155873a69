package versioncheck_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"modelplane/artifact"
	"modelplane/gguf"
	"modelplane/llm"
	"modelplane/registry"
)

// demoGGUF is the demo model's file (llm.WriteDemo, F16).
func demoGGUF(t *testing.T) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := llm.WriteDemo(&b, gguf.F16); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// withQ5 is the demo file with its first matrix retyped Q5_0, a type the
// built-in runtime does not run (the bytes are zeros of Q5_0's size).
func withQ5(t *testing.T, demo []byte) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "demo.gguf")
	if err := os.WriteFile(path, demo, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var tensors []gguf.Tensor
	retyped := false
	for _, ti := range f.Tensors {
		tt := gguf.Tensor{Name: ti.Name, Dims: ti.Dims, Type: ti.Type, Data: make([]byte, ti.Size)}
		if !retyped && len(ti.Dims) == 2 && ti.Dims[0]%32 == 0 {
			n, err := ti.Elements()
			if err != nil {
				t.Fatal(err)
			}
			tt.Type, tt.Data, retyped = gguf.Q5_0, make([]byte, n/32*22), true
		}
		tensors = append(tensors, tt)
	}
	var b bytes.Buffer
	if err := gguf.Write(&b, f.KV, tensors); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestValidationGGUF validates builtin-llm versions of GGUF files: the
// demo model is validated by a real load and a generated token; a file of
// another architecture, one with a Q5_0 tensor and one that needs more
// memory than its version requests are invalid with the reason; a
// truncated file never becomes a version that could run.
func TestValidationGGUF(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	if _, err := f.reg.CreateModel(ctx, f.eng, registry.ModelSpec{Team: "risk", Name: "chat", Task: registry.TaskLLM}); err != nil {
		t.Fatal(err)
	}
	demo := demoGGUF(t)
	register := func(name string, body []byte, memoryMB int32) error {
		sum := sha256.Sum256(body)
		man := artifact.Manifest{"model.gguf": hex.EncodeToString(sum[:])}
		_, err := f.reg.RegisterVersion(ctx, f.eng, "chat", registry.VersionSpec{Name: name, Runtime: "builtin-llm",
			Resources: registry.Resources{CPUCores: 1, MemoryMB: memoryMB}}, man.Canonical(),
			func(u *artifact.Upload) error {
				return u.Add(context.Background(), "model.gguf", bytes.NewReader(body))
			})
		return err
	}
	for _, v := range []struct {
		name   string
		body   []byte
		memory int32
	}{
		{"good", demo, 256},
		// Every "llama" in the header (the architecture and its keys' prefix)
		// becomes "mamba": a consistent file of an architecture not run.
		{"arch", bytes.ReplaceAll(demo, []byte("llama"), []byte("mamba")), 256},
		{"q5", withQ5(t, demo), 256},
		{"small", demo, 8},
	} {
		if err := register(v.name, v.body, v.memory); err != nil {
			t.Fatalf("register %s: %v", v.name, err)
		}
	}
	// Truncated: refused at upload, or invalid at validation; never a
	// version that validates.
	truncErr := register("truncated", demo[:len(demo)/2], 256)

	if _, err := f.validator.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	good := f.version(t, "chat", "good")
	if good.Status != registry.StatusValidated || good.Validation == nil || good.Validation.LoadMS == nil {
		t.Fatalf("good = %q %+v; want validated with its load time", good.Status, good.Validation)
	}
	for name, says := range map[string]string{
		"arch":  "mamba",
		"q5":    "Q5_0",
		"small": "resources.memory_mb is 8",
	} {
		v := f.version(t, "chat", name)
		if v.Validation != nil {
			t.Logf("%s: %s", name, v.Validation.Reason)
		}
		if v.Status != registry.StatusInvalid || v.Validation == nil || !strings.Contains(v.Validation.Reason, says) {
			t.Errorf("%s = %q %+v; want invalid with a reason naming %q", name, v.Status, v.Validation, says)
		}
	}
	if truncErr != nil {
		t.Logf("truncated: refused at upload: %v", truncErr)
	} else if v := f.version(t, "chat", "truncated"); v.Status != registry.StatusInvalid || v.Validation == nil || v.Validation.Reason == "" {
		t.Errorf("truncated = %q %+v; want invalid with the reason", v.Status, v.Validation)
	} else {
		t.Logf("truncated: %s", v.Validation.Reason)
	}
}
